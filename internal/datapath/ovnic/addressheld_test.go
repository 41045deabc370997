package ovnic

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/ipam/hostaddr"
)

// TestRouterNeverTakesTheGatewayPortsAddress: the interconnection router's port on the
// cluster's secondary switch takes the block's gateway address, which the ovnmaster's gateway
// port holds while the ovnmaster is not told the cluster is an AZ. With both written by the
// real writers (ovn.Client for the secondary network, this package for the AZ) into a real
// NB, Apply refuses while the gateway port is there, naming it, and writes nothing; once the
// secondary network is applied without a gateway chassis (the ovnmaster with
// --interconnect), the router takes the address and the switch has one holder of it.
func TestRouterNeverTakesTheGatewayPortsAddress(t *testing.T) {
	ctx := context.Background()
	dir := scratch(t)
	icnb := startICDB(t, dir, "icnb", icNBSchema, "ovn-ic-nbctl")
	icsb := startICDB(t, dir, "icsb", icSBSchema, "ovn-ic-sbctl")
	icnb.run(t, "ts-add", "ts")
	z := startZone(t, "east", icnb, icsb)

	secondary, err := ovn.Connect(ctx, ovn.Options{Endpoint: z.central.NB.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(secondary.Close)
	block := netip.MustParsePrefix("10.112.0.0/16")
	b, err := hostaddr.NewBlock(block)
	if err != nil {
		t.Fatal(err)
	}
	network := ovn.Network{ClusterID: "east", CIDR: block, GatewayChassis: "east-gw1"}
	if res, err := secondary.Apply(ctx, network); err != nil || res.GatewayFailed != nil {
		t.Fatalf("the secondary network with its gateway port: %v, %v", err, res.GatewayFailed)
	}
	az := AZ{
		Name: "east", TransitSwitch: "ts", TransitAddress: netip.MustParsePrefix("169.254.100.1/24"),
		GatewayChassis: []string{"east-gw1"}, AutoRoutes: true,
		Subnets: []Subnet{{Switch: ovn.SwitchName("east"), Address: netip.PrefixFrom(b.Gateway(), block.Bits())}},
	}
	var refusal error
	eventually(t, convergeTimeout, "Apply to refuse the held address", func() error {
		refusal = z.client.Apply(ctx, az)
		if errors.Is(refusal, ErrNotReady) {
			return refusal // ovn-ic has not copied the transit switch yet
		}
		return nil
	})
	gatewayPort := ovn.GatewayPortName("east")
	if !errors.Is(refusal, ErrAddressHeld) || !strings.Contains(refusal.Error(), gatewayPort) {
		t.Fatalf("Apply with the gateway port on %s: %v; want ErrAddressHeld naming %s", b.Gateway(), refusal, gatewayPort)
	}
	if out := z.nbctl(t, "--bare", "--columns=name", "find", "Logical_Router", "name="+RouterName("east")); strings.TrimSpace(out) != "" {
		t.Fatalf("the refused Apply made the router: %q", out)
	}

	// The ovnmaster in interconnect mode: no gateway chassis, so no gateway port.
	if res, err := secondary.Apply(ctx, ovn.Network{ClusterID: "east", CIDR: block}); err != nil || res.GatewayFailed != nil {
		t.Fatalf("the secondary network without a gateway port: %v, %v", err, res.GatewayFailed)
	}
	deadline := time.Now().Add(convergeTimeout)
	for err := z.client.Apply(ctx, az); err != nil; err = z.client.Apply(ctx, az) {
		if time.Now().After(deadline) {
			t.Fatalf("Apply once the address is free: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	holders := 0
	rows := z.nbctl(t, "--bare", "--columns=addresses", "list", "Logical_Switch_Port") + z.nbctl(t, "--bare", "--columns=networks", "list", "Logical_Router_Port")
	for _, line := range strings.Split(rows, "\n") {
		if strings.Contains(line, b.Gateway().String()) {
			holders++
		}
	}
	if holders != 1 {
		t.Fatalf("%d rows hold %s, want the router's port alone:\n%s", holders, b.Gateway(),
			z.nbctl(t, "show"))
	}
	// The secondary network applied again (the ovnmaster's next reconcile) leaves the router's
	// port alone and does not make the gateway port again.
	if res, err := secondary.Apply(ctx, ovn.Network{ClusterID: "east", CIDR: block}); err != nil || res.GatewayFailed != nil {
		t.Fatal(err, res.GatewayFailed)
	}
	if err := z.client.Apply(ctx, az); err != nil {
		t.Fatalf("Apply after the secondary network's next apply: %v", err)
	}
}
