package podfence

import (
	"context"
	"net/netip"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

const golden = `add table inet octopus-gateway-guard { comment "octopus gateway-port: the secondary network's and the VPCs' pods reach the gateway node only for replies and ICMP" ; }
add chain inet octopus-gateway-guard fence
add chain inet octopus-gateway-guard forward { type filter hook forward priority -10 ; }
add chain inet octopus-gateway-guard input { type filter hook input priority -10 ; }
add rule inet octopus-gateway-guard fence ct state { established, related } accept
add rule inet octopus-gateway-guard fence meta l4proto { 1, 58 } accept
add rule inet octopus-gateway-guard fence counter drop
add rule inet octopus-gateway-guard forward iifname "octx*" ct status dnat counter drop
add rule inet octopus-gateway-guard forward iifname "octx*" ip daddr { 10.112.0.0/16, 10.96.0.0/16 } ct state != { established, related } counter drop
add rule inet octopus-gateway-guard forward iifname "octx*" ip6 daddr { 2001:db8:96::/112 } ct state != { established, related } counter drop
add rule inet octopus-gateway-guard input iifname "octgw" goto fence
add rule inet octopus-gateway-guard input iifname "octx*" goto fence
`

// testLinks are the links gateway-port guards, with a dual-stack cluster's CIDRs (the secondary
// block, given twice, and the IPv4 pod CIDR out of order).
var testLinks = Links{Input: []string{"octgw", "octx*"}, DNAT: []string{"octx*"}, Protected: []netip.Prefix{
	netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("2001:db8:96::/112"), netip.MustParsePrefix("10.112.0.0/16"), netip.MustParsePrefix("10.112.0.0/16"),
}}

func TestGuardGolden(t *testing.T) {
	ctx := context.Background()
	fake := knftables.NewFake(knftables.InetFamily, owner.GatewayGuardNFTTable)
	g := NewWith(fake)
	// Twice, and after a rule someone added: the chain is replaced, never appended to.
	if err := g.Guard(ctx, testLinks); err != nil {
		t.Fatal(err)
	}
	tx := fake.NewTransaction()
	tx.Add(&knftables.Rule{Chain: chainInput, Rule: "tcp dport 22 accept"})
	if err := fake.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := g.Guard(ctx, testLinks); err != nil {
		t.Fatal(err)
	}
	if got := fake.Dump(); got != golden {
		t.Fatalf("ruleset:\n%s\nwant:\n%s", got, golden)
	}
}

func TestGuardRefusesWhatIsNoInterface(t *testing.T) {
	for _, tc := range []struct {
		name  string
		links Links
	}{
		{"none", Links{}},
		{"only DNAT", Links{DNAT: []string{"octx*"}}},
		{"empty", Links{Input: []string{"octgw", ""}}},
		{"a bare wildcard", Links{Input: []string{"*"}}},
		{"too long", Links{Input: []string{"octx0123456789ab"}}},
		{"a quote", Links{Input: []string{`octgw" accept #`}}},
		{"a space", Links{Input: []string{"oct gw"}}},
		{"a wildcard inside", Links{Input: []string{"oct*gw"}}},
		{"a bad DNAT link", Links{Input: []string{"octgw"}, DNAT: []string{"octx* "}}},
		{"a protected CIDR with host bits", Links{Input: []string{"octgw"}, DNAT: []string{"octx*"}, Protected: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/16")}}},
		{"an invalid protected CIDR", Links{Input: []string{"octgw"}, DNAT: []string{"octx*"}, Protected: []netip.Prefix{{}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := knftables.NewFake(knftables.InetFamily, owner.GatewayGuardNFTTable)
			err := NewWith(fake).Guard(context.Background(), tc.links)
			if err == nil {
				t.Fatalf("guarded %+v without an error", tc.links)
			}
			if got := fake.Dump(); got != "" {
				t.Fatalf("wrote %q for %+v (%v)", got, tc.links, err)
			}
		})
	}
}
