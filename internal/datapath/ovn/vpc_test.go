package ovn

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

var testSubnets = []Subnet{{Name: "a", CIDR: netip.MustParsePrefix("10.1.0.0/24")}, {Name: "b", CIDR: netip.MustParsePrefix("10.1.1.0/24")}}

func vpod(name, subnet string) VpcPod { return VpcPod{Pod: pod(name), Subnet: subnet} }

// written is the database after p was written: every created row with a UUID, as observeVpc
// reads it back.
func written(p vpcPlan) vpcObserved {
	obs := vpcObserved{router: &nbdb.LogicalRouter{UUID: "router"}, subnets: map[string]observed{}}
	for _, lrp := range p.lrpCreate {
		lrp.UUID = "lrp-" + lrp.Name
		obs.lrps = append(obs.lrps, lrp)
		obs.router.Ports = append(obs.router.Ports, lrp.UUID)
	}
	for _, s := range p.subnets {
		o := observed{sw: &nbdb.LogicalSwitch{UUID: "sw-" + s.name, Name: s.name, ExternalIDs: s.plan.switchIDs}}
		for _, port := range s.plan.create {
			port.UUID = "lsp-" + port.Name
			o.ports = append(o.ports, port)
			o.sw.Ports = append(o.sw.Ports, port.UUID)
		}
		obs.subnets[s.plan.switchIDs[owner.OVNKeySubnet]] = o
	}
	for _, r := range p.routeCreate {
		r.UUID = "route-" + r.IPPrefix
		obs.routes = append(obs.routes, r)
		obs.router.StaticRoutes = append(obs.router.StaticRoutes, r.UUID)
	}
	if g := p.gateway; g != nil {
		obs.gateway = observed{sw: &nbdb.LogicalSwitch{UUID: "sw-gateway", Name: "link", ExternalIDs: g.switchIDs}}
		for _, port := range g.create {
			port.UUID = "lsp-" + port.Name
			obs.gateway.ports = append(obs.gateway.ports, port)
			obs.gateway.sw.Ports = append(obs.gateway.sw.Ports, port.UUID)
		}
	}
	return obs
}

func mustPlan(t *testing.T, v Vpc, obs vpcObserved) vpcPlan {
	t.Helper()
	blocks, err := v.validate()
	if err != nil {
		t.Fatal(err)
	}
	return makeVpcPlan(v, blocks, obs)
}

func createdNames(p vpcPlan) []string {
	var out []string
	if p.createRouter {
		out = append(out, "router")
	}
	for _, l := range p.lrpCreate {
		out = append(out, "lrp "+l.Name)
	}
	for _, s := range p.subnets {
		if s.plan.createSwitch {
			out = append(out, "switch "+s.name)
		}
		for _, c := range s.plan.create {
			out = append(out, "lsp "+c.Name)
		}
	}
	if g := p.gateway; g != nil {
		if g.createSwitch {
			out = append(out, "gateway switch")
		}
		for _, c := range g.create {
			out = append(out, "lsp "+c.Name)
		}
	}
	for _, r := range p.routeCreate {
		out = append(out, "route "+r.IPPrefix+" via "+r.Nexthop)
	}
	slices.Sort(out)
	return out
}

