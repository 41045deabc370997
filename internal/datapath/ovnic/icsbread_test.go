package ovnic

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestICSBReadsRefuseWithoutLeader: with the IC SB server stopped, the client's reads of it
// (the overlap check, Apply through it, TransitAddresses, Leave) fail with ErrICSBUnavailable
// instead of answering from libovsdb's cache, which still holds the rows of before: the
// overlap check refuses to decide (neither approves a new prefix nor refuses an overlapping
// one), Apply writes nothing and Leave leaves the NB as it is. Right after the stop and once
// the client is reconnecting; with the server back, the reads answer again.
func TestICSBReadsRefuseWithoutLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts OVN daemons")
	}
	ctx := context.Background()
	dir := scratch(t)
	icnb := startICDB(t, dir, "icnb", icNBSchema, "ovn-ic-nbctl")
	icsb := startICDB(t, dir, "icsb", icSBSchema, "ovn-ic-sbctl")
	icnb.run(t, "ts-add", "ts1")
	a := startZone(t, "az-a", icnb, icsb)
	b := startZone(t, "az-b", icnb, icsb)
	a.nbctl(t, "ls-add", "octopus-az-a", "--", "ls-add", "az-a-new")
	b.nbctl(t, "ls-add", "octopus-az-b")
	azA := AZ{
		Name: "az-a", TransitSwitch: "ts1", TransitAddress: netip.MustParsePrefix("169.254.100.1/24"),
		GatewayChassis: []string{"node-a1"}, AutoRoutes: true,
		Subnets: []Subnet{{Switch: "octopus-az-a", Address: netip.MustParsePrefix("10.1.0.254/24")}},
	}
	azB := AZ{
		Name: "az-b", TransitSwitch: "ts1", TransitAddress: netip.MustParsePrefix("169.254.100.2/24"),
		GatewayChassis: []string{"node-b1"}, AutoRoutes: true,
		Subnets: []Subnet{{Switch: "octopus-az-b", Address: netip.MustParsePrefix("10.2.0.254/24")}},
	}
	a.apply(t, azA)
	b.apply(t, azB)
	// az-b's route is in IC SB once az-a has learned it: the cache then holds it.
	a.waitRoute(t, "10.2.0.0/24", "169.254.100.2 learned")

	// What a's Apply would add: a new subnet (nothing overlaps it), or az-b's prefix.
	withNew := azA
	withNew.Subnets = append(append([]Subnet{}, azA.Subnets...), Subnet{Switch: "az-a-new", Address: netip.MustParsePrefix("10.3.0.254/24")})
	overlapping := azA
	overlapping.Subnets = append(append([]Subnet{}, azA.Subnets...), Subnet{Switch: "az-a-new", Address: netip.MustParsePrefix("10.2.0.1/24")})

	// Connected: the reads decide, from IC SB's rows.
	var overlap *OverlapError
	if err := a.client.checkOverlap(ctx, overlapping); !errors.As(err, &overlap) {
		t.Fatalf("overlap check of az-b's prefix with IC SB up: %v, want an *OverlapError", err)
	}
	if err := a.client.checkOverlap(ctx, withNew); err != nil {
		t.Fatalf("overlap check of a new prefix with IC SB up: %v", err)
	}
	if got, err := a.client.TransitAddresses(ctx, "ts1"); err != nil || len(got) != 2 {
		t.Fatalf("transit addresses with IC SB up: %v, %v; want both AZs'", got, err)
	}

	icsb.server.stop(t)
	refuses := func(when string) {
		t.Helper()
		bounded, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		for _, c := range []struct {
			what string
			err  error
		}{
			{"the overlap check of a new prefix", a.client.checkOverlap(bounded, withNew)},
			{"the overlap check of az-b's prefix", a.client.checkOverlap(bounded, overlapping)},
			{"Apply with a new prefix", a.client.Apply(bounded, withNew)},
			{"TransitAddresses", func() error { _, err := a.client.TransitAddresses(bounded, "ts1"); return err }()},
			{"Leave", a.client.Leave(bounded, "az-a")},
		} {
			if !errors.Is(c.err, ErrICSBUnavailable) {
				t.Errorf("%s, IC SB stopped %s: %v; want %v", c.what, when, c.err, ErrICSBUnavailable)
			}
		}
		// Nothing written: no router port on the new switch, the AZ still named in its NB.
		if out := a.nbctl(t, "--bare", "--columns=ports", "list", "Logical_Switch", "az-a-new"); strings.TrimSpace(out) != "" {
			t.Errorf("az-a-new has ports %q after an Apply that could not check overlaps", out)
		}
		if out := a.nbctl(t, "get", "NB_Global", ".", "name"); strings.Trim(strings.TrimSpace(out), `"`) != "az-a" {
			t.Errorf("az-a's NB_Global name %q after a Leave that could not reach IC SB; want az-a", out)
		}
	}
	refuses("just now")
	time.Sleep(time.Second) // the client is reconnecting by now (backoff from 100 ms)
	refuses("a second ago")

	icsb.restart(t)
	eventually(t, convergeTimeout, "the overlap check to answer with IC SB back", func() error {
		return a.client.checkOverlap(ctx, withNew)
	})
	if err := a.client.checkOverlap(ctx, overlapping); !errors.As(err, &overlap) {
		t.Fatalf("overlap check of az-b's prefix with IC SB back: %v, want an *OverlapError", err)
	}
	// The same Apply goes through now, and the check above sees its port: it can fail.
	a.apply(t, withNew)
	if out := a.nbctl(t, "--bare", "--columns=ports", "list", "Logical_Switch", "az-a-new"); strings.TrimSpace(out) == "" {
		t.Errorf("az-a-new has no port after the Apply with IC SB back")
	}
}
