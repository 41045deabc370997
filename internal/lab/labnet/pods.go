package labnet

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/octopus-mcs/octopus/internal/procfs"
)

// PodNetnsPrefix is the prefix of every pod namespace of the lab with the given ID.
func PodNetnsPrefix(id string) string { return NetnsOwnerPrefix(id) + podNetnsInfix }

// PodNetnsName names the namespace of the pod with the given UID.
func PodNetnsName(id, uid string) string { return PodNetnsPrefix(id) + uid }

// NodeConfig is what a node's namespace needs so that its pods reach the rest of the cluster.
type NodeConfig struct {
	// Netns is the node's namespace.
	Netns string
	// ClusterPodCIDR is the whole cluster's pod range: traffic leaving it is masqueraded
	// (see nodeNFTTable), and routes inside it are the ones ConfigureNode owns.
	ClusterPodCIDR netip.Prefix
	// ClusterPodCIDR6 is the IPv6 pod range of a dual-stack cluster: IPv6 forwarding is
	// turned on and routes inside it are ConfigureNode's too. Pods keep their IPv6 source
	// address everywhere (every IPv6 address of the lab is in IPv6Range, where the lab
	// masquerades nothing). Optional.
	ClusterPodCIDR6 netip.Prefix
	// PeerRoutes maps every other node's pod CIDRs to that node's LAN address of the same
	// family: pods on other nodes are reached straight over the cluster LAN, as with a
	// host-gateway CNI.
	PeerRoutes map[netip.Prefix]netip.Addr
}

// RouteServices routes a cluster's service CIDR out of the LAN link of the node namespace
// netns via gw. A cluster's own nodes route it onto their LAN (Apply); a hub gateway node,
// whose only link to the API servers is its uplink, needs it for host-network pods that reach
// the API server at its Service address, as in-cluster clients do (kube-proxy translates it).
func RouteServices(netns string, services netip.Prefix, gw netip.Addr) error {
	node, err := openNamespace(netns)
	if err != nil {
		return err
	}
	defer node.Close()
	return node.replaceRoute(services, gw)
}

// ConfigureNode turns IP forwarding on in the node's namespace, sets its routes to the other
// nodes' pod CIDRs to exactly PeerRoutes (deleting routes of ours inside ClusterPodCIDR that
// are no longer wanted, e.g. of a deleted node) and installs the masquerade table. It is
// idempotent.
func ConfigureNode(c NodeConfig) error {
	if err := configureNode(c); err != nil {
		return fmt.Errorf("configuring node namespace %s for pods: %w", c.Netns, err)
	}
	return nil
}

func configureNode(c NodeConfig) error {
	err := inNamespace(c.Netns, func() error {
		// A new namespace starts with forwarding off; the node forwards between its pods'
		// veths and the LAN like any Kubernetes node.
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
			return err
		}
		if !c.ClusterPodCIDR6.IsValid() {
			return nil
		}
		return os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644)
	})
	if err != nil {
		return fmt.Errorf("turning IP forwarding on: %w", err)
	}
	node, err := openNamespace(c.Netns)
	if err != nil {
		return err
	}
	defer node.Close()
	lan, err := node.link(nodeLANName)
	if err != nil {
		return err
	}
	routes, err := node.RouteList(lan, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("listing routes on %s: %w", nodeLANName, err)
	}
	var errs []error
	for _, r := range routes {
		if r.Protocol != routeProtocol || r.Dst == nil {
			continue
		}
		dst, err := netip.ParsePrefix(r.Dst.String())
		ours := c.ClusterPodCIDR.Overlaps(dst) || c.ClusterPodCIDR6.IsValid() && c.ClusterPodCIDR6.Overlaps(dst)
		if err != nil || !ours {
			continue // the API and service routes of Apply, not ours to manage here
		}
		if gw, ok := c.PeerRoutes[dst]; ok && r.Gw != nil && r.Gw.Equal(gw.AsSlice()) {
			continue
		}
		if err := node.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("deleting stale route %s: %w", dst, err))
		}
	}
	for dst, gw := range c.PeerRoutes {
		errs = append(errs, node.replaceRoute(dst, gw))
	}
	errs = append(errs, applyMasquerade(c.Netns, c.ClusterPodCIDR))
	return errors.Join(errs...)
}

