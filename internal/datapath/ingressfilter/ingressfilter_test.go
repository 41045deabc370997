package ingressfilter

import (
	"context"
	"net/netip"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// header is the table, its chains and sets, which every ruleset has.
const header = `add table inet octopus-ingress-filter { comment "octopus gateway: what may come out of the tunnel" ; }
add chain inet octopus-ingress-filter from-tunnel
add chain inet octopus-ingress-filter input { type filter hook input priority -20 ; }
add chain inet octopus-ingress-filter prerouting { type filter hook prerouting priority -120 ; }
add set inet octopus-ingress-filter destinations-v4 { type ipv4_addr ; flags interval ; }
add set inet octopus-ingress-filter destinations-v6 { type ipv6_addr ; flags interval ; }
add set inet octopus-ingress-filter health-check-v4 { type ipv4_addr ; }
add set inet octopus-ingress-filter health-check-v6 { type ipv6_addr ; }
add set inet octopus-ingress-filter vxlan-sources-v4 { type ipv4_addr ; }
add set inet octopus-ingress-filter vxlan-sources-v6 { type ipv6_addr ; }
`

// fromTunnel are the rules of a State with tunnel devices "octopus0".
const fromTunnel = `add rule inet octopus-ingress-filter from-tunnel ct state established,related return
add rule inet octopus-ingress-filter from-tunnel meta l4proto 1 icmp type echo-request ip daddr @health-check-v4 return
add rule inet octopus-ingress-filter from-tunnel meta l4proto 58 icmpv6 type echo-request ip6 daddr @health-check-v6 return
add rule inet octopus-ingress-filter from-tunnel fib daddr type local counter drop comment "a node address"
add rule inet octopus-ingress-filter from-tunnel ip daddr @destinations-v4 return
add rule inet octopus-ingress-filter from-tunnel ip6 daddr @destinations-v6 return
add rule inet octopus-ingress-filter from-tunnel counter drop comment "not advertised"
`

// jumpTunnel sends what arrives on "octopus0" to from-tunnel (dumped last: chains sort by name).
const jumpTunnel = `add rule inet octopus-ingress-filter prerouting iifname { "octopus0" } jump from-tunnel
`

const vxlanRules = `add rule inet octopus-ingress-filter input meta nfproto ipv4 udp dport 4500 ip saddr != @vxlan-sources-v4 counter drop comment "vxlan from a non-gateway"
add rule inet octopus-ingress-filter input meta nfproto ipv6 udp dport 4500 ip6 saddr != @vxlan-sources-v6 counter drop comment "vxlan from a non-gateway"
`

func pfx(s ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, x := range s {
		ps = append(ps, netip.MustParsePrefix(x))
	}
	return ps
}

func addr(s ...string) []netip.Addr {
	var as []netip.Addr
	for _, x := range s {
		as = append(as, netip.MustParseAddr(x))
	}
	return as
}

func TestApplyGolden(t *testing.T) {
	tests := []struct {
		name   string
		before *State // applied first: Apply must replace, not add to, what the table held
		state  State
		rules  string // after header
		elems  string // after the rules (the fake dumps elements last)
	}{
		{name: "zero state filters nothing and opens nothing", state: State{}},
		{
			name: "direct addressing: pod and service CIDRs, health check, both families",
			state: State{
				Tunnels:      []string{"octopus0"},
				Destinations: pfx("10.96.0.0/12", "10.244.0.0/16", "fd00:10:244::/56"),
				HealthCheck:  addr("10.244.0.1"),
			},
			rules: fromTunnel + jumpTunnel,
			elems: `add element inet octopus-ingress-filter destinations-v4 { 10.96.0.0/12 }
add element inet octopus-ingress-filter destinations-v4 { 10.244.0.0/16 }
add element inet octopus-ingress-filter destinations-v6 { fd00:10:244::/56 }
add element inet octopus-ingress-filter health-check-v4 { 10.244.0.1 }
`,
		},
		{
			name: "globalnet: only the global CIDR, never the private pod CIDR",
			state: State{
				Tunnels:      []string{"octopus0"},
				Destinations: pfx("242.1.0.0/16"),
				HealthCheck:  addr("242.1.0.1"),
			},
			rules: fromTunnel + jumpTunnel,
			elems: `add element inet octopus-ingress-filter destinations-v4 { 242.1.0.0/16 }
add element inet octopus-ingress-filter health-check-v4 { 242.1.0.1 }
`,
		},
		{
			name: "nested, repeated, unmasked and mapped prefixes are merged",
			state: State{
				Tunnels:      []string{"octopus0", "octopus0", ""},
				Destinations: pfx("10.244.3.0/24", "10.244.0.0/16", "10.244.0.0/16", "10.1.2.3/8", "::ffff:192.168.0.0/112"),
			},
			rules: fromTunnel + jumpTunnel,
			elems: `add element inet octopus-ingress-filter destinations-v4 { 10.0.0.0/8 }
add element inet octopus-ingress-filter destinations-v4 { 192.168.0.0/16 }
`,
		},
		{
			name: "vxlan: only the remote gateways' endpoints on the tunnel port",
			before: &State{
				Tunnels: []string{"octopus0"}, Destinations: pfx("10.1.0.0/16"),
				VXLANPort: 4790, VXLANSources: addr("192.0.2.9"),
			},
			state: State{
				Tunnels:      []string{"octopus0"},
				Destinations: pfx("10.244.0.0/16"),
				VXLANPort:    4500,
				VXLANSources: addr("172.18.0.3", "172.18.0.2", "172.18.0.3", "fc00::2"),
			},
			rules: fromTunnel + vxlanRules + jumpTunnel,
			elems: `add element inet octopus-ingress-filter destinations-v4 { 10.244.0.0/16 }
add element inet octopus-ingress-filter vxlan-sources-v4 { 172.18.0.2 }
add element inet octopus-ingress-filter vxlan-sources-v4 { 172.18.0.3 }
add element inet octopus-ingress-filter vxlan-sources-v6 { fc00::2 }
`,
		},
		{
			name:  "vxlan without peers drops every datagram on the port",
			state: State{VXLANPort: 4500},
			rules: vxlanRules,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			fake := knftables.NewFake(knftables.InetFamily, owner.IngressFilterNFTTable)
			f := NewWith(fake)
			if tt.before != nil {
				if err := f.Apply(ctx, *tt.before); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Apply(ctx, tt.state); err != nil {
				t.Fatal(err)
			}
			if got, want := fake.Dump(), header+tt.rules+tt.elems; got != want {
				t.Fatalf("ruleset:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestDeleteDeletesTable(t *testing.T) {
	ctx := context.Background()
	fake := knftables.NewFake(knftables.InetFamily, owner.IngressFilterNFTTable)
	f := NewWith(fake)
	if err := f.Delete(ctx); err != nil {
		t.Fatalf("deleting before any Apply: %v", err)
	}
	if err := f.Apply(ctx, State{Tunnels: []string{"octopus0"}}); err != nil {
		t.Fatal(err)
	}
	if err := f.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fake.Dump(); got != "" {
		t.Fatalf("table left after Delete:\n%s", got)
	}
}
