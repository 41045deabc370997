package route

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

var (
	gw1 = netip.MustParseAddr("198.51.100.2")
	gw2 = netip.MustParseAddr("198.51.100.3")
	// Remote clusters' CIDRs in the lab's 10.x ranges.
	podsA = netip.MustParsePrefix("10.2.0.0/16")
	svcsA = netip.MustParsePrefix("10.98.0.0/16")
	podsB = netip.MustParsePrefix("10.3.0.0/16")
)

// testNamespace creates a throwaway network namespace with a link on 198.51.100.0/28 (so the
// next hops gw1 and gw2 are directly connected) and returns its path and a handle into it.
func testNamespace(t *testing.T) (string, *netlink.Handle) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating network namespaces needs root (run the tests as root; CI does)")
	}
	name := fmt.Sprintf("octort-%d-%d", os.Getpid(), rand.Uint32()) //nolint:gosec // a unique name, not a secret
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		orig, err := netns.Get()
		if err != nil {
			t.Fatal(err)
		}
		defer orig.Close()
		ns, err := netns.NewNamed(name)
		if err != nil {
			t.Fatalf("creating namespace %s: %v", name, err)
		}
		ns.Close()
		if err := netns.Set(orig); err != nil {
			t.Fatalf("returning to the original namespace: %v", err)
		}
	}()
	t.Cleanup(func() {
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("deleting namespace %s: %v", name, err)
		}
	})
	path := "/run/netns/" + name
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lan0"}, PeerName: "lan1"}
	if err := h.LinkAdd(veth); err != nil {
		t.Fatalf("adding veth: %v", err)
	}
	for _, name := range []string{"lan0", "lan1"} {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	l, _ := h.LinkByName("lan0")
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("198.51.100.1"), Mask: net.CIDRMask(28, 32)}}); err != nil {
		t.Fatal(err)
	}
	return path, h
}

// newTestTable opens a table with the route agent's markers, or with o's when given.
func newTestTable(t *testing.T, path string, o ...TableOptions) *Table {
	t.Helper()
	opts := TableOptions{Protocol: owner.RouteAgentProtocol, Metric: owner.RouteAgentMetric}
	if len(o) > 0 {
		opts = o[0]
	}
	opts.NetnsPath = path
	tbl, err := NewTable(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tbl.Close)
	return tbl
}

// foreignRoute adds a route that is not ours: another protocol (static), the given metric.
func foreignRoute(t *testing.T, h *netlink.Handle, dst netip.Prefix, via netip.Addr, metric int) {
	t.Helper()
	r := &netlink.Route{Dst: ipNet(dst), Gw: via.AsSlice(), Priority: metric, Protocol: 4 /* static */}
	if err := h.RouteAdd(r); err != nil {
		t.Fatalf("adding foreign route %s: %v", dst, err)
	}
}

// allRoutes lists every gatewayed route of the namespace as "dst via gw proto P metric M".
func allRoutes(t *testing.T, h *netlink.Handle) []string {
	t.Helper()
	routes, err := h.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range routes {
		if r.Gw == nil || r.Dst == nil {
			continue
		}
		out = append(out, fmt.Sprintf("%s via %s proto %d metric %d", r.Dst, r.Gw, r.Protocol, r.Priority))
	}
	slices.Sort(out)
	return out
}

