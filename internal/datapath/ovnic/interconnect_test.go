package ovnic

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestInterconnectRealDaemons runs OVN-IC for real: IC NB and IC SB ovsdb-servers, and two AZs
// each with NB, SB, ovn-northd and ovn-ic, all on unix sockets in scratch directories. It
// applies the desired state of both AZs and checks what ovn-ic makes of it: each AZ learns the
// other's advertised subnet and not an opted-out one, removing the opt-out makes it learned, a
// manual route is there exactly (and not advertised), the gateway chassis are bound by
// priority, a second Apply writes nothing, and an overlapping prefix is refused with nothing
// written.
func TestInterconnectRealDaemons(t *testing.T) {
	start := time.Now()
	ctx := context.Background()
	dir := scratch(t)
	icnb := startICDB(t, dir, "icnb", icNBSchema, "ovn-ic-nbctl")
	icsb := startICDB(t, dir, "icsb", icSBSchema, "ovn-ic-sbctl")
	icnb.run(t, "ts-add", "ts1")

	a := startZone(t, "az-a", icnb, icsb)
	b := startZone(t, "az-b", icnb, icsb)
	// The AZs' subnet switches stand for the secondary network's (internal/datapath/ovn), whose
	// switch Apply only adds the router's port to.
	a.nbctl(t, "ls-add", "octopus-az-a", "--", "ls-add", "az-a-private")
	b.nbctl(t, "ls-add", "octopus-az-b")
	started := time.Since(start)

	azA := AZ{
		Name: "az-a", TransitSwitch: "ts1", TransitAddress: netip.MustParsePrefix("169.254.100.1/24"),
		GatewayChassis: []string{"node-a1", "node-a2"}, AutoRoutes: true,
		Subnets: []Subnet{
			{Switch: "octopus-az-a", Address: netip.MustParsePrefix("10.1.0.254/24")},
			{Switch: "az-a-private", Address: netip.MustParsePrefix("10.1.1.254/24"), OptOut: true},
		},
	}
	azB := AZ{
		Name: "az-b", TransitSwitch: "ts1", TransitAddress: netip.MustParsePrefix("169.254.100.2/24"),
		GatewayChassis: []string{"node-b1"}, AutoRoutes: true,
		Subnets: []Subnet{{Switch: "octopus-az-b", Address: netip.MustParsePrefix("10.2.0.254/24")}},
	}
	a.apply(t, azA)
	b.apply(t, azB)

	learnStart := time.Now()
	b.waitRoute(t, "10.1.0.0/24", "169.254.100.1 learned")
	a.waitRoute(t, "10.2.0.0/24", "169.254.100.2 learned")
	learned := time.Since(learnStart)
	// ovn-ic publishes an AZ's routes in one transaction and learns them in one: with
	// 10.1.0.0/24 learned, the opted-out 10.1.1.0/24 would be too if it were advertised.
	if r, ok := b.routes(t)["10.1.1.0/24"]; ok {
		t.Fatalf("AZ b learned the opted-out subnet 10.1.1.0/24: %s", r)
	}
	if out := icsb.run(t, "--bare", "--columns=ip_prefix", "list", "Route"); strings.Contains(out, "10.1.1.0") {
		t.Fatalf("the opted-out subnet is advertised in the IC SB: %q", out)
	}

	// Idempotent: what Apply reads back is already what it wants.
	for _, z := range []struct {
		z  *zone
		az AZ
	}{{a, azA}, {b, azB}} {
		obs, err := z.z.client.observe(ctx, z.az)
		if err != nil {
			t.Fatal(err)
		}
		if p, err := makePlan(z.az, obs); err != nil || !p.empty() {
			t.Fatalf("AZ %s: after Apply the plan is %+v, %v; want nothing to do", z.az.Name, p, err)
		}
	}

	// Active-backup: the transit port is bound to both chassis, the first with the higher
	// priority; reversing the order swaps them.
	gw := a.nbctl(t, "lrp-get-gateway-chassis", RouterPortName("az-a", "ts1"))
	if !regexpMatch(gw, `node-a1\s+100`) || !regexpMatch(gw, `node-a2\s+99`) {
		t.Fatalf("gateway chassis of az-a's transit port:\n%s", gw)
	}
	azA.GatewayChassis = []string{"node-a2", "node-a1"}
	a.apply(t, azA)
	gw = a.nbctl(t, "lrp-get-gateway-chassis", RouterPortName("az-a", "ts1"))
	if !regexpMatch(gw, `node-a2\s+100`) || !regexpMatch(gw, `node-a1\s+99`) {
		t.Fatalf("gateway chassis of az-a's transit port after reordering:\n%s", gw)
	}

	// Removing the opt-out makes the subnet learned.
	optInStart := time.Now()
	azA.Subnets[1].OptOut = false
	a.apply(t, azA)
	b.waitRoute(t, "10.1.1.0/24", "169.254.100.1 learned")
	optIn := time.Since(optInStart)

	// A manual route in b: there exactly, in b only (its prefix is not advertised). A new
	// subnet in the same Apply is advertised by the same ovn-ic pass, so once a has learned
	// it, a would have learned the manual route's prefix too if it were advertised.
	b.nbctl(t, "ls-add", "az-b-extra")
	azB.Subnets = append(azB.Subnets, Subnet{Switch: "az-b-extra", Address: netip.MustParsePrefix("10.2.1.254/24")})
	azB.Routes = []Route{{Prefix: netip.MustParsePrefix("10.9.0.0/16"), NextHop: netip.MustParseAddr("169.254.100.1")}}
	b.apply(t, azB)
	a.waitRoute(t, "10.2.1.0/24", "169.254.100.2 learned")
	if r, ok := a.routes(t)["10.9.0.0/16"]; ok {
		t.Fatalf("AZ b's manual route was advertised to a: %s", r)
	}
	if got := b.routes(t); got["10.9.0.0/16"] != "169.254.100.1 manual" {
		t.Fatalf("manual route in AZ b: routes %v", got)
	}
	manual := 0
	for _, r := range b.routes(t) {
		if strings.HasSuffix(r, " manual") {
			manual++
		}
	}
	if manual != 1 {
		t.Fatalf("AZ b has %d manual routes, want exactly 1: %v", manual, b.routes(t))
	}

	// An overlapping prefix: a second subnet in a inside b's 10.2.0.0/24, together with a
	// manual route. Refused, naming both AZs, and neither written.
	a.nbctl(t, "ls-add", "az-a-clash")
	clash := azA
	clash.Subnets = append(clash.Subnets[:2:2], Subnet{Switch: "az-a-clash", Address: netip.MustParsePrefix("10.2.0.126/25")})
	clash.Routes = []Route{{Prefix: netip.MustParsePrefix("10.8.0.0/16"), NextHop: netip.MustParseAddr("169.254.100.2")}}
	err := a.client.Apply(ctx, clash)
	var overlap *OverlapError
	if !errors.As(err, &overlap) || overlap.AZ != "az-a" || overlap.OtherAZ != "az-b" ||
		!strings.Contains(err.Error(), "az-a") || !strings.Contains(err.Error(), "az-b") {
		t.Fatalf("Apply of an overlapping prefix: %v; want an *OverlapError naming az-a and az-b", err)
	}
	if out := a.nbctl(t, "lrp-list", RouterName("az-a")); strings.Contains(out, "az-a-clash") {
		t.Fatalf("the refused subnet's port was written:\n%s", out)
	}
	if _, ok := a.routes(t)["10.8.0.0/16"]; ok {
		t.Fatal("the manual route of the refused Apply was written")
	}
	// b's own subnet stays where it was, learned in a from b only.
	a.waitRoute(t, "10.2.0.0/24", "169.254.100.2 learned")

	// Withdrawn: the manual route goes, the learned routes stay ovn-ic's.
	azB.Routes = nil
	b.apply(t, azB)
	if r, ok := b.routes(t)["10.9.0.0/16"]; ok {
		t.Fatalf("removed manual route still there: %s", r)
	}
	if got := b.routes(t)["10.1.0.0/24"]; got != "169.254.100.1 learned" {
		t.Fatalf("a learned route went with the manual one: %q", got)
	}
	t.Logf("daemons up in %s; first routes learned %s after Apply; opt-out removed → learned in %s; whole test %s",
		started.Round(time.Millisecond), learned.Round(time.Millisecond), optIn.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// TestInterconnectSurvivesICLeaderLoss runs the IC NB and IC SB as 3-member raft clusters (the
// hub's HA setup) and kills both leaders: ovn-ic in each AZ and our client move to the new
// leaders, a subnet added afterwards is learned by the other AZ, and the routes learned before
// stay.
func TestInterconnectSurvivesICLeaderLoss(t *testing.T) {
	start := time.Now()
	dir := scratch(t)
	icnb := startICCluster(t, dir, "icnb", icNBSchema, "OVN_IC_Northbound", "ovn-ic-nbctl")
	icsb := startICCluster(t, dir, "icsb", icSBSchema, "OVN_IC_Southbound", "ovn-ic-sbctl")
	icnb.run(t, "ts-add", "ts1")
	a := startZone(t, "az-a", icnb.icDB, icsb.icDB)
	b := startZone(t, "az-b", icnb.icDB, icsb.icDB)
	a.nbctl(t, "ls-add", "octopus-az-a", "--", "ls-add", "az-a-new")
	b.nbctl(t, "ls-add", "octopus-az-b")
	azA := AZ{
		Name: "az-a", TransitSwitch: "ts1", TransitAddress: netip.MustParsePrefix("169.254.100.1/24"), AutoRoutes: true,
		Subnets: []Subnet{{Switch: "octopus-az-a", Address: netip.MustParsePrefix("10.1.0.254/24")}},
	}
	azB := AZ{
		Name: "az-b", TransitSwitch: "ts1", TransitAddress: netip.MustParsePrefix("169.254.100.2/24"), AutoRoutes: true,
		Subnets: []Subnet{{Switch: "octopus-az-b", Address: netip.MustParsePrefix("10.2.0.254/24")}},
	}
	a.apply(t, azA)
	b.apply(t, azB)
	b.waitRoute(t, "10.1.0.0/24", "169.254.100.1 learned")
	a.waitRoute(t, "10.2.0.0/24", "169.254.100.2 learned")
	up := time.Since(start)

	failStart := time.Now()
	icnb.killLeader(t)
	icsb.killLeader(t)
	elected := time.Since(failStart)

	azA.Subnets = append(azA.Subnets, Subnet{Switch: "az-a-new", Address: netip.MustParsePrefix("10.1.2.254/24")})
	a.apply(t, azA)
	applied := time.Since(failStart)
	b.waitRoute(t, "10.1.2.0/24", "169.254.100.1 learned")
	relearned := time.Since(failStart)
	if got := a.routes(t)["10.2.0.0/24"]; got != "169.254.100.2 learned" {
		t.Fatalf("AZ a lost the route learned before the failover: %q", got)
	}
	t.Logf("raft clusters and AZs up, first routes learned in %s; new leaders after %s; Apply done %s and new subnet learned %s after the kill; whole test %s",
		up.Round(time.Millisecond), elected.Round(time.Millisecond), applied.Round(time.Millisecond), relearned.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// TestLeaveRemovesTheAZEverywhere: an AZ that leaves (its ovn-ic still running, the harder
// case) is gone from the IC SB, the other AZ drops every route it learned from it, and its own
// NB keeps no row of ours; a second Leave does nothing.
func TestLeaveRemovesTheAZEverywhere(t *testing.T) {
	ctx := context.Background()
	dir := scratch(t)
	icnb := startICDB(t, dir, "icnb", icNBSchema, "ovn-ic-nbctl")
	icsb := startICDB(t, dir, "icsb", icSBSchema, "ovn-ic-sbctl")
	icnb.run(t, "ts-add", "ts1")
	a := startZone(t, "az-a", icnb, icsb)
	b := startZone(t, "az-b", icnb, icsb)
	a.nbctl(t, "ls-add", "octopus-az-a")
	b.nbctl(t, "ls-add", "octopus-az-b")
	a.apply(t, AZ{
		Name: "az-a", TransitSwitch: "ts1", TransitAddress: netip.MustParsePrefix("169.254.100.1/24"),
		GatewayChassis: []string{"node-a1"}, AutoRoutes: true,
		Subnets: []Subnet{{Switch: "octopus-az-a", Address: netip.MustParsePrefix("10.1.0.1/24")}},
		Routes:  []Route{{Prefix: netip.MustParsePrefix("10.9.0.0/16"), NextHop: netip.MustParseAddr("169.254.100.2")}},
	})
	b.apply(t, AZ{
		Name: "az-b", TransitSwitch: "ts1", TransitAddress: netip.MustParsePrefix("169.254.100.2/24"),
		GatewayChassis: []string{"node-b1"}, AutoRoutes: true,
		Subnets: []Subnet{{Switch: "octopus-az-b", Address: netip.MustParsePrefix("10.2.0.1/24")}},
	})
	b.waitRoute(t, "10.1.0.0/24", "169.254.100.1 learned")
	a.waitRoute(t, "10.2.0.0/24", "169.254.100.2 learned")

	start := time.Now()
	for range 2 {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := a.client.Leave(lctx, "az-a")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	b.waitRoute(t, "10.1.0.0/24", "")
	t.Logf("MEASURED: az-b dropped az-a's route %s after Leave", time.Since(start).Round(time.Millisecond))
	// Long enough for az-a's ovn-ic, still running, to have registered the AZ again had its
	// NB kept the name (its loop runs on every database change and at least every few seconds).
	time.Sleep(2 * time.Second)
	if out := icsb.run(t, "--bare", "--columns=name", "list", "Availability_Zone"); strings.TrimSpace(out) != "az-b" {
		t.Errorf("IC SB availability zones after az-a left: %q, want az-b alone", out)
	}
	if out := icsb.run(t, "--bare", "--columns=ip_prefix", "list", "Route"); strings.Contains(out, "10.1.0.") {
		t.Errorf("IC SB still has az-a's route: %q", out)
	}
	if out := a.nbctl(t, "lr-list"); strings.Contains(out, RouterName("az-a")) {
		t.Errorf("az-a's NB still has its interconnection router: %q", out)
	}
	if out := a.nbctl(t, "lsp-list", "octopus-az-a"); strings.TrimSpace(out) != "" {
		t.Errorf("az-a's subnet switch still has ports: %q", out)
	}
	if out := a.nbctl(t, "get", "NB_Global", ".", "name"); strings.Trim(strings.TrimSpace(out), `"`) != "" {
		t.Errorf("az-a's NB_Global is still named %s", out)
	}
}
