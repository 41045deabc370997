package kernel

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

func TestMTU(t *testing.T) {
	tests := []struct {
		name                         string
		configured, underlay, overhd int
		want                         int
		wantErr                      bool
	}{
		{name: "wireguard on 1500", underlay: 1500, overhd: WireGuardOverhead, want: 1420},
		{name: "vxlan on 1500", underlay: 1500, overhd: VXLANOverhead, want: 1430},
		{name: "jumbo underlay", underlay: 9000, overhd: WireGuardOverhead, want: 8920},
		{name: "configured wins", configured: 1380, underlay: 9000, overhd: WireGuardOverhead, want: 1380},
		{name: "too small underlay", underlay: 1300, overhd: WireGuardOverhead, wantErr: true},
		{name: "configured too large", configured: 70000, underlay: 1500, overhd: WireGuardOverhead, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MTU(tt.configured, tt.underlay, tt.overhd)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("MTU(%d, %d, %d) = %d, %v; want %d, error %v", tt.configured, tt.underlay, tt.overhd, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestNFTSync(t *testing.T) {
	ctx := context.Background()
	fake := knftables.NewFake(knftables.InetFamily, owner.TunnelNFTTablePrefix+"wg0")
	n := NewNFTWith(fake, "wg0")
	if err := n.Sync(ctx, 1420, nil); err != nil {
		t.Fatal(err)
	}
	want := `add table inet octopus-tunnel-wg0 { comment "octopus tunnel wg0: MSS clamp and peer counters" ; }
add chain inet octopus-tunnel-wg0 forward { type filter hook forward priority -150 ; }
add rule inet octopus-tunnel-wg0 forward oifname "wg0" meta nfproto ipv4 tcp flags syn / syn,rst tcp option maxseg size > 1380 tcp option maxseg size set 1380
add rule inet octopus-tunnel-wg0 forward oifname "wg0" meta nfproto ipv6 tcp flags syn / syn,rst tcp option maxseg size > 1360 tcp option maxseg size set 1360
add rule inet octopus-tunnel-wg0 forward iifname "wg0" meta nfproto ipv4 tcp flags syn / syn,rst tcp option maxseg size > 1380 tcp option maxseg size set 1380
add rule inet octopus-tunnel-wg0 forward iifname "wg0" meta nfproto ipv6 tcp flags syn / syn,rst tcp option maxseg size > 1360 tcp option maxseg size set 1360
`
	if got := fake.Dump(); got != want {
		t.Fatalf("ruleset:\n%s\nwant:\n%s", got, want)
	}
	// Re-syncing is stable: add-then-flush leaves exactly one copy of each rule.
	if err := n.Sync(ctx, 1420, nil); err != nil {
		t.Fatal(err)
	}
	if got := fake.Dump(); got != want {
		t.Fatalf("second Sync changed the ruleset:\n%s", got)
	}

	// Counters: one pair per peer; a removed peer's counters go.
	peers := []Counted{
		{Cluster: "b", Remote: netip.MustParseAddr("203.0.113.2"), RemotePort: 4789, LocalPort: 4789},
		{Cluster: "c", Remote: netip.MustParseAddr("203.0.113.3"), RemotePort: 4789, LocalPort: 4789},
	}
	if err := n.Sync(ctx, 1430, peers); err != nil {
		t.Fatal(err)
	}
	rxB, txB := CounterNames("b")
	rxC, _ := CounterNames("c")
	dump := fake.Dump()
	for _, s := range []string{
		"add counter inet octopus-tunnel-wg0 " + rxB,
		`add rule inet octopus-tunnel-wg0 input ip saddr 203.0.113.2 udp dport 4789 counter name "` + rxB + `"`,
		`add rule inet octopus-tunnel-wg0 output ip daddr 203.0.113.2 udp dport 4789 counter name "` + txB + `"`,
		"add counter inet octopus-tunnel-wg0 " + rxC,
		"maxseg size set 1390",
	} {
		if !strings.Contains(dump, s) {
			t.Errorf("ruleset lacks %q:\n%s", s, dump)
		}
	}
	if err := n.Sync(ctx, 1430, peers[:1]); err != nil {
		t.Fatal(err)
	}
	if dump := fake.Dump(); strings.Contains(dump, rxC) || !strings.Contains(dump, rxB) {
		t.Fatalf("after removing peer c:\n%s", dump)
	}
	if err := n.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Delete(ctx); err != nil {
		t.Fatalf("deleting a deleted table: %v", err)
	}
	if dump := fake.Dump(); dump != "" {
		t.Fatalf("after Delete:\n%s", dump)
	}
}

func TestCounterNames(t *testing.T) {
	rx1, tx1 := CounterNames("cluster-b")
	rx2, _ := CounterNames("cluster_b")
	long, _ := CounterNames(strings.Repeat("x", 200))
	if !strings.HasPrefix(rx1, "rx-cluster-b-") || !strings.HasPrefix(tx1, "tx-cluster-b-") || rx1 == rx2 || len(long) > 40 {
		t.Fatalf("CounterNames: %q %q %q %q", rx1, tx1, rx2, long)
	}
}
