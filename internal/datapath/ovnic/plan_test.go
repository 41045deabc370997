package ovnic

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/ovnic/icsbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

func testAZ() AZ {
	return AZ{
		Name: "east", TransitSwitch: "ts1", TransitAddress: netip.MustParsePrefix("169.254.100.1/24"),
		GatewayChassis: []string{"n1", "n2"}, AutoRoutes: true,
		Subnets: []Subnet{
			{Switch: "octopus-east", Address: netip.MustParsePrefix("10.1.0.254/24")},
			{Switch: "private", Address: netip.MustParsePrefix("10.1.1.254/24"), OptOut: true},
		},
		Routes: []Route{{Prefix: netip.MustParsePrefix("10.9.0.0/16"), NextHop: netip.MustParseAddr("169.254.100.2")}},
	}
}

// emptyObs is a fresh AZ database: NB_Global (ovn-northd's), the subnet switches and ovn-ic's
// copy of the transit switch, nothing of ours.
func emptyObs() observed {
	return observed{
		global: nbdb.NBGlobal{UUID: "g", Options: map[string]string{"mac_prefix": "0a:00:00", owner.OVNInterconnectOptionDenylist: "1.2.3.0/24"}},
		switches: map[string]nbdb.LogicalSwitch{
			"ts1": {UUID: "s-ts"}, "octopus-east": {UUID: "s-east"}, "private": {UUID: "s-priv"},
		},
		lrps: map[string]nbdb.LogicalRouterPort{}, lsps: map[string]nbdb.LogicalSwitchPort{},
		lspSwitch: map[string]string{}, gateways: map[string]nbdb.GatewayChassis{},
	}
}

// applied is what the database holds after plan p was written into obs (the transaction's
// effect, simulated), so that planning again can be checked to find nothing to do.
func applied(obs observed, p plan) observed {
	if p.global != nil {
		obs.global = *p.global
	}
	if p.createRouter {
		obs.router = &nbdb.LogicalRouter{UUID: "r", Name: RouterName("east"), ExternalIDs: ids("east")}
	}
	for i, d := range append(p.createLRPs, p.updateLRPs...) {
		port := d.port
		if port.UUID == "" {
			port.UUID = "lrp-" + port.Name
		}
		if d.gateways != nil || d.gatewaysChanged {
			port.GatewayChassis = nil
			for j, g := range d.gateways {
				g.UUID = port.Name + "-gw" + string(rune('a'+i)) + string(rune('a'+j))
				obs.gateways[g.UUID] = g
				port.GatewayChassis = append(port.GatewayChassis, g.UUID)
			}
		}
		obs.lrps[port.Name] = port
	}
	for _, lsp := range append(p.createLSPs, p.updateLSPs...) {
		if lsp.UUID == "" {
			lsp.UUID = "lsp-" + lsp.Name
			obs.lspSwitch[lsp.UUID] = p.lspSwitch[lsp.Name]
		}
		obs.lsps[lsp.Name] = lsp
	}
	for i, r := range p.createRoutes {
		r.UUID = "route" + string(rune('a'+i))
		obs.routes = append(obs.routes, r)
	}
	return obs
}

func TestPlanFromEmptyThenNothing(t *testing.T) {
	az := testAZ()
	p, err := makePlan(az, emptyObs())
	if err != nil {
		t.Fatal(err)
	}
	if !p.createRouter || len(p.createLRPs) != 3 || len(p.createLSPs) != 3 || len(p.createRoutes) != 1 {
		t.Fatalf("plan from empty: router %v, %d router ports, %d switch ports, %d routes; want a router, 3, 3, 1",
			p.createRouter, len(p.createLRPs), len(p.createLSPs), len(p.createRoutes))
	}
	g := p.global
	if g == nil || g.Name != "east" || g.Options["ic-route-adv"] != "true" || g.Options["ic-route-learn"] != "true" ||
		g.Options["ic-route-blacklist"] != "10.1.1.0/24,10.9.0.0/16" || g.Options["mac_prefix"] != "0a:00:00" {
		t.Fatalf("NB_Global: %+v; want name east, adv/learn true, the opt-out and the manual prefix blacklisted, other options kept", g)
	}
	ts := p.createLRPs[0]
	if ts.port.Name != RouterPortName("east", "ts1") || ts.port.Networks[0] != "169.254.100.1/24" || ts.port.MAC != "0a:58:a9:fe:64:01" {
		t.Fatalf("transit router port: %+v", ts.port)
	}
	if len(ts.gateways) != 2 || ts.gateways[0].ChassisName != "n1" || ts.gateways[0].Priority != 100 || ts.gateways[1].Priority != 99 {
		t.Fatalf("gateway chassis: %+v; want n1 at 100, n2 at 99", ts.gateways)
	}
	for _, lsp := range p.createLSPs {
		if lsp.Type != "router" || lsp.Options["router-port"] != strings.TrimSuffix(lsp.Name, "-rtr") || !isOurs(lsp.ExternalIDs, "east") {
			t.Fatalf("switch port %+v", lsp)
		}
	}
	again, err := makePlan(az, applied(emptyObs(), p))
	if err != nil || !again.empty() {
		t.Fatalf("second plan %+v, %v; want nothing to do", again, err)
	}
}

