package podfence

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
)

const testPort = 45001

// TestKernelGuard runs the guard against the kernel: a "node" namespace with an interface named
// octgw to a "pod" namespace, a VPC gateway's outside veth (node end octx…, no address) to a
// "vpc" namespace that holds the VPC's external address, another interface to an "outside"
// namespace, a TCP listener on all of the node's addresses (a service such as the kubelet's)
// and a DNAT of a ClusterIP to the outside's listener (a service as kube-proxy makes it). The
// pod's block is one of the guard's protected CIDRs: the VPC reaches it before, not after, and
// the pod still reaches the VPC's external address.
func TestKernelGuard(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces (run the tests as root; CI does)")
	}
	id := os.Getpid() % 100000
	node, pod, outside, vpc := fmt.Sprintf("ggn%d", id), fmt.Sprintf("ggp%d", id), fmt.Sprintf("ggo%d", id), fmt.Sprintf("ggv%d", id)
	for _, ns := range []string{node, pod, outside, vpc} {
		tunneltest.Run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("deleting namespace %s: %v: %s", ns, err, out)
			}
		})
		tunneltest.Run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	gatewayAddr, podAddr := netip.MustParseAddr("10.112.0.1"), netip.MustParseAddr("10.112.0.5")
	nodeOther, outsideAddr := netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2")
	for _, l := range []struct {
		name, peerNS, peerName string
		addr, peerAddr         netip.Addr
		bits                   int
	}{
		{"octgw", pod, "net1", gatewayAddr, podAddr, 16},
		{"eth0", outside, "eth0", nodeOther, outsideAddr, 24},
	} {
		tunneltest.Run(t, "ip", "-n", node, "link", "add", l.name, "type", "veth", "peer", "name", l.peerName, "netns", l.peerNS)
		tunneltest.Run(t, "ip", "-n", node, "addr", "add", fmt.Sprintf("%s/%d", l.addr, l.bits), "dev", l.name)
		tunneltest.Run(t, "ip", "-n", l.peerNS, "addr", "add", fmt.Sprintf("%s/%d", l.peerAddr, l.bits), "dev", l.peerName)
		tunneltest.Run(t, "ip", "-n", node, "link", "set", l.name, "up")
		tunneltest.Run(t, "ip", "-n", l.peerNS, "link", "set", l.peerName, "up")
	}
	// As on the secondary network, the pod routes what is not on its link to the gateway.
	tunneltest.Run(t, "ip", "-n", pod, "route", "add", "default", "via", gatewayAddr.String())
	// As podport's VPC gateway: the external address alone on its side, a default route out of
	// it, the node routing the address to the link and forwarding for it.
	vpcLink, externalAddr := "octx0123", netip.MustParseAddr("10.98.0.7")
	tunneltest.Run(t, "ip", "-n", node, "link", "add", vpcLink, "type", "veth", "peer", "name", "ext", "netns", vpc)
	tunneltest.Run(t, "ip", "-n", vpc, "addr", "add", externalAddr.String()+"/32", "dev", "ext")
	tunneltest.Run(t, "ip", "-n", node, "link", "set", vpcLink, "up")
	tunneltest.Run(t, "ip", "-n", vpc, "link", "set", "ext", "up")
	// The next hop as podport's: link-local, fixed to the node end's MAC (the node answers
	// ARP only for its own addresses).
	nodeEnd, err := exec.Command("ip", "-n", node, "-br", "link", "show", vpcLink).Output()
	if err != nil || len(strings.Fields(string(nodeEnd))) < 3 {
		t.Fatalf("reading %s's MAC: %v: %s", vpcLink, err, nodeEnd)
	}
	tunneltest.Run(t, "ip", "-n", vpc, "neigh", "replace", "169.254.0.1", "lladdr", strings.Fields(string(nodeEnd))[2], "dev", "ext", "nud", "permanent")
	tunneltest.Run(t, "ip", "-n", vpc, "route", "add", "default", "via", "169.254.0.1", "dev", "ext", "onlink")
	tunneltest.Run(t, "ip", "-n", node, "route", "add", externalAddr.String()+"/32", "dev", vpcLink)
	tunneltest.Run(t, "ip", "netns", "exec", node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	tunneltest.Run(t, "ip", "-n", outside, "route", "add", externalAddr.String()+"/32", "via", nodeOther.String())
	// A service as kube-proxy makes one: the node DNATs a ClusterIP to an endpoint beyond it.
	serviceIP := netip.MustParseAddr("10.96.0.10")
	for _, rule := range [][]string{
		{"add", "table", "ip", "kubeproxy"},
		{"add", "chain", "ip", "kubeproxy", "prerouting", "{ type nat hook prerouting priority -100 ; }"},
		{"add", "rule", "ip", "kubeproxy", "prerouting", "ip", "daddr", serviceIP.String(), "tcp", "dport", fmt.Sprint(testPort), "dnat", "to", outsideAddr.String()},
	} {
		tunneltest.Run(t, append([]string{"ip", "netns", "exec", node, "nft"}, rule...)...)
	}
	listen(t, node)
	listen(t, pod)
	listen(t, outside)
	to := func(a netip.Addr) netip.AddrPort { return netip.AddrPortFrom(a, testPort) }
	for _, from := range []string{pod, vpc} {
		for _, a := range []netip.Addr{gatewayAddr, nodeOther} {
			if err := reach(from, to(a)); err != nil {
				t.Fatalf("before the guard, %s cannot reach the node's service at %s either: %v", from, a, err)
			}
		}
	}
	if err := reach(vpc, to(serviceIP)); err != nil {
		t.Fatalf("before the guard, the VPC cannot reach the cluster's service at %s either: %v", serviceIP, err)
	}
	// A pod of the cluster, by plain forwarding: no DNAT, no address of the node's.
	if err := reach(vpc, to(podAddr)); err != nil {
		t.Fatalf("before the guard, the VPC cannot reach the cluster's pod at %s either: %v", podAddr, err)
	}
	listen(t, vpc)

	g, ctx := (*Guard)(nil), context.Background()
	if err := tunneltest.InErr(node, func() (err error) {
		if g, err = New(); err != nil {
			return err
		}
		return g.Guard(ctx, testLinks)
	}); err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{pod, vpc} {
		for _, a := range []netip.Addr{gatewayAddr, nodeOther} {
			if err := connect(from, to(a)); err == nil {
				t.Fatalf("%s still reaches the node's service at %s through the guard", from, a)
			}
		}
	}
	if err := connect(vpc, to(serviceIP)); err == nil {
		t.Fatalf("the VPC still reaches the cluster's service at %s through the guard", serviceIP)
	}
	if err := connect(vpc, to(podAddr)); err == nil {
		t.Fatalf("the VPC still reaches the cluster's pod at %s through the guard (a protected CIDR)", podAddr)
	}
	if c := dropped(t, node); c < 6 {
		t.Fatalf("the drop rules counted %d packets, want the six SYNs at least", c)
	}
	// What the cluster opens to the VPC's external address still gets its replies.
	if err := reach(pod, to(externalAddr)); err != nil {
		t.Errorf("a pod of the cluster no longer reaches the VPC's external address (replies dropped): %v", err)
	}
	if err := reach(vpc, to(outsideAddr)); err != nil {
		t.Errorf("the VPC's traffic is not forwarded out of the node any more: %v", err)
	}
	if err := tunneltest.Ping(vpc, nodeOther, 3*time.Second); err != nil {
		t.Errorf("the VPC gateway cannot ping the node any more: %v", err)
	}
	if err := tunneltest.Ping(pod, gatewayAddr, 3*time.Second); err != nil {
		t.Errorf("a pod cannot ping its gateway any more: %v", err)
	}
	if err := reach(node, to(podAddr)); err != nil {
		t.Errorf("the node cannot reach a pod any more (replies dropped): %v", err)
	}
	if err := reach(outside, to(nodeOther)); err != nil {
		t.Errorf("the node's other interface is guarded too: %v", err)
	}
	// Idempotent: a second Guard leaves the same ruleset.
	before := list(t, node)
	if err := tunneltest.InErr(node, func() error { return g.Guard(ctx, testLinks) }); err != nil {
		t.Fatal(err)
	}
	if after := list(t, node); stripCounters(after) != stripCounters(before) {
		t.Fatalf("a second Guard changed the table:\n%s\nwas:\n%s", after, before)
	}
}