func TestTableApply(t *testing.T) {
	path, h := testNamespace(t)
	tbl := newTestTable(t, path)
	// Someone else's routes: one to a destination we never want, one to a destination we want
	// but with another metric (the gateway node's tunnel driver route), which must stay.
	foreignRoute(t, h, netip.MustParsePrefix("10.50.0.0/16"), gw2, 0)
	foreignRoute(t, h, podsB, gw2, 0)
	foreign := []string{"10.3.0.0/16 via 198.51.100.3 proto 4 metric 0", "10.50.0.0/16 via 198.51.100.3 proto 4 metric 0"}

	steps := []struct {
		name    string
		desired []Route
		// tamper changes the kernel behind the table's back before Apply.
		tamper func(t *testing.T)
		want   []Route
	}{
		{name: "first routes", desired: []Route{{podsA, gw1}, {svcsA, gw1}, {podsB, gw1}},
			want: []Route{{podsA, gw1}, {podsB, gw1}, {svcsA, gw1}}},
		{name: "same again is a no-op", desired: []Route{{svcsA, gw1}, {podsB, gw1}, {podsA, gw1}},
			want: []Route{{podsA, gw1}, {podsB, gw1}, {svcsA, gw1}}},
		{name: "failover moves every route", desired: []Route{{podsA, gw2}, {svcsA, gw2}, {podsB, gw2}},
			want: []Route{{podsA, gw2}, {podsB, gw2}, {svcsA, gw2}}},
		{name: "a route deleted by hand comes back", desired: []Route{{podsA, gw2}, {svcsA, gw2}, {podsB, gw2}},
			tamper: func(t *testing.T) {
				if err := h.RouteDel(&netlink.Route{Dst: ipNet(svcsA), Priority: owner.RouteAgentMetric, Table: owner.MainTable}); err != nil {
					t.Fatal(err)
				}
			},
			want: []Route{{podsA, gw2}, {podsB, gw2}, {svcsA, gw2}}},
		{name: "a cluster leaves", desired: []Route{{podsB, gw2}}, want: []Route{{podsB, gw2}}},
		{name: "a leftover of an earlier run goes", desired: []Route{{podsB, gw2}},
			tamper: func(t *testing.T) {
				r := &netlink.Route{Dst: ipNet(podsA), Gw: gw1.AsSlice(), Priority: owner.RouteAgentMetric, Protocol: owner.RouteAgentProtocol}
				if err := h.RouteAdd(r); err != nil {
					t.Fatal(err)
				}
			},
			want: []Route{{podsB, gw2}}},
		{name: "nothing desired", desired: nil, want: []Route{}},
	}
	for _, s := range steps {
		if s.tamper != nil {
			s.tamper(t)
		}
		if err := tbl.Apply(s.desired); err != nil {
			t.Fatalf("%s: Apply: %v", s.name, err)
		}
		got, err := tbl.List()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, s.want) {
			t.Fatalf("%s: our routes = %v, want %v", s.name, got, s.want)
		}
		var theirs []string
		for _, r := range allRoutes(t, h) {
			if strings.Contains(r, "proto 4 ") {
				theirs = append(theirs, r)
			}
		}
		if !slices.Equal(theirs, foreign) {
			t.Fatalf("%s: foreign routes = %v, want them untouched: %v", s.name, theirs, foreign)
		}
	}
}

func TestTableApplyRefusesForeignSlot(t *testing.T) {
	path, h := testNamespace(t)
	tbl := newTestTable(t, path)
	// A foreign route with our metric to a destination we want: RouteReplace would take it.
	foreignRoute(t, h, podsA, gw2, owner.RouteAgentMetric)
	err := tbl.Apply([]Route{{podsA, gw1}, {podsB, gw1}})
	if err == nil || !strings.Contains(err.Error(), "not ours") {
		t.Fatalf("Apply = %v, want an error naming the foreign route", err)
	}
	got, err := tbl.List()
	if err != nil {
		t.Fatal(err)
	}
	// The other route is applied all the same; the foreign one is intact.
	if want := []Route{{podsB, gw1}}; !slices.Equal(got, want) {
		t.Fatalf("our routes = %v, want %v", got, want)
	}
	if all := allRoutes(t, h); !slices.Contains(all, "10.2.0.0/16 via 198.51.100.3 proto 4 metric 212") {
		t.Fatalf("foreign route gone or changed: %v", all)
	}
}

