package hostfirewall

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
)

const testPort = 45000

// newNamespace is a fresh network namespace with loopback up, deleted when the test ends.
// Datagrams to 127.0.0.1 are delivered locally, so they traverse the input hook like a
// tunnel packet arriving from another node.
func newNamespace(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace (run the tests as root; CI does)")
	}
	ns := fmt.Sprintf("hfw%d", os.Getpid()%100000)
	tunneltest.Run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("deleting namespace %s: %v: %s", ns, err, out)
		}
	})
	tunneltest.Run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	return ns
}

// delivered tells whether a UDP datagram sent in ns to 127.0.0.1:testPort reaches a socket.
func delivered(t *testing.T, ns string) bool {
	t.Helper()
	var got bool
	tunneltest.In(t, ns, func() {
		l, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: testPort})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		c, err := net.DialUDP("udp4", nil, l.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("tunnel")); err != nil {
			t.Fatal(err)
		}
		_ = l.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		buf := make([]byte, 16)
		_, _, err = l.ReadFromUDP(buf)
		got = err == nil
	})
	return got
}

// TestKernelAcceptDoesNotOverrideHostDrop measures what the package comment claims: our
// accept opens the port where nothing else filters it, our chain sees the packet before a host
// firewall's chain at filter priority, and a drop there still wins over our accept.
func TestKernelAcceptDoesNotOverrideHostDrop(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	var f *Firewall
	if err := tunneltest.InErr(ns, func() (err error) {
		if f, err = New(); err != nil {
			return err
		}
		return f.Open(ctx, testPort)
	}); err != nil {
		t.Fatal(err)
	}
	listed := tunneltest.Run(t, "ip", "netns", "exec", ns, "nft", "list", "table", "inet", owner.HostFirewallNFTTable)
	for _, want := range []string{"hook input priority filter - 10", fmt.Sprintf("udp dport %d counter packets", testPort), "accept"} {
		if !strings.Contains(listed, want) {
			t.Fatalf("nft list table lacks %q:\n%s", want, listed)
		}
	}
	if !delivered(t, ns) {
		t.Fatal("datagram to the opened port not delivered with only our table loaded")
	}

	// The host's own firewall: a later base chain on the same hook that drops the port.
	// Its drop is final although our earlier chain accepted: accept only ends our chain.
	tunneltest.Run(t, "ip", "netns", "exec", ns, "nft", fmt.Sprintf(
		"add table inet host; add chain inet host input { type filter hook input priority filter; policy accept; }; add rule inet host input udp dport %d drop", testPort))
	if delivered(t, ns) {
		t.Fatal("datagram delivered although the host's own chain drops the port: the package comment is wrong, update it")
	}
	if c := counter(t, ns); c < 2 {
		t.Fatalf("our chain counted %d packets, want 2 (it runs before the host's chain and saw the dropped one too)", c)
	}
	// A host chain with a drop policy behaves the same: policies are verdicts of their own chain.
	tunneltest.Run(t, "ip", "netns", "exec", ns, "nft", "flush chain inet host input; chain inet host input { policy drop; }")
	if delivered(t, ns) {
		t.Fatal("datagram delivered although the host's input chain has policy drop")
	}

	if err := tunneltest.InErr(ns, func() error { return f.Close(ctx) }); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", owner.HostFirewallNFTTable).CombinedOutput(); err == nil {
		t.Fatalf("table still there after Close:\n%s", out)
	}
	if err := tunneltest.InErr(ns, func() error { return f.Close(ctx) }); err != nil {
		t.Fatalf("closing twice: %v", err)
	}
}

// counter is the packet count of our accept rule.
func counter(t *testing.T, ns string) int {
	t.Helper()
	listed := tunneltest.Run(t, "ip", "netns", "exec", ns, "nft", "list", "table", "inet", owner.HostFirewallNFTTable)
	var n int
	if i := strings.Index(listed, "counter packets "); i < 0 {
		t.Fatalf("no counter in:\n%s", listed)
	} else if _, err := fmt.Sscanf(listed[i:], "counter packets %d", &n); err != nil {
		t.Fatalf("reading the counter: %v\n%s", err, listed)
	}
	return n
}