// listen accepts TCP connections on every address of ns at testPort, closing each at once.
func listen(t *testing.T, ns string) {
	t.Helper()
	var l net.Listener
	tunneltest.In(t, ns, func() {
		var err error
		if l, err = net.Listen("tcp4", fmt.Sprintf(":%d", testPort)); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
}

// connect opens a TCP connection from ns to dst within a second.
// reach is connect for what must succeed: tried for up to 10 s, since on a loaded machine the
// first SYN over links just set up can be lost, and its retransmission comes after connect's
// one-second bound. What must fail is tried once, with connect.
func reach(ns string, dst netip.AddrPort) error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if err = connect(ns, dst); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

func connect(ns string, dst netip.AddrPort) error {
	return tunneltest.InErr(ns, func() error {
		c, err := net.DialTimeout("tcp4", dst.String(), time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

func list(t *testing.T, ns string) string {
	t.Helper()
	return tunneltest.Run(t, "ip", "netns", "exec", ns, "nft", "list", "table", "inet", owner.GatewayGuardNFTTable)
}

// dropped is the packet count of the drop rules, the fence's and the forward chain's.
func dropped(t *testing.T, ns string) int {
	t.Helper()
	listed := list(t, ns)
	total, counters := 0, strings.Split(listed, "counter packets ")[1:]
	if len(counters) != 4 {
		t.Fatalf("%d counters, want 4 (fence, DNAT, protected IPv4 and IPv6), in:\n%s", len(counters), listed)
	}
	for _, c := range counters {
		var n int
		if _, err := fmt.Sscanf(c, "%d", &n); err != nil {
			t.Fatalf("reading a counter: %v\n%s", err, listed)
		}
		total += n
	}
	return total
}

// stripCounters drops the counters' values, which the probes above change.
func stripCounters(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if i := strings.Index(line, "counter packets"); i >= 0 {
			line = line[:i] + "counter"
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}
