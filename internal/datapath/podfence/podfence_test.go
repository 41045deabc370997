package podfence

import (
	"context"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

const golden = `add table inet octopus-gateway-guard { comment "octopus gateway-port: the secondary network's pods reach the gateway node only for replies and ICMP" ; }
add chain inet octopus-gateway-guard input { type filter hook input priority -10 ; }
add rule inet octopus-gateway-guard input iifname "octgw" ct state { established, related } accept
add rule inet octopus-gateway-guard input iifname "octgw" meta l4proto { 1, 58 } accept
add rule inet octopus-gateway-guard input iifname "octgw" counter drop
`

func TestGuardGolden(t *testing.T) {
	ctx := context.Background()
	fake := knftables.NewFake(knftables.InetFamily, owner.GatewayGuardNFTTable)
	g := NewWith(fake)
	// Twice, and after a rule someone added: the chain is replaced, never appended to.
	if err := g.Guard(ctx, "octgw"); err != nil {
		t.Fatal(err)
	}
	tx := fake.NewTransaction()
	tx.Add(&knftables.Rule{Chain: chainInput, Rule: "tcp dport 22 accept"})
	if err := fake.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := g.Guard(ctx, "octgw"); err != nil {
		t.Fatal(err)
	}
	if got := fake.Dump(); got != golden {
		t.Fatalf("ruleset:\n%s\nwant:\n%s", got, golden)
	}
}

func TestGuardRefusesNoLink(t *testing.T) {
	fake := knftables.NewFake(knftables.InetFamily, owner.GatewayGuardNFTTable)
	if err := NewWith(fake).Guard(context.Background(), ""); err == nil {
		t.Fatal("guarded no interface without an error")
	}
	if got := fake.Dump(); got != "" {
		t.Fatalf("wrote %q for no interface", got)
	}
}
