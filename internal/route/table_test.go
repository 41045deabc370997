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

func newTestTable(t *testing.T, path string) *Table {
	t.Helper()
	tbl, err := NewTable(TableOptions{NetnsPath: path})
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
				if err := h.RouteDel(&netlink.Route{Dst: ipNet(svcsA), Priority: Metric, Table: TableMain}); err != nil {
					t.Fatal(err)
				}
			},
			want: []Route{{podsA, gw2}, {podsB, gw2}, {svcsA, gw2}}},
		{name: "a cluster leaves", desired: []Route{{podsB, gw2}}, want: []Route{{podsB, gw2}}},
		{name: "a leftover of an earlier run goes", desired: []Route{{podsB, gw2}},
			tamper: func(t *testing.T) {
				r := &netlink.Route{Dst: ipNet(podsA), Gw: gw1.AsSlice(), Priority: Metric, Protocol: Protocol}
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
	foreignRoute(t, h, podsA, gw2, Metric)
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
