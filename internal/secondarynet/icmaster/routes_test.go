package icmaster

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/ovnic"
)

func icRoute(name string, age time.Duration, prefix, target, hop string) v1alpha1.InterconnectRoute {
	return v1alpha1.InterconnectRoute{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1e9, 0).Add(-age))},
		Spec:       v1alpha1.InterconnectRouteSpec{Prefix: prefix, TargetCluster: target, NextHop: hop},
	}
}

func TestDesiredRoutes(t *testing.T) {
	manual := RouteInputs{
		Block:   netip.MustParsePrefix("10.112.0.0/24"),
		Transit: netip.MustParsePrefix("169.254.100.1/24"),
		Clusters: map[string]netip.Addr{
			"east": netip.MustParseAddr("169.254.100.1"), "west": netip.MustParseAddr("169.254.100.2"),
		},
	}
	auto := manual
	auto.AutoRoute = true
	type want struct {
		reason, hop, inMessage string
	}
	for _, tc := range []struct {
		name   string
		in     RouteInputs
		items  []v1alpha1.InterconnectRoute
		routes []ovnic.Route
		want   map[string]want
	}{{
		name:   "a target cluster resolves to its transit address",
		in:     manual,
		items:  []v1alpha1.InterconnectRoute{icRoute("to-west", 0, "10.113.0.0/24", "west", "")},
		routes: []ovnic.Route{{Prefix: netip.MustParsePrefix("10.113.0.0/24"), NextHop: netip.MustParseAddr("169.254.100.2")}},
		want:   map[string]want{"to-west": {v1alpha1.ReasonRouteApplied, "169.254.100.2", "10.113.0.0/24 via 169.254.100.2"}},
	}, {
		name:   "a next hop is taken as given",
		in:     manual,
		items:  []v1alpha1.InterconnectRoute{icRoute("by-hop", 0, "10.114.0.0/23", "", "169.254.100.9")},
		routes: []ovnic.Route{{Prefix: netip.MustParsePrefix("10.114.0.0/23"), NextHop: netip.MustParseAddr("169.254.100.9")}},
		want:   map[string]want{"by-hop": {v1alpha1.ReasonRouteApplied, "169.254.100.9", "via"}},
	}, {
		name: "an unknown cluster is left out and the good route still applies",
		in:   manual,
		items: []v1alpha1.InterconnectRoute{
			icRoute("to-nowhere", 0, "10.115.0.0/24", "north", ""),
			icRoute("to-west", 0, "10.113.0.0/24", "west", ""),
		},
		routes: []ovnic.Route{{Prefix: netip.MustParsePrefix("10.113.0.0/24"), NextHop: netip.MustParseAddr("169.254.100.2")}},
		want: map[string]want{
			"to-nowhere": {v1alpha1.ReasonUnknownCluster, "", "cluster north has no AZ"},
			"to-west":    {v1alpha1.ReasonRouteApplied, "169.254.100.2", ""},
		},
	}, {
		name: "a prefix overlapping the own block or the transit network is refused",
		in:   manual,
		items: []v1alpha1.InterconnectRoute{
			icRoute("own", 0, "10.112.0.0/16", "west", ""),
			icRoute("transit", 0, "169.254.0.0/16", "west", ""),
		},
		want: map[string]want{
			"own":     {v1alpha1.ReasonOverlapsOwnBlock, "", "overlaps this cluster's own secondary block 10.112.0.0/24"},
			"transit": {v1alpha1.ReasonRouteNotApplied, "", "overlaps the transit network"},
		},
	}, {
		name: "a next hop outside the transit network, or the AZ's own, is refused",
		in:   manual,
		items: []v1alpha1.InterconnectRoute{
			icRoute("outside", 0, "10.113.0.0/24", "", "10.0.0.1"),
			icRoute("self", 0, "10.114.0.0/24", "east", ""),
			icRoute("garbage", 0, "10.116.0.0/24", "", "not-an-ip"),
		},
		want: map[string]want{
			"outside": {v1alpha1.ReasonInvalidNextHop, "10.0.0.1", "outside the transit network"},
			"self":    {v1alpha1.ReasonInvalidNextHop, "169.254.100.1", "own transit address"},
			"garbage": {v1alpha1.ReasonInvalidNextHop, "", "an IPv4 address is required"},
		},
	}, {
		name: "of two routes to one prefix the older wins",
		in:   manual,
		items: []v1alpha1.InterconnectRoute{
			icRoute("a-newer", time.Minute, "10.113.0.0/24", "", "169.254.100.7"),
			icRoute("z-older", time.Hour, "10.113.0.0/24", "west", ""),
		},
		routes: []ovnic.Route{{Prefix: netip.MustParsePrefix("10.113.0.0/24"), NextHop: netip.MustParseAddr("169.254.100.2")}},
		want: map[string]want{
			"z-older": {v1alpha1.ReasonRouteApplied, "169.254.100.2", ""},
			"a-newer": {v1alpha1.ReasonDuplicatePrefix, "169.254.100.7", "InterconnectRoute z-older already routes"},
		},
	}, {
		name:  "an unmasked prefix the schema missed is refused alone",
		in:    manual,
		items: []v1alpha1.InterconnectRoute{icRoute("unmasked", 0, "10.113.0.5/24", "west", "")},
		want:  map[string]want{"unmasked": {v1alpha1.ReasonRouteNotApplied, "", "a masked IPv4 CIDR"}},
	}, {
		name:  "automatic mode ignores every route and says how to use them",
		in:    auto,
		items: []v1alpha1.InterconnectRoute{icRoute("to-west", 0, "10.113.0.0/24", "west", "")},
		want:  map[string]want{"to-west": {v1alpha1.ReasonAutomaticRoutes, "", `set it to "false"`}},
	}, {
		name: "no routes, nothing",
		in:   manual,
		want: map[string]want{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			routes, outcomes := DesiredRoutes(tc.items, tc.in)
			if len(routes) != len(tc.routes) {
				t.Fatalf("routes = %v, want %v", routes, tc.routes)
			}
			for i := range routes {
				if routes[i] != tc.routes[i] {
					t.Errorf("route %d = %v, want %v", i, routes[i], tc.routes[i])
				}
			}
			if len(outcomes) != len(tc.want) {
				t.Errorf("outcomes = %v, want one per route: %v", outcomes, tc.want)
			}
			for name, w := range tc.want {
				o, ok := outcomes[name]
				if !ok {
					t.Errorf("%s: no outcome", name)
					continue
				}
				hop := ""
				if o.NextHop.IsValid() {
					hop = o.NextHop.String()
				}
				if o.Reason != w.reason || hop != w.hop || !strings.Contains(o.Message, w.inMessage) ||
					o.Ready != (w.reason == v1alpha1.ReasonRouteApplied) {
					t.Errorf("%s = %+v, want reason %s, next hop %q, message containing %q", name, o, w.reason, w.hop, w.inMessage)
				}
			}
		})
	}
}