// TestPlanTransitions: from any of several states, planning for the next and writing it leaves
// nothing to do, whatever the order (rule 9: transitions in varied order).
func TestPlanTransitions(t *testing.T) {
	states := map[string]func(*AZ){
		"base":          func(*AZ) {},
		"no opt-out":    func(az *AZ) { az.Subnets[1].OptOut = false },
		"manual":        func(az *AZ) { az.AutoRoutes = false },
		"gateways swap": func(az *AZ) { az.GatewayChassis = []string{"n2", "n1"} },
		"one gateway":   func(az *AZ) { az.GatewayChassis = []string{"n3"} },
		"no routes":     func(az *AZ) { az.Routes = nil },
		"one subnet":    func(az *AZ) { az.Subnets = az.Subnets[:1] },
		"new route":     func(az *AZ) { az.Routes[0].NextHop = netip.MustParseAddr("169.254.100.3") },
	}
	orders := [][]string{
		{"base", "no opt-out", "manual", "gateways swap", "one gateway", "no routes", "one subnet", "new route", "base"},
		{"one subnet", "new route", "gateways swap", "base", "manual", "no routes", "no opt-out", "one gateway", "base"},
	}
	for _, order := range orders {
		obs := emptyObs()
		for _, name := range order {
			az := testAZ()
			az.Subnets = append([]Subnet(nil), az.Subnets...)
			az.Routes = append([]Route(nil), az.Routes...)
			states[name](&az)
			p, err := makePlan(az, obs)
			if err != nil {
				t.Fatalf("%v, %s: %v", order, name, err)
			}
			obs = appliedWithDeletes(obs, p)
			if again, err := makePlan(az, obs); err != nil || !again.empty() {
				t.Fatalf("%v, %s: second plan %+v, %v; want nothing to do", order, name, again, err)
			}
			if len(obs.routes) != len(az.Routes) {
				t.Fatalf("%v, %s: %d manual routes, want %d", order, name, len(obs.routes), len(az.Routes))
			}
		}
	}
}

// appliedWithDeletes is applied, plus the plan's deletions.
func appliedWithDeletes(obs observed, p plan) observed {
	// Copy the maps: obs of an earlier step stays as it was.
	c := obs
	c.lrps, c.lsps, c.lspSwitch, c.gateways = map[string]nbdb.LogicalRouterPort{}, map[string]nbdb.LogicalSwitchPort{}, map[string]string{}, map[string]nbdb.GatewayChassis{}
	for k, v := range obs.lrps {
		c.lrps[k] = v
	}
	for k, v := range obs.lsps {
		c.lsps[k] = v
	}
	for k, v := range obs.lspSwitch {
		c.lspSwitch[k] = v
	}
	for k, v := range obs.gateways {
		c.gateways[k] = v
	}
	c.routes = nil
	gone := map[string]bool{}
	for _, u := range p.deleteRoutes {
		gone[u] = true
	}
	for _, r := range obs.routes {
		if !gone[r.UUID] {
			c.routes = append(c.routes, r)
		}
	}
	for _, u := range p.deleteLRPs {
		for n, port := range c.lrps {
			if port.UUID == u {
				delete(c.lrps, n)
			}
		}
	}
	for _, lsp := range p.deleteLSPs {
		delete(c.lsps, lsp.Name)
	}
	// Route UUIDs must stay unique across steps.
	for i := range p.createRoutes {
		p.createRoutes[i].ExternalIDs = ids("east")
	}
	out := applied(c, p)
	for i := range out.routes {
		if out.routes[i].UUID == "" || strings.HasPrefix(out.routes[i].UUID, "route") {
			out.routes[i].UUID = out.routes[i].IPPrefix + "|" + out.routes[i].Nexthop
		}
	}
	return out
}