func TestTableApplyInvalid(t *testing.T) {
	path, _ := testNamespace(t)
	tbl := newTestTable(t, path)
	tests := []struct {
		name string
		r    Route
	}{
		{"no next hop", Route{Dst: podsA}},
		{"no destination", Route{Via: gw1}},
		{"mixed families", Route{Dst: netip.MustParsePrefix("fd00::/64"), Via: gw1}},
		{"next hop not connected", Route{Dst: podsA, Via: netip.MustParseAddr("203.0.113.9")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tbl.Apply([]Route{tt.r, {podsB, gw1}}); err == nil {
				t.Fatalf("Apply(%v) succeeded, want an error", tt.r)
			}
			if got, _ := tbl.List(); !slices.Equal(got, []Route{{podsB, gw1}}) {
				t.Fatalf("our routes = %v, want only the valid one", got)
			}
		})
	}
}

// TestTableTransitions applies random desired sets in random order and checks that the kernel
// always ends up with exactly the last one.
func TestTableTransitions(t *testing.T) {
	path, _ := testNamespace(t)
	tbl := newTestTable(t, path)
	dsts := []netip.Prefix{podsA, svcsA, podsB, netip.MustParsePrefix("10.4.0.0/16"), netip.MustParsePrefix("10.100.0.0/16")}
	vias := []netip.Addr{gw1, gw2}
	r := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // reproducible test input
	for i := range 40 {
		var desired []Route
		for _, d := range dsts {
			if r.IntN(2) == 0 {
				desired = append(desired, Route{Dst: d, Via: vias[r.IntN(len(vias))]})
			}
		}
		if err := tbl.Apply(desired); err != nil {
			t.Fatalf("step %d: Apply(%v): %v", i, desired, err)
		}
		got, err := tbl.List()
		if err != nil {
			t.Fatal(err)
		}
		want := slices.SortedFunc(slices.Values(desired), compareRoutes)
		if want == nil {
			want = []Route{}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: routes = %v, want %v", i, got, want)
		}
	}
}

func TestTableApplyConflictingNextHops(t *testing.T) {
	path, _ := testNamespace(t)
	tbl := newTestTable(t, path)
	err := tbl.Apply([]Route{{podsA, gw1}, {podsA, gw2}, {podsB, gw1}})
	if err == nil || !strings.Contains(err.Error(), "two next hops") {
		t.Fatalf("Apply = %v, want an error naming both next hops", err)
	}
	// The first next hop is kept, the other routes are applied all the same.
	if got, _ := tbl.List(); !slices.Equal(got, []Route{{podsA, gw1}, {podsB, gw1}}) {
		t.Fatalf("our routes = %v", got)
	}
}

func TestNewTableRefusesKernelProtocols(t *testing.T) {
	for _, o := range []TableOptions{{}, {Protocol: 2}, {Protocol: 4}, {Protocol: 256}, {Protocol: owner.RouteAgentProtocol, Metric: -1}} {
		if tbl, err := NewTable(o); err == nil {
			tbl.Close()
			t.Errorf("NewTable(%+v) succeeded, want an error", o)
		}
	}
}