// TestMakeVpcPlan walks a VPC through its changes on a pure plan: what is created, what an
// unchanged VPC plans (nothing), a removed subnet, a repaired router port, pods on named
// subnets and on an unknown one.
func TestMakeVpcPlan(t *testing.T) {
	v := Vpc{ClusterID: "east", Name: "red", Subnets: testSubnets, Pods: []VpcPod{vpod("p1", ""), vpod("p2", "b"), vpod("p3", "a")}}
	first := mustPlan(t, v, vpcObserved{})
	then := written(first)

	shrunk := v
	shrunk.Subnets, shrunk.Pods = testSubnets[:1], v.Pods[:1]
	editedLRP := written(first)
	editedLRP.lrps[0].MAC = "0a:00:00:00:00:01"
	unknown := v
	unknown.Pods = append(slices.Clone(v.Pods), vpod("p4", "c"))

	// The same VPC with a gateway on node-a, then on node-b, then without again.
	gwA, gwB := v, v
	gwA.Gateway, gwB.Gateway = &VpcGateway{Chassis: "node-a"}, &VpcGateway{Chassis: "node-b"}
	added := written(mustPlan(t, gwA, then)) // the gateway's rows alone
	withGW := then
	withGW.router = &nbdb.LogicalRouter{UUID: "router", Ports: append(slices.Clone(then.router.Ports), added.router.Ports...), StaticRoutes: added.router.StaticRoutes}
	withGW.lrps = append(slices.Clone(then.lrps), added.lrps...)
	withGW.routes, withGW.gateway = added.routes, added.gateway
	// The gateway on node-a given an external address: one update of its port, in place.
	gwAddressed := v
	gwAddressed.Gateway = &VpcGateway{Chassis: "node-a", ExternalIP: netip.MustParseAddr("242.1.0.9")}
	editedRoute := withGW
	editedRoute.routes = slices.Clone(withGW.routes)
	editedRoute.routes[0].Nexthop = "100.127.255.253"
	all := map[string]string{"p1": "10.1.0.2/24 via 10.1.0.1", "p2": "10.1.1.2/24 via 10.1.1.1", "p3": "10.1.0.3/24 via 10.1.0.1"}

	for _, tc := range []struct {
		name      string
		v         Vpc
		obs       vpcObserved
		created   []string
		attached  map[string]string // pod -> address/len via gateway
		failed    map[string]error
		lrpUpdate int
		lrpRemove []string
		removeSw  []string
		empty     bool
		// The gateway: the chassis its port is moved to in place (updateGateway), whether
		// its link switch goes, the routes updated in place and removed.
		gatewayMovedTo string
		// updatedExternalIP is the external address on the gateway port's update.
		updatedExternalIP string
		gatewayRemoved    bool
		routeUpdate       int
		routeRemove       []string
		gateway           string // the gateway's Attachment: "port IP via router"; "" for none
	}{
		{
			name: "a new VPC: router, a port and a switch per subnet, pods on theirs",
			v:    v, obs: vpcObserved{},
			created: []string{
				"lrp octopus-east.red.a", "lrp octopus-east.red.b",
				"lsp east_red_default_p1", "lsp east_red_default_p2", "lsp east_red_default_p3",
				"lsp octopus-east.red.a.router", "lsp octopus-east.red.b.router",
				"router", "switch octopus-east.red.a", "switch octopus-east.red.b",
			},
			attached: map[string]string{"p1": "10.1.0.2/24 via 10.1.0.1", "p2": "10.1.1.2/24 via 10.1.1.1", "p3": "10.1.0.3/24 via 10.1.0.1"},
		},
		{name: "the same VPC again plans nothing", v: v, obs: then, empty: true,
			attached: map[string]string{"p1": "10.1.0.2/24 via 10.1.0.1", "p2": "10.1.1.2/24 via 10.1.1.1", "p3": "10.1.0.3/24 via 10.1.0.1"}},
		{name: "a removed subnet goes with its router port and its pods", v: shrunk, obs: then,
			lrpRemove: []string{"lrp-octopus-east.red.b"}, removeSw: []string{"octopus-east.red.b"},
			attached: map[string]string{"p1": "10.1.0.2/24 via 10.1.0.1"}},
		{name: "an edited router port is repaired in place", v: v, obs: editedLRP, lrpUpdate: 1,
			attached: map[string]string{"p1": "10.1.0.2/24 via 10.1.0.1", "p2": "10.1.1.2/24 via 10.1.1.1", "p3": "10.1.0.3/24 via 10.1.0.1"}},
		{name: "a pod on an unknown subnet fails alone", v: unknown, obs: then, failed: map[string]error{"p4": ErrUnknownSubnet},
			attached: map[string]string{"p1": "10.1.0.2/24 via 10.1.0.1", "p2": "10.1.1.2/24 via 10.1.1.1", "p3": "10.1.0.3/24 via 10.1.0.1"}, empty: true},
		{
			name: "a new gateway: the link switch, the router's port on it, the gateway's port and the default route",
			v:    gwA, obs: then, attached: all,
			created: []string{
				"gateway switch", "lrp octopus-east.red.gateway.link",
				"lsp octopus-east.red.gateway.link.router", "lsp octopus-east.red.gateway.port",
				"route 0.0.0.0/0 via 100.127.255.254",
			},
			gateway: "octopus-east.red.gateway.port 100.127.255.254/30 via 100.127.255.253",
		},
		{name: "the same gateway again plans nothing", v: gwA, obs: withGW, empty: true, attached: all,
			gateway: "octopus-east.red.gateway.port 100.127.255.254/30 via 100.127.255.253"},
		{name: "another chassis updates the gateway port's binding alone", v: gwB, obs: withGW, attached: all, gatewayMovedTo: "node-b",
			gateway: "octopus-east.red.gateway.port 100.127.255.254/30 via 100.127.255.253"},
		{name: "an external address is one update of the gateway port", v: gwAddressed, obs: withGW, attached: all,
			gatewayMovedTo: "node-a", updatedExternalIP: "242.1.0.9",
			gateway: "octopus-east.red.gateway.port 100.127.255.254/30 via 100.127.255.253"},
		{name: "an edited default route is repaired in place", v: gwA, obs: editedRoute, attached: all, routeUpdate: 1,
			gateway: "octopus-east.red.gateway.port 100.127.255.254/30 via 100.127.255.253"},
		{name: "the gateway removed takes its link switch, router port and route", v: v, obs: withGW, attached: all,
			gatewayRemoved: true, lrpRemove: []string{"lrp-octopus-east.red.gateway.link"}, routeRemove: []string{"route-0.0.0.0/0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPlan(t, tc.v, tc.obs)
			if got := createdNames(p); !slices.Equal(got, tc.created) {
				t.Errorf("created %q\nwant    %q", got, tc.created)
			}
			if p.empty() != tc.empty {
				t.Errorf("empty() = %v, want %v: %+v", p.empty(), tc.empty, p)
			}
			if len(p.lrpUpdate) != tc.lrpUpdate || !slices.Equal(p.lrpRemove, tc.lrpRemove) {
				t.Errorf("router port updates %d, removals %q; want %d, %q", len(p.lrpUpdate), p.lrpRemove, tc.lrpUpdate, tc.lrpRemove)
			}
			var removed []string
			for _, o := range p.removeSubnets {
				removed = append(removed, o.sw.Name)
			}
			if !slices.Equal(removed, tc.removeSw) {
				t.Errorf("removed switches %q, want %q", removed, tc.removeSw)
			}
			got := map[string]string{}
			for k, a := range p.result.Attached {
				got[k.Name] = a.IP.String() + " via " + a.Gateway.String()
				if a.Port != VpcPortName("east", "red", k) {
					t.Errorf("pod %s on port %s", k, a.Port)
				}
			}
			if len(got) != len(tc.attached) {
				t.Errorf("attached %v, want %v", got, tc.attached)
			}
			for name, want := range tc.attached {
				if got[name] != want {
					t.Errorf("pod %s: %q, want %q", name, got[name], want)
				}
			}
			moved, external := "", ""
			if p.gateway != nil && p.gateway.updateGateway != nil {
				moved = p.gateway.updateGateway.Options["requested-chassis"]
				external = p.gateway.updateGateway.ExternalIDs[owner.OVNKeyExternalIP]
				if len(p.gateway.create)+len(p.gateway.update)+len(p.gateway.remove) > 0 || p.gateway.switchIDsChanged || p.gateway.updateGateway.UUID != "lsp-octopus-east.red.gateway.port" {
					t.Errorf("moving the gateway plans more than the one update of its row: %+v", p.gateway)
				}
			}
			if moved != tc.gatewayMovedTo || external != tc.updatedExternalIP {
				t.Errorf("gateway port updated to chassis %q, external address %q; want %q, %q", moved, external, tc.gatewayMovedTo, tc.updatedExternalIP)
			}
			if (p.removeGateway != nil) != tc.gatewayRemoved {
				t.Errorf("gateway link switch removed: %v, want %v", p.removeGateway != nil, tc.gatewayRemoved)
			}
			if len(p.routeUpdate) != tc.routeUpdate || !slices.Equal(p.routeRemove, tc.routeRemove) {
				t.Errorf("route updates %+v, removals %q; want %d, %q", p.routeUpdate, p.routeRemove, tc.routeUpdate, tc.routeRemove)
			}
			gw := ""
			if g := p.result.Gateway; g.Port != "" {
				gw = g.Port + " " + g.IP.String() + " via " + g.Gateway.String()
				if g.MAC.String() != "0a:58:64:7f:ff:fe" {
					t.Errorf("gateway MAC %s, want the one derived from its address", g.MAC)
				}
			}
			if gw != tc.gateway {
				t.Errorf("gateway %q, want %q", gw, tc.gateway)
			}
			if len(p.result.Failed) != len(tc.failed) {
				t.Errorf("failed %v, want %v", p.result.Failed, tc.failed)
			}
			for name, want := range tc.failed {
				if err := p.result.Failed[key(name)]; !errors.Is(err, want) {
					t.Errorf("pod %s failed with %v, want %v", name, err, want)
				}
			}
		})
	}
}

