package hostfirewall

import (
	"context"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// header is what every ruleset starts with: the table and its input chain, before the
// filter-priority chains of typical host firewalls.
const header = `add table inet octopus-host-firewall { comment "octopus gateway: accepts the tunnel's UDP port" ; }
add chain inet octopus-host-firewall input { type filter hook input priority -10 ; }
`

func TestOpenGolden(t *testing.T) {
	tests := []struct {
		name   string
		before []uint16 // opened first: Open must replace, not add to, what the table held
		ports  []uint16
		rules  string // after header
	}{
		{name: "one port", ports: []uint16{4500}, rules: "add rule inet octopus-host-firewall input udp dport { 4500 } counter accept\n"},
		{name: "ports sorted and deduplicated, 0 dropped", ports: []uint16{4790, 4500, 4790, 0},
			rules: "add rule inet octopus-host-firewall input udp dport { 4500, 4790 } counter accept\n"},
		{name: "replaces what was open", before: []uint16{51820, 4790}, ports: []uint16{4500},
			rules: "add rule inet octopus-host-firewall input udp dport { 4500 } counter accept\n"},
		{name: "no port leaves an empty chain", before: []uint16{4500}, ports: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			fake := knftables.NewFake(knftables.InetFamily, owner.HostFirewallNFTTable)
			f := NewWith(fake)
			if tt.before != nil {
				if err := f.Open(ctx, tt.before...); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Open(ctx, tt.ports...); err != nil {
				t.Fatal(err)
			}
			if got, want := fake.Dump(), header+tt.rules; got != want {
				t.Fatalf("ruleset:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestCloseDeletesTable(t *testing.T) {
	ctx := context.Background()
	fake := knftables.NewFake(knftables.InetFamily, owner.HostFirewallNFTTable)
	f := NewWith(fake)
	if err := f.Close(ctx); err != nil {
		t.Fatalf("closing before any Open: %v", err)
	}
	if err := f.Open(ctx, 4500); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fake.Dump(); got != "" {
		t.Fatalf("table left after Close:\n%s", got)
	}
}
