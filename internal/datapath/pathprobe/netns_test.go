package pathprobe_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/octopus-mcs/octopus/internal/datapath/pathprobe"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

const tunnelPort = 4500

// TestProbeInNamespaces measures a real veth underlay between two gateway namespaces, with a
// socket on gateway 2's tunnel port standing in for the tunnel and a Responder next to it:
// the full MTU, an MTU lowered on the underlay bridge's port (a black hole: the bridge drops
// larger frames without a word), the tunnel port dropped by nftables on either side and in
// either direction, and the port closed.
func TestProbeInNamespaces(t *testing.T) {
	testenv.LabNetwork(t)
	topo := tunneltest.New(t, 2)
	g1, g2 := topo.Gateways[0], topo.Gateways[1]
	under := strings.TrimSuffix(g1.NS, "-gw1") + "-under"
	remote := netip.AddrPortFrom(g2.Underlay, tunnelPort)

	var tunnel net.PacketConn
	var responder *pathprobe.Responder
	tunneltest.In(t, g2.NS, func() {
		var err error
		if tunnel, err = net.ListenPacket("udp4", ":4500"); err != nil {
			t.Fatal(err)
		}
		if responder, err = pathprobe.NewResponder(tunnelPort, testr.New(t)); err != nil {
			t.Fatal(err)
		}
	})
	defer func() { _ = tunnel.Close() }()
	defer func() { _ = responder.Close() }()

	probe := func(t *testing.T) pathprobe.Result {
		t.Helper()
		var r pathprobe.Result
		start := time.Now()
		tunneltest.In(t, g1.NS, func() {
			var err error
			r, err = pathprobe.Probe(context.Background(), remote, pathprobe.Options{Timeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%+v in %s", r, time.Since(start).Round(time.Millisecond))
		return r
	}
	nft := func(t *testing.T, ns, family, chain, rule string) {
		t.Helper()
		tunneltest.Run(t, "ip", "netns", "exec", ns, "nft", "add table "+family+" probetest")
		tunneltest.Run(t, "ip", "netns", "exec", ns, "nft", "add chain "+family+" probetest "+chain)
		tunneltest.Run(t, "ip", "netns", "exec", ns, "nft", "add rule "+family+" probetest "+strings.Fields(chain)[0]+" "+rule)
		t.Cleanup(func() { tunneltest.Run(t, "ip", "netns", "exec", ns, "nft", "delete table "+family+" probetest") })
	}

	tests := []struct {
		name      string
		fault     func(t *testing.T)
		reachable bool
		pathMTU   int
		reason    string
		maxProbes int
	}{
		{name: "healthy", reachable: true, pathMTU: 1500, maxProbes: 2},
		{name: "underlay MTU lowered to 1400 at the remote's bridge port", reachable: true, pathMTU: 1400, maxProbes: 2 + 3*12,
			fault: func(t *testing.T) {
				tunneltest.Run(t, "ip", "-n", under, "link", "set", "u2", "mtu", "1400")
				t.Cleanup(func() { tunneltest.Run(t, "ip", "-n", under, "link", "set", "u2", "mtu", "1500") })
			}},
		{name: "underlay MTU lowered to 1280 at the local link", reachable: true, pathMTU: 1280, maxProbes: 2,
			fault: func(t *testing.T) {
				tunneltest.Run(t, "ip", "-n", g1.NS, "link", "set", g1.UnderDev, "mtu", "1280")
				t.Cleanup(func() { tunneltest.Run(t, "ip", "-n", g1.NS, "link", "set", g1.UnderDev, "mtu", "1500") })
			}},
		{name: "remote drops the tunnel port on input", reason: "no answer", maxProbes: 3,
			fault: func(t *testing.T) {
				nft(t, g2.NS, "inet", "in { type filter hook input priority 0; }", "udp dport 4500 drop")
			}},
		{name: "remote drops what leaves the tunnel port", reason: "no answer", maxProbes: 3,
			fault: func(t *testing.T) {
				nft(t, g2.NS, "inet", "out { type filter hook output priority 0; }", "udp sport 4500 drop")
			}},
		{name: "local drops the tunnel port on output", reason: "this node's firewall drops UDP to 203.0.113.2:4500", maxProbes: 3,
			fault: func(t *testing.T) {
				nft(t, g1.NS, "inet", "out { type filter hook output priority 0; }", "udp dport 4500 drop")
			}},
		{name: "a firewall on the underlay bridge drops the tunnel port", reason: "no answer", maxProbes: 3,
			fault: func(t *testing.T) {
				nft(t, under, "bridge", "filter { type filter hook forward priority 0; }", "udp dport 4500 drop")
			}},
		{name: "nothing listens on the port", reason: "refused", maxProbes: 3,
			fault: func(t *testing.T) {
				_ = responder.Close()
				_ = tunnel.Close()
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.fault != nil {
				tt.fault(t)
			}
			r := probe(t)
			if r.Reachable != tt.reachable || r.PathMTU != tt.pathMTU || !strings.Contains(r.Reason, tt.reason) {
				t.Errorf("got reachable %v, path MTU %d, reason %q; want %v, %d, %q", r.Reachable, r.PathMTU, r.Reason, tt.reachable, tt.pathMTU, tt.reason)
			}
			if r.Probes > tt.maxProbes {
				t.Errorf("%d probes, want at most %d", r.Probes, tt.maxProbes)
			}
		})
	}
}