// TestTablesShareNamespace runs the route agent's table and a tunnel driver's (bound to a
// device) in one namespace, as on a gateway node: both route the same destination in their own
// slots, and neither deletes, replaces or lists the other's routes.
func TestTablesShareNamespace(t *testing.T) {
	path, _ := testNamespace(t)
	agent := newTestTable(t, path)
	tunnel := newTestTable(t, path, TableOptions{Protocol: owner.TunnelRouteProtocol, Metric: owner.TunnelRouteMetric, Device: "lan1"})
	podsC, podsD := netip.MustParsePrefix("10.4.0.0/16"), netip.MustParsePrefix("10.5.0.0/16")
	// Straight into the device, and onlink through it to a next hop on none of its subnets
	// (the vxlan driver's routes).
	far := netip.MustParseAddr("203.0.113.9")
	agentRoutes := []Route{{podsA, gw1}, {podsB, gw1}}
	tunnelRoutes := []Route{{Dst: podsA}, {Dst: podsC}, {Dst: podsD, Via: far}}
	check := func(step string, wantAgent, wantTunnel []Route) {
		t.Helper()
		for _, c := range []struct {
			name string
			tbl  *Table
			want []Route
		}{{"agent", agent, wantAgent}, {"tunnel", tunnel, wantTunnel}} {
			got, err := c.tbl.List()
			if err != nil {
				t.Fatal(err)
			}
			if c.want == nil {
				c.want = []Route{}
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("%s: the %s table's routes = %v, want %v", step, c.name, got, c.want)
			}
		}
	}
	for _, step := range []struct {
		name                       string
		agentDesired, tunnelWanted []Route
	}{
		{"both", agentRoutes, tunnelRoutes},
		{"the tunnel's go", agentRoutes, nil},
		{"the tunnel's are back", agentRoutes, tunnelRoutes},
		{"the agent's go", nil, tunnelRoutes},
		{"the tunnel's go too", nil, nil},
	} {
		if err := agent.Apply(step.agentDesired); err != nil {
			t.Fatalf("%s: agent Apply: %v", step.name, err)
		}
		if err := tunnel.Apply(step.tunnelWanted); err != nil {
			t.Fatalf("%s: tunnel Apply: %v", step.name, err)
		}
		check(step.name, step.agentDesired, slices.SortedFunc(slices.Values(step.tunnelWanted), compareRoutes))
	}
	// A table bound to a device that does not exist applies nothing.
	missing := newTestTable(t, path, TableOptions{Protocol: owner.TunnelRouteProtocol, Device: "nosuchdev"})
	if err := missing.Apply([]Route{{Dst: podsA}}); err == nil || !strings.Contains(err.Error(), "nosuchdev") {
		t.Fatalf("Apply on a missing device = %v, want an error naming it", err)
	}
}

func TestRouteDiff(t *testing.T) {
	p := netip.MustParsePrefix
	gw := netip.MustParseAddr("203.0.113.2")
	gwB := netip.MustParseAddr("203.0.113.3")
	tests := []struct {
		name    string
		current []Route
		desired map[netip.Prefix]netip.Addr
		wantDel []netip.Prefix
		wantSet []Route
	}{
		{name: "nothing yet", desired: map[netip.Prefix]netip.Addr{p("10.2.0.0/16"): gw},
			wantSet: []Route{{p("10.2.0.0/16"), gw}}},
		{name: "in sync", current: []Route{{p("10.2.0.0/16"), gw}}, desired: map[netip.Prefix]netip.Addr{p("10.2.0.0/16"): gw}},
		{name: "peer removed", current: []Route{{p("10.3.0.0/16"), gw}, {p("10.2.0.0/16"), gw}}, desired: map[netip.Prefix]netip.Addr{p("10.2.0.0/16"): gw},
			wantDel: []netip.Prefix{p("10.3.0.0/16")}},
		{name: "prefix length changed", current: []Route{{Dst: p("10.2.0.0/24")}}, desired: map[netip.Prefix]netip.Addr{p("10.2.0.0/16"): {}},
			wantDel: []netip.Prefix{p("10.2.0.0/24")}, wantSet: []Route{{Dst: p("10.2.0.0/16")}}},
		{name: "all removed, sorted", current: []Route{{Dst: p("fd00::/64")}, {Dst: p("10.9.0.0/16")}, {Dst: p("10.1.0.0/16")}},
			wantDel: []netip.Prefix{p("10.1.0.0/16"), p("10.9.0.0/16"), p("fd00::/64")}},
		// A failover: the route is replaced in place, never deleted first.
		{name: "next hop changed", current: []Route{{p("10.2.0.0/16"), gw}}, desired: map[netip.Prefix]netip.Addr{p("10.2.0.0/16"): gwB},
			wantSet: []Route{{p("10.2.0.0/16"), gwB}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			del, set := diff(tt.current, tt.desired)
			var delDst []netip.Prefix
			for _, r := range del {
				delDst = append(delDst, r.Dst)
			}
			if !slices.Equal(delDst, tt.wantDel) || !slices.Equal(set, tt.wantSet) {
				t.Fatalf("diff = delete %v, set %v; want delete %v, set %v", delDst, set, tt.wantDel, tt.wantSet)
			}
		})
	}
}