func TestPlanRefuses(t *testing.T) {
	az := testAZ()
	renamed := emptyObs()
	renamed.global.Name = "west"
	if _, err := makePlan(az, renamed); err == nil || !strings.Contains(err.Error(), `"west"`) {
		t.Fatalf("an NB database named for another AZ: %v; want refused", err)
	}
	noGlobal := emptyObs()
	noGlobal.global = nbdb.NBGlobal{}
	if _, err := makePlan(az, noGlobal); !errors.Is(err, ErrNotReady) {
		t.Fatalf("no NB_Global: %v; want ErrNotReady", err)
	}
	noTS := emptyObs()
	delete(noTS.switches, "ts1")
	p, err := makePlan(az, noTS)
	if !errors.Is(err, ErrNotReady) || p.global == nil || p.createRouter || len(p.createLSPs) > 0 {
		t.Fatalf("no transit switch: plan %+v, %v; want ErrNotReady and only NB_Global (the AZ's name, which ovn-ic waits for)", p, err)
	}
	held := emptyObs()
	held.held = map[string]map[netip.Addr]string{"private": {netip.MustParseAddr("10.1.1.254"): "east_gateway"}}
	if _, err := makePlan(az, held); !errors.Is(err, ErrAddressHeld) || !strings.Contains(err.Error(), "east_gateway") || !strings.Contains(err.Error(), "--interconnect") {
		t.Fatalf("the router's address held by another port: %v; want ErrAddressHeld naming the port and the fix", err)
	}
	elsewhere := emptyObs()
	elsewhere.held = map[string]map[netip.Addr]string{"octopus-east": {netip.MustParseAddr("10.1.1.254"): "pod"}}
	if _, err := makePlan(az, elsewhere); err != nil {
		t.Fatalf("the router's address held on another switch: %v; want no refusal", err)
	}
	noSwitch := emptyObs()
	delete(noSwitch.switches, "private")
	if _, err := makePlan(az, noSwitch); !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "private") {
		t.Fatalf("no subnet switch: %v; want ErrNotReady naming it", err)
	}
}

func TestValidate(t *testing.T) {
	bad := map[string]func(*AZ){
		"no name":          func(az *AZ) { az.Name = "" },
		"comma in name":    func(az *AZ) { az.Name = "a,b" },
		"no transit":       func(az *AZ) { az.TransitSwitch = "" },
		"ipv6 transit":     func(az *AZ) { az.TransitAddress = netip.MustParsePrefix("fd00::1/64") },
		"chassis twice":    func(az *AZ) { az.GatewayChassis = []string{"n1", "n1"} },
		"subnets overlap":  func(az *AZ) { az.Subnets[1].Address = netip.MustParsePrefix("10.1.0.200/25") },
		"switch twice":     func(az *AZ) { az.Subnets[1].Switch = "octopus-east" },
		"subnet is ts":     func(az *AZ) { az.Subnets[1].Switch = "ts1" },
		"unmasked route":   func(az *AZ) { az.Routes[0].Prefix = netip.MustParsePrefix("10.9.0.1/16") },
		"route twice":      func(az *AZ) { az.Routes = append(az.Routes, az.Routes[0]) },
		"no route nexthop": func(az *AZ) { az.Routes[0].NextHop = netip.Addr{} },
	}
	if err := testAZ().validate(); err != nil {
		t.Fatalf("valid AZ: %v", err)
	}
	for name, f := range bad {
		az := testAZ()
		az.Subnets = append([]Subnet(nil), az.Subnets...)
		az.Routes = append([]Route(nil), az.Routes...)
		f(&az)
		if err := az.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCheckOverlap(t *testing.T) {
	zones := map[string]string{"z-east": "east", "z-west": "west", "z-north": "north"}
	route := func(zone, prefix, ts string) icsbdb.Route {
		return icsbdb.Route{AvailabilityZone: zone, IPPrefix: prefix, TransitSwitch: ts}
	}
	for _, tc := range []struct {
		name   string
		routes []icsbdb.Route
		auto   bool
		want   string // "" for no error, else the other AZ
	}{
		{"nobody else", []icsbdb.Route{route("z-east", "10.1.0.0/24", "ts1")}, true, ""},
		{"identical elsewhere", []icsbdb.Route{route("z-west", "10.1.0.0/24", "ts1")}, true, "west"},
		{"inside ours", []icsbdb.Route{route("z-north", "10.1.0.128/25", "ts1")}, true, "north"},
		{"around ours", []icsbdb.Route{route("z-west", "10.0.0.0/8", "ts1")}, true, "west"},
		{"other transit switch", []icsbdb.Route{route("z-west", "10.1.0.0/24", "ts2")}, true, ""},
		{"opted-out subnet", []icsbdb.Route{route("z-west", "10.1.1.0/24", "ts1")}, true, ""},
		{"we were first", []icsbdb.Route{route("z-east", "10.1.0.0/24", "ts1"), route("z-west", "10.1.0.0/24", "ts1")}, true, ""},
		{"manual mode advertises nothing", []icsbdb.Route{route("z-west", "10.1.0.0/24", "ts1")}, false, ""},
		{"disjoint", []icsbdb.Route{route("z-west", "10.2.0.0/24", "ts1")}, true, ""},
	} {
		az := testAZ()
		az.AutoRoutes = tc.auto
		err := checkOverlap(az, zones, tc.routes)
		var o *OverlapError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v; want none", tc.name, err)
		case tc.want != "" && (!errors.As(err, &o) || o.OtherAZ != tc.want || o.AZ != "east"):
			t.Errorf("%s: %v; want an overlap with %s", tc.name, err, tc.want)
		case tc.want != "" && (!strings.Contains(err.Error(), "east") || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %q does not name both AZs", tc.name, err)
		}
	}
}
