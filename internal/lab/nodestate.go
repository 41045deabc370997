package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/octopus-mcs/octopus/internal/gather"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
)

// NodeState is `octopus gather`'s node collector for a lab: the lab's nodes are network
// namespaces of this machine, so their kernel state is read by running ip and nft inside
// each (root), and the Octopus components, which the lab runs as supervised processes rather
// than pods, are represented by their logs under Dir.
type NodeState struct {
	// Dir is the lab's directory (Options.Dir of Up).
	Dir string
}

var _ gather.NodeCollector = NodeState{}

// nodeCommands are the kernel state taken from every namespace: one file each, every command's
// output under a "# command" line.
var nodeCommands = []struct {
	file string
	cmds [][]string
}{
	{"addresses.txt", [][]string{{"ip", "-d", "address", "show"}}},
	{"links.txt", [][]string{{"ip", "-d", "-s", "link", "show"}}},
	{"routes.txt", [][]string{{"ip", "-4", "route", "show", "table", "all"}, {"ip", "-6", "route", "show", "table", "all"}}},
	{"rules.txt", [][]string{{"ip", "-4", "rule", "show"}, {"ip", "-6", "rule", "show"}}},
	{"neighbours.txt", [][]string{{"ip", "neigh", "show"}, {"bridge", "fdb", "show"}}},
	{"nftables.txt", [][]string{{"nft", "list", "ruleset"}}},
}

// processLogLimit bounds each process log taken: the end of it, where a failure shows.
const processLogLimit = 2 << 20

// Describe names the lab for the archive's index.
func (n NodeState) Describe() string { return "the lab in " + n.Dir }

// CollectNodes adds, per lab namespace (nodes, LANs, the underlay; not the pods'), the files
// of nodeCommands under <namespace>/, and the logs of the lab's Octopus processes (agents,
// gateways, route agents) under processes/.
func (n NodeState) CollectNodes(ctx context.Context, add func(string, []byte), skip func(string, error)) error {
	dir, err := canonicalDir(n.Dir)
	if err != nil {
		return err
	}
	id := labnet.LabID(dir)
	namespaces, _, err := labnet.Leftovers(id)
	if err != nil {
		return err
	}
	if len(namespaces) == 0 {
		return fmt.Errorf("no network namespace of the lab in %s (ID %s) exists: is it up?", dir, id)
	}
	// wireguard-go runs inside the gateway process and is configured there, without a UAPI
	// socket (internal/datapath/tunnel/wireguard), so no tool outside the process can list its peers.
	skip("WireGuard peers", errors.New("the gateways configure wireguard-go in their own process, without a UAPI socket; the tunnels they run are in the Peers' status (hub/peers.yaml)"))
	for _, ns := range namespaces {
		if strings.HasPrefix(ns, labnet.PodNetnsPrefix(id)) {
			continue
		}
		name := strings.TrimPrefix(ns, labnet.NetnsOwnerPrefix(id))
		for _, c := range nodeCommands {
			var out strings.Builder
			for _, argv := range c.cmds {
				fmt.Fprintf(&out, "# %s\n", strings.Join(argv, " "))
				b, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, argv...)...).CombinedOutput()
				out.Write(b)
				if err != nil {
					skip(name+"/"+c.file, fmt.Errorf("%s: %w", strings.Join(argv, " "), err))
				}
			}
			add(name+"/"+c.file, []byte(out.String()))
		}
	}
	logs, err := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	if err != nil {
		return err
	}
	for _, l := range logs {
		base := filepath.Base(l)
		if !octopusProcess(strings.TrimSuffix(base, ".log")) {
			continue
		}
		data, err := tail(l, processLogLimit)
		if err != nil {
			skip("processes/"+base, err)
			continue
		}
		add("processes/"+base, data)
	}
	return nil
}

// octopusProcess tells the lab's Octopus processes from its control planes and kube-proxies,
// whose logs are large and rarely what a report is about.
func octopusProcess(name string) bool {
	// "agent-" is the prefix of the agents' process names (startAgent).
	for _, prefix := range []string{GatewayProcessName(""), RouteAgentProcessName(""), "agent-"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// tail returns the last limit bytes of the file at path.
func tail(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		if _, err := f.Seek(st.Size()-limit, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(f)
}
