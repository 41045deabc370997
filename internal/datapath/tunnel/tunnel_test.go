package tunnel_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/drivers"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/kernel"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

const port = 51820

// canary is the plaintext the encryption check looks for on the underlay.
var canary = []byte("octopus-tunnel-plaintext-canary-7f3a9c")

// TestDrivers runs both drivers between two gateway namespaces on a real kernel: pod to pod
// ICMP and TCP, encryption (or VXLAN encapsulation) on the wire, idempotent Apply, byte
// counters, peer removal and Close.
func TestDrivers(t *testing.T) {
	for _, tc := range []struct {
		backend, name string
		encrypted     bool
	}{
		{backend: drivers.WireGuard, name: "wireguard-go", encrypted: true},
		{backend: drivers.VXLAN, name: "vxlan"},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			testenv.LabNetwork(t)
			topo := tunneltest.New(t, 2)
			g1, g2 := topo.Gateways[0], topo.Gateways[1]
			ctx := context.Background()

			ds := make([]tunnel.Driver, 2)
			for i, g := range topo.Gateways {
				tunneltest.In(t, g.NS, func() {
					d, err := drivers.New(tc.backend, tunnel.Options{Device: g.Device, Log: testr.New(t)})
					if err != nil {
						t.Fatal(err)
					}
					ds[i] = d
				})
				t.Cleanup(func() {
					tunneltest.In(t, g.NS, func() {
						if err := ds[i].Close(); err != nil {
							t.Errorf("closing the driver of %s: %v", g.NS, err)
						}
					})
				})
				if got := ds[i].Name(); got != tc.name {
					t.Fatalf("Name() = %q, want %q", got, tc.name)
				}
				if tc.encrypted == (ds[i].PublicKey() == "") {
					t.Fatalf("PublicKey() = %q for %s", ds[i].PublicKey(), tc.backend)
				}
			}
			cfgOf := func(i int, peers ...int) tunnel.Config {
				cfg := tunnel.Config{ListenPort: port, LocalAddr: topo.Gateways[i].Underlay}
				for _, j := range peers {
					p := topo.Gateways[j]
					cfg.Peers = append(cfg.Peers, tunnel.Peer{Cluster: fmt.Sprintf("c%d", j+1), PublicKey: ds[j].PublicKey(),
						Endpoint: netip.AddrPortFrom(p.Underlay, port), Subnets: []netip.Prefix{p.PodSubnet}})
				}
				return cfg
			}
			apply := func(i int, cfg tunnel.Config) {
				t.Helper()
				tunneltest.In(t, topo.Gateways[i].NS, func() {
					if err := ds[i].Apply(ctx, cfg); err != nil {
						t.Fatalf("Apply on %s: %v", topo.Gateways[i].NS, err)
					}
				})
			}
			apply(0, cfgOf(0, 1))
			apply(1, cfgOf(1, 0))

			if err := tunneltest.Ping(g1.PodNS, g2.PodAddr, 15*time.Second); err != nil {
				t.Fatal(err)
			}
			capture := tunneltest.StartCapture(t, g2.NS, g2.UnderDev)
			podCapture := tunneltest.StartCapture(t, g2.PodNS, "eth0")
			payload := bytes.Repeat(canary, 40)
			server := netip.AddrPortFrom(g2.PodAddr, 8080)
			if got := tunneltest.TCPEcho(t, g2.PodNS, g1.PodNS, server, payload); !bytes.Equal(got, payload) {
				t.Fatalf("TCP echo through the tunnel returned %d different bytes", len(got))
			}
			frames, err := capture.Stop()
			if err != nil {
				t.Fatal(err)
			}
			tunneltest.CheckWire(t, frames, port, owner.VXLANVNI, canary, tc.encrypted)
			// The pod's SYN left with MSS 1460 (its veth MTU 1500); the gateway clamped it to
			// fit the tunnel.
			podFrames, err := podCapture.Stop()
			if err != nil {
				t.Fatal(err)
			}
			if mss, ok := tunneltest.SYNMSS(podFrames, server); !ok || int(mss) != tunnelMTU(tc.encrypted)-40 {
				t.Fatalf("the SYN reached the server pod with MSS %d (found %v), want %d", mss, ok, tunnelMTU(tc.encrypted)-40)
			}

			// Routes and MTU: the peer subnet goes into our device, marked as ours.
			routes := tunneltest.Run(t, "ip", "-n", g1.NS, "route", "show", "proto", fmt.Sprint(owner.TunnelRouteProtocol))
			if !strings.Contains(routes, g2.PodSubnet.String()) || !strings.Contains(routes, g1.Device) {
				t.Fatalf("routes of proto %d on %s = %q, want %s via %s", owner.TunnelRouteProtocol, g1.NS, routes, g2.PodSubnet, g1.Device)
			}
			wantMTU := tunnelMTU(tc.encrypted)
			if link := tunneltest.Run(t, "ip", "-n", g1.NS, "link", "show", g1.Device); !strings.Contains(link, fmt.Sprintf("mtu %d ", wantMTU)) {
				t.Fatalf("device %s = %q, want mtu %d", g1.Device, link, wantMTU)
			}
			nft := tunneltest.Run(t, "ip", "netns", "exec", g1.NS, "nft", "list", "table", "inet", owner.TunnelNFTTablePrefix+g1.Device)
			if want := fmt.Sprintf("maxseg size set %d", wantMTU-40); !strings.Contains(nft, want) {
				t.Fatalf("nft table lacks %q:\n%s", want, nft)
			}

			// Stats count the traffic in both directions.
			stats := statsOf(t, g1.NS, ds[0])
			if len(stats) != 1 || stats[0].Cluster != "c2" || stats[0].TxBytes < uint64(len(payload)) || stats[0].RxBytes < uint64(len(payload)) {
				t.Fatalf("Stats() = %+v, want c2 with at least %d bytes each way", stats, len(payload))
			}
			if tc.encrypted == stats[0].LastHandshake.IsZero() {
				t.Fatalf("Stats() LastHandshake = %v for %s", stats[0].LastHandshake, tc.backend)
			}

			// Apply again: nothing in the kernel changes, and the session survives.
			before := snapshot(t, g1)
			apply(0, cfgOf(0, 1))
			if after := snapshot(t, g1); after != before {
				t.Fatalf("a second equal Apply changed the kernel state:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if again := statsOf(t, g1.NS, ds[0]); !again[0].LastHandshake.Equal(stats[0].LastHandshake) || again[0].TxBytes < stats[0].TxBytes {
				t.Fatalf("a second equal Apply reset the peer: %+v, before %+v", again, stats)
			}

			// Remove the peer: its routes and entries go, and traffic stops.
			apply(0, cfgOf(0))
			if routes := tunneltest.Run(t, "ip", "-n", g1.NS, "route", "show", "proto", fmt.Sprint(owner.TunnelRouteProtocol)); strings.TrimSpace(routes) != "" {
				t.Fatalf("routes left after removing the peer: %q", routes)
			}
			if !tc.encrypted {
				if fdb := tunneltest.Run(t, "bridge", "-n", g1.NS, "fdb", "show", "dev", g1.Device); strings.Contains(fdb, "dst") {
					t.Fatalf("FDB entries left after removing the peer: %q", fdb)
				}
			}
			if s := statsOf(t, g1.NS, ds[0]); len(s) != 0 {
				t.Fatalf("Stats() after removing the peer = %+v", s)
			}
			if err := tunneltest.Ping(g1.PodNS, g2.PodAddr, 2*time.Second); err == nil {
				t.Fatal("pods still reach each other after the peer was removed")
			}
			// And back: the tunnel recovers.
			apply(0, cfgOf(0, 1))
			if err := tunneltest.Ping(g1.PodNS, g2.PodAddr, 15*time.Second); err != nil {
				t.Fatalf("after re-adding the peer: %v", err)
			}

			// Close removes the device, its routes and the nft table; twice is fine.
			tunneltest.In(t, g1.NS, func() {
				for range 2 {
					if err := ds[0].Close(); err != nil {
						t.Fatalf("Close: %v", err)
					}
				}
			})
			if out, err := exec.Command("ip", "-n", g1.NS, "link", "show", g1.Device).CombinedOutput(); err == nil {
				t.Fatalf("device %s still exists after Close: %s", g1.Device, out)
			}
			if routes := tunneltest.Run(t, "ip", "-n", g1.NS, "route", "show", "proto", fmt.Sprint(owner.TunnelRouteProtocol)); strings.TrimSpace(routes) != "" {
				t.Fatalf("routes left after Close: %q", routes)
			}
			if tables := tunneltest.Run(t, "ip", "netns", "exec", g1.NS, "nft", "list", "tables"); strings.Contains(tables, owner.TunnelNFTTablePrefix) {
				t.Fatalf("nft table left after Close: %q", tables)
			}
		})
	}
}

