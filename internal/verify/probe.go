package verify

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/octopus-mcs/octopus/internal/workload"
)

// curlArgv is the client pod's HTTP request: curl prints the body and then, on a line of its
// own, the total time in seconds, so the latency is the pod's own measurement and not the
// API server's exec round trip.
//
// family ("IPv4", "IPv6" or "") makes curl resolve a name to that family only (-4, -6): the
// check of one family of a dual-stack pair must not pass over the other.
func curlArgv(host string, port int, timeout time.Duration, family string) []string {
	secs := max(1, int(timeout.Seconds()))
	argv := []string{"curl", "-sS", "--max-time", strconv.Itoa(secs)}
	switch family {
	case workload.FamilyIPv4:
		argv = append(argv, "-4")
	case workload.FamilyIPv6:
		argv = append(argv, "-6")
	}
	return append(argv, "-w", "\n%{time_total}\n", "http://"+net.JoinHostPort(host, strconv.Itoa(port))+"/")
}

// digArgv resolves name's A and AAAA records through the pod's resolver (the cluster DNS,
// which forwards clusterset.local).
func digArgv(name string, timeout time.Duration) []string {
	secs := max(1, int(timeout.Seconds()))
	return []string{"dig", "+short", "+time=" + strconv.Itoa(secs), "+tries=1", name, "A", name, "AAAA"}
}

// answer is what the echo server replied: "cluster=X node=Y pod=Z ... client=A:P path=/".
type answer struct {
	Cluster, Node, Pod string
	Latency            time.Duration
}

// parseCurl splits curl's output (curlArgv) into the echo server's answer and the latency.
func parseCurl(out string) (answer, error) {
	out = strings.TrimRight(out, "\n")
	i := strings.LastIndexByte(out, '\n')
	if i < 0 {
		return answer{}, fmt.Errorf("unexpected reply %q", out)
	}
	body, timing := strings.TrimSpace(out[:i]), strings.TrimSpace(out[i+1:])
	secs, err := strconv.ParseFloat(timing, 64)
	if err != nil {
		return answer{}, fmt.Errorf("unexpected timing %q after reply %q", timing, body)
	}
	a := answer{Latency: time.Duration(secs * float64(time.Second))}
	for _, f := range strings.Fields(body) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "cluster":
			a.Cluster = v
		case "node":
			a.Node = v
		case "pod":
			a.Pod = v
		}
	}
	if a.Cluster == "" || a.Pod == "" {
		return a, fmt.Errorf("the reply %q is not the probe server's (no cluster= and pod=)", body)
	}
	return a, nil
}

// fromServer checks that the answer came from the probe server of cluster want: the server
// names its cluster because verify sets CLUSTER_NAME in its pod, so an answer from the
// client's own cluster (a misrouted service, say) is caught.
func (a answer) fromServer(want string) error {
	if a.Cluster != want || a.Pod != serverName {
		return fmt.Errorf("answered by pod %s of cluster %s, want %s of %s", a.Pod, a.Cluster, serverName, want)
	}
	return nil
}

// String says who answered.
func (a answer) String() string {
	return fmt.Sprintf("answered by %s/%s on node %s", a.Cluster, a.Pod, a.Node)
}

// parseDig returns the addresses in dig +short's output, skipping CNAME targets.
func parseDig(out string) []netip.Addr {
	var addrs []netip.Addr
	for _, line := range strings.Split(out, "\n") {
		if a, err := netip.ParseAddr(strings.TrimSpace(line)); err == nil {
			addrs = append(addrs, a)
		}
	}
	return addrs
}
