package labnet

import (
	"net/netip"
	"strings"
	"testing"
)

// TestIPv6Ranges checks the dual-stack address plan per cluster index: pod, service and LAN
// prefixes of the hub (0), the first and the last cluster, each in its range.
func TestIPv6Ranges(t *testing.T) {
	cases := []struct {
		index              int
		pods, services, ln string
	}{
		{0, "2001:db8:100::/48", "2001:db8:200::/112", "2001:db8::/64"},
		{1, "2001:db8:101::/48", "2001:db8:201::/112", "2001:db8:0:1::/64"},
		{2, "2001:db8:102::/48", "2001:db8:202::/112", "2001:db8:0:2::/64"},
		{MaxClusters, "2001:db8:10f::/48", "2001:db8:20f::/112", "2001:db8:0:f::/64"},
	}
	for _, tc := range cases {
		got := [3]string{PodCIDR6(tc.index).String(), ServiceCIDR6(tc.index).String(), LAN6(tc.index).String()}
		if want := [3]string{tc.pods, tc.services, tc.ln}; got != want {
			t.Errorf("index %d: pods, services, LAN = %v, want %v", tc.index, got, want)
		}
		for _, in := range []struct{ p, r netip.Prefix }{{PodCIDR6(tc.index), PodRange6}, {ServiceCIDR6(tc.index), ServiceRange6}, {LAN6(tc.index), LANRange6}} {
			if !in.r.Contains(in.p.Addr()) || in.p.Bits() < in.r.Bits() || !IPv6Range.Contains(in.r.Addr()) {
				t.Errorf("index %d: %s outside %s or %s", tc.index, in.p, in.r, IPv6Range)
			}
		}
	}
	for _, pair := range [][2]netip.Prefix{{LANRange6, PodRange6}, {LANRange6, ServiceRange6}, {PodRange6, ServiceRange6}} {
		if pair[0].Overlaps(pair[1]) {
			t.Errorf("%s overlaps %s", pair[0], pair[1])
		}
	}
}

// TestPlanDualStack checks the nodes' IPv6 LAN addresses of a dual-stack cluster beside a
// single-stack one: the IPv4 address's host part in the cluster's /64, none in IPv4-only
// clusters, and an IPv6 service CIDR outside the documentation prefix refused.
func TestPlanDualStack(t *testing.T) {
	s := specs(2, 3)
	s[1].ServiceCIDR6 = ServiceCIDR6(2)
	p, err := NewPlan("ab12", s, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range p.Cluster(s[0].Name).Nodes {
		if n.LANAddr6.IsValid() {
			t.Errorf("%s of an IPv4 cluster has IPv6 address %s", n.Name, n.LANAddr6)
		}
	}
	c2 := p.Cluster(s[1].Name)
	if c2.ServiceCIDR6 != ServiceCIDR6(2) {
		t.Errorf("cluster2's IPv6 service CIDR %s, want %s", c2.ServiceCIDR6, ServiceCIDR6(2))
	}
	want := []string{"2001:db8:0:2::2/64", "2001:db8:0:2::3/64", "2001:db8:0:2::4/64"}
	for i, n := range c2.Nodes {
		if n.LANAddr6.String() != want[i] {
			t.Errorf("%s: IPv6 %s, want %s (IPv4 %s)", n.Name, n.LANAddr6, want[i], n.LANAddr)
		}
	}
	for name, bad := range map[string]netip.Prefix{"outside": netip.MustParsePrefix("fd00::/112"), "IPv4": netip.MustParsePrefix("10.50.0.0/16"),
		"mapped": netip.MustParsePrefix("::ffff:10.0.0.0/112")} {
		s[1].ServiceCIDR6 = bad
		if _, err := NewPlan("ab12", s, 0); err == nil || !strings.Contains(err.Error(), "want a prefix inside 2001:db8::/32") {
			t.Errorf("%s: IPv6 service CIDR %s: err = %v", name, bad, err)
		}
	}
}