// NonMasqueradeCIDRs are where pod traffic keeps its pod source address: every cluster's pod
// and service ranges in the lab are inside 10.0.0.0/8 (see lab.MaxClusters), so a pod reaching
// a pod or Service of another cluster through the gateways is seen with its own address there.
// This is ip-masq-agent's default nonMasqueradeCIDRs (which also lists the other RFC 1918
// ranges, not used by the lab). The hub's default globalnet pool (hub.DefaultGlobalnetPool) is
// exempt too: a globalnet cluster's pods must reach the active gateway with their own address,
// which the gateway translates to the cluster's (or the pod's) egress range
// (docs/architecture.md §6h). Only traffic leaving these (the API servers, the uplink) is
// masqueraded.
var NonMasqueradeCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("242.0.0.0/8")}

// applyMasquerade (re)writes nodeNFTTable in the node namespace in one nft
// transaction: add then flush makes it idempotent and replaces whatever an earlier run left.
func applyMasquerade(netnsName string, clusterPodCIDR netip.Prefix) error {
	script := fmt.Sprintf(`add table ip %[1]s
flush table ip %[1]s
add chain ip %[1]s postrouting { type nat hook postrouting priority srcnat + 10; policy accept; }
add rule ip %[1]s postrouting ip saddr %[2]s ip daddr != %[2]s ip daddr != { %[3]s } masquerade
`, nodeNFTTable, clusterPodCIDR.Masked(), prefixList(NonMasqueradeCIDRs))
	return inNamespace(netnsName, func() error {
		// nft inherits the network namespace of the (locked) thread that forks it.
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("installing nftables table %s: %w: %s", nodeNFTTable, err, bytes.TrimSpace(out))
		}
		return nil
	})
}

// InNamespace runs f on an OS thread switched into the named network namespace; sockets f
// creates belong to that namespace (the lab's readiness probes dial from a node this way).
func InNamespace(name string, f func() error) error { return inNamespace(name, f) }

// DialTCP connects to addr from inside the named namespace.
func DialTCP(netnsName string, addr netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	var conn net.Conn
	err := inNamespace(netnsName, func() error {
		// The socket is created in the thread's namespace by the dial's socket(2), which runs
		// on this goroutine; the connect may finish on any thread.
		var err error
		conn, err = net.DialTimeout("tcp", addr.String(), timeout)
		return err
	})
	return conn, err
}

// KillProcessesIn SIGKILLs every process whose network namespace is one of the named ones
// and waits for them to go. Every process in a lab namespace is the lab's (a pod's container,
// its children, kube-proxy), so this finds also what no pidfile names: the children a shell
// or socat forked, orphaned when `lab up` was killed. Missing namespaces are skipped.
func KillProcessesIn(names []string, timeout time.Duration) error {
	inodes := namespaceInodes(names)
	if len(inodes) == 0 {
		return nil
	}
	return procfs.KillUntilGone(func() ([]int, error) { return pidsIn(inodes) }, "in lab namespaces", timeout)
}

// namespaceInodes maps the inode of each named namespace that exists to its name: a process's
// /proc/<pid>/ns/net has the same inode as the namespace it is in.
func namespaceInodes(names []string) map[uint64]string {
	inodes := map[uint64]string{}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Stat(NetnsPath(n), &st); err == nil && isMountedNamespace(NetnsPath(n)) {
			inodes[st.Ino] = n
		}
	}
	return inodes
}

// pidsIn lists live processes (not zombies) whose network namespace has one of the inodes.
func pidsIn(inodes map[uint64]string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) != nil {
			continue // gone meanwhile
		}
		if _, ours := inodes[st.Ino]; !ours || !procfs.Alive(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// prefixList writes prefixes as the elements of an nft anonymous set.
func prefixList(prefixes []netip.Prefix) string {
	out := make([]string, len(prefixes))
	for i, p := range prefixes {
		out[i] = p.String()
	}
	return strings.Join(out, ", ")
}