func tunnelMTU(encrypted bool) int {
	if encrypted {
		return 1500 - kernel.WireGuardOverhead
	}
	return 1500 - kernel.VXLANOverhead
}

func statsOf(t *testing.T, ns string, d tunnel.Driver) []tunnel.PeerStats {
	t.Helper()
	var s []tunnel.PeerStats
	tunneltest.In(t, ns, func() {
		var err error
		if s, err = d.Stats(); err != nil {
			t.Fatalf("Stats: %v", err)
		}
	})
	return s
}

// snapshot is the kernel state a driver owns in a gateway namespace, without counters.
func snapshot(t *testing.T, g tunneltest.Gateway) string {
	var b strings.Builder
	for _, cmd := range [][]string{
		{"ip", "-n", g.NS, "-d", "link", "show", g.Device},
		{"ip", "-n", g.NS, "route", "show", "table", "all", "proto", fmt.Sprint(owner.TunnelRouteProtocol)},
		{"ip", "-n", g.NS, "neigh", "show", "dev", g.Device},
		{"bridge", "-n", g.NS, "fdb", "show", "dev", g.Device},
		{"ip", "netns", "exec", g.NS, "nft", "list", "table", "inet", owner.TunnelNFTTablePrefix + g.Device},
	} {
		out := tunneltest.Run(t, cmd...)
		// Counter values move with any packet; the rules and objects are what must not.
		for _, line := range strings.Split(out, "\n") {
			if i := strings.Index(line, "packets "); i >= 0 {
				line = line[:i]
			}
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