// TestVpcPlanRows checks the rows themselves: the router port at the subnet's first host with
// the MAC derived from it, the switch port joining it, every row marked as the VPC's and not
// as the cluster network's.
func TestVpcPlanRows(t *testing.T) {
	p := mustPlan(t, Vpc{ClusterID: "east", Name: "red", Subnets: testSubnets[:1], Pods: []VpcPod{vpod("p1", "")}}, vpcObserved{})
	lrp := p.lrpCreate[0]
	if lrp.MAC != "0a:58:0a:01:00:01" || !slices.Equal(lrp.Networks, []string{"10.1.0.1/24"}) {
		t.Errorf("router port %+v", lrp)
	}
	var rows []map[string]string
	rows = append(rows, lrp.ExternalIDs, p.subnets[0].plan.switchIDs)
	for _, c := range p.subnets[0].plan.create {
		rows = append(rows, c.ExternalIDs)
		if c.Name == "octopus-east.red.a.router" && (c.Type != "router" || c.Options["router-port"] != lrp.Name || !slices.Equal(c.Addresses, []string{"router"})) {
			t.Errorf("router switch port %+v", c)
		}
	}
	for _, ids := range rows {
		if !ownsVpc(ids, "east", "red") || ids[owner.OVNKeySubnet] != "a" || isOurs(ids, "east") {
			t.Errorf("external_ids %v: want the VPC's and subnet's marks, not the cluster network's", ids)
		}
	}
}

// TestVpcGatewayRows checks the gateway's rows: the router's port on the link at its first
// host, the link switch's port joining it, the gateway's port at the second host requested on
// its chassis with port security on the MAC alone (it forwards the outside's packets), the
// default route to it through the link, and every row marked as the VPC's gateway's.
func TestVpcGatewayRows(t *testing.T) {
	p := mustPlan(t, Vpc{ClusterID: "east", Name: "red", Subnets: testSubnets[:1], Gateway: &VpcGateway{Chassis: "node-a"}}, vpcObserved{})
	var lrp nbdb.LogicalRouterPort
	for _, l := range p.lrpCreate {
		if l.Name == "octopus-east.red.gateway.link" {
			lrp = l
		}
	}
	if lrp.MAC != "0a:58:64:7f:ff:fd" || !slices.Equal(lrp.Networks, []string{"100.127.255.253/30"}) {
		t.Errorf("the router's link port %+v", lrp)
	}
	if len(p.routeCreate) != 1 {
		t.Fatalf("routes %+v, want the default route alone", p.routeCreate)
	}
	r := p.routeCreate[0]
	if r.IPPrefix != "0.0.0.0/0" || r.Nexthop != "100.127.255.254" || r.OutputPort == nil || *r.OutputPort != lrp.Name || r.Policy != nil {
		t.Errorf("default route %+v", r)
	}
	rows := []map[string]string{lrp.ExternalIDs, r.ExternalIDs, p.gateway.switchIDs}
	if p.gateway.switchIDs[owner.OVNKeyCIDR] != "100.127.255.252/30" {
		t.Errorf("link switch external_ids %v", p.gateway.switchIDs)
	}
	names := map[string]nbdb.LogicalSwitchPort{}
	for _, c := range p.gateway.create {
		names[c.Name] = c
		rows = append(rows, c.ExternalIDs)
	}
	if c := names["octopus-east.red.gateway.link.router"]; c.Type != "router" || c.Options["router-port"] != lrp.Name || !slices.Equal(c.Addresses, []string{"router"}) {
		t.Errorf("the link's router switch port %+v", c)
	}
	if c := names["octopus-east.red.gateway.port"]; !slices.Equal(c.Addresses, []string{"0a:58:64:7f:ff:fe 100.127.255.254"}) ||
		!slices.Equal(c.PortSecurity, []string{"0a:58:64:7f:ff:fe"}) || !maps.Equal(c.Options, map[string]string{"requested-chassis": "node-a"}) || c.Type != "" {
		t.Errorf("the gateway port %+v", c)
	}
	if len(names) != 2 {
		t.Errorf("link switch ports %v, want the router's and the gateway's", slices.Collect(maps.Keys(names)))
	}
	for _, ids := range rows {
		if !ownsVpc(ids, "east", "red") || ids[owner.OVNKeyRole] != owner.OVNRoleGateway || ids[owner.OVNKeySubnet] != "" || isOurs(ids, "east") {
			t.Errorf("external_ids %v: want the VPC's marks with the gateway role, no subnet, not the cluster network's", ids)
		}
	}
	// Without a gateway, none of it.
	p = mustPlan(t, Vpc{ClusterID: "east", Name: "red", Subnets: testSubnets[:1]}, vpcObserved{})
	if p.gateway != nil || len(p.routeCreate) != 0 || len(p.lrpCreate) != 1 || p.result.Gateway.Port != "" {
		t.Errorf("a VPC without a gateway plans %+v", p)
	}
}

func TestVpcValidate(t *testing.T) {
	ok := Vpc{ClusterID: "east", Name: "red", Subnets: testSubnets}
	for _, tc := range []struct {
		name string
		edit func(v *Vpc)
		want string // empty: valid
	}{
		{"valid", func(*Vpc) {}, ""},
		{"cluster ID not a label", func(v *Vpc) { v.ClusterID = "East_1" }, "cluster ID"},
		{"VPC name not a label", func(v *Vpc) { v.Name = "red.1" }, "VPC name"},
		{"no subnet", func(v *Vpc) { v.Subnets = nil }, "has no subnet"},
		{"subnet name not a label", func(v *Vpc) { v.Subnets = []Subnet{{Name: "A", CIDR: testSubnets[0].CIDR}} }, "not an RFC 1123 label"},
		{"subnet twice", func(v *Vpc) { v.Subnets = []Subnet{testSubnets[0], {Name: "a", CIDR: testSubnets[1].CIDR}} }, "listed twice"},
		{"subnets overlap", func(v *Vpc) {
			v.Subnets = []Subnet{{Name: "a", CIDR: netip.MustParsePrefix("10.1.0.0/16")}, testSubnets[1]}
		}, "overlap"},
		{"subnet too small", func(v *Vpc) { v.Subnets = []Subnet{{Name: "a", CIDR: netip.MustParsePrefix("10.1.0.0/31")}} }, "too small"},
		{"pod without UID", func(v *Vpc) { v.Pods = []VpcPod{{Pod: Pod{Namespace: "default", Name: "x"}}} }, "UID"},
		{"gateway", func(v *Vpc) { v.Gateway = &VpcGateway{Chassis: "node-a"} }, ""},
		{"gateway on two chassis", func(v *Vpc) { v.Gateway = &VpcGateway{Chassis: "node-a,node-b"} }, `Gateway.Chassis "node-a,node-b" is not one chassis name`},
		{"gateway on no chassis", func(v *Vpc) { v.Gateway = &VpcGateway{} }, `Gateway.Chassis "" is not one chassis name`},
		{"gateway with an external address", func(v *Vpc) {
			v.Gateway = &VpcGateway{Chassis: "node-a", ExternalIP: netip.MustParseAddr("242.1.0.9")}
		}, ""},
		{"gateway with an IPv6 external address", func(v *Vpc) {
			v.Gateway = &VpcGateway{Chassis: "node-a", ExternalIP: netip.MustParseAddr("2001:db8::9")}
		}, "Gateway.ExternalIP 2001:db8::9 is not an IPv4 unicast address"},
		{"subnet over the gateway's link", func(v *Vpc) {
			v.Subnets = []Subnet{testSubnets[0], {Name: "cgnat", CIDR: netip.MustParsePrefix("100.64.0.0/10")}}
			v.Gateway = &VpcGateway{Chassis: "node-a"}
		}, "subnet cgnat (100.64.0.0/10) overlaps the gateway's link network 100.127.255.252/30"},
		{"subnet over the link without a gateway", func(v *Vpc) {
			v.Subnets = []Subnet{{Name: "cgnat", CIDR: netip.MustParsePrefix("100.64.0.0/10")}}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := ok
			tc.edit(&v)
			_, err := v.validate()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestVpcNamesNeverMeetTheClusters: for names chosen to collide (a namespace named like the
// VPC, a pod like a subnet, a VPC like a namespace), no VPC port, router port or switch name
// equals one of the cluster network's or of another VPC's.
func TestVpcNamesNeverMeetTheClusters(t *testing.T) {
	labels := []string{"east", "red", "a", "gateway", "router", "vpc", "octopus", "link", "port"}
	seen := map[string]string{}
	note := func(name, what string) {
		if other, dup := seen[name]; dup && other != what {
			t.Errorf("%q is both %s and %s", name, other, what)
		}
		seen[name] = what
	}
	for _, c := range labels {
		note(SwitchName(c), "cluster switch "+c)
		note(GatewayPortName(c), "cluster gateway port "+c)
		for _, x := range labels {
			for _, y := range append(slices.Clone(labels), "a.b", "router.x") {
				note(PortName(c, PodKey{Namespace: x, Name: y}), "cluster port "+c+"/"+x+"/"+y)
				if !strings.Contains(y, ".") {
					note(VpcSubnetName(c, x, y), "VPC switch or router port "+c+"/"+x+"/"+y)
					note(VpcRouterSwitchPortName(c, x, y), "VPC router switch port "+c+"/"+x+"/"+y)
				}
				for _, z := range labels {
					note(VpcPortName(c, x, PodKey{Namespace: y, Name: z}), "VPC port "+c+"/"+x+"/"+y+"/"+z)
				}
			}
			note(VpcRouterName(c, x), "VPC router "+c+"/"+x)
			note(VpcGatewayLinkName(c, x), "VPC gateway link switch and router port "+c+"/"+x)
			note(VpcGatewayLinkSwitchPortName(c, x), "VPC gateway link's router switch port "+c+"/"+x)
			note(VpcGatewayPortName(c, x), "VPC gateway port "+c+"/"+x)
		}
	}
}
