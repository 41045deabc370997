package workload

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestPairFamilies checks which families a pair is checked in: both only when the client's
// and the server's pods both have an IPv6 address besides IPv4.
func TestPairFamilies(t *testing.T) {
	v6 := netip.MustParseAddr("2001:db8:101::3")
	for _, tc := range []struct {
		from, to netip.Addr
		want     string
	}{
		{netip.Addr{}, netip.Addr{}, `[""]`},
		{v6, netip.Addr{}, `[""]`},
		{netip.Addr{}, v6, `[""]`},
		{v6, v6, `["IPv4" "IPv6"]`},
	} {
		if got := fmt.Sprintf("%q", PairFamilies(tc.from, tc.to)); got != tc.want {
			t.Errorf("PairFamilies(%v, %v) = %s, want %s", tc.from, tc.to, got, tc.want)
		}
	}
}

// TestFamilyNote: a pair checked without IPv6 although one side has it says so, naming the
// side without; a pair where both or neither have IPv6 says nothing.
func TestFamilyNote(t *testing.T) {
	v6 := netip.MustParseAddr("2001:db8:101::3")
	for _, tc := range []struct {
		from, to netip.Addr
		want     string
	}{
		{netip.Addr{}, netip.Addr{}, ""},
		{v6, v6, ""},
		{v6, netip.Addr{}, "IPv6 not checked from east to west: west's probe server has no IPv6 address (an IPv4-only cluster, or addressing other than direct)"},
		{netip.Addr{}, v6, "IPv6 not checked from east to west: east's probe client has no IPv6 address (an IPv4-only cluster, or addressing other than direct)"},
	} {
		if got := FamilyNote("checked", "probe", "east", "west", tc.from, tc.to); got != tc.want {
			t.Errorf("FamilyNote(%v, %v) = %q, want %q", tc.from, tc.to, got, tc.want)
		}
	}
	// bench says it in its own words.
	if got, want := FamilyNote("measured", "bench", "east", "west", v6, netip.Addr{}), "IPv6 not measured from east to west: west's bench server has no IPv6 address (an IPv4-only cluster, or addressing other than direct)"; got != want {
		t.Errorf("FamilyNote(measured, bench) = %q, want %q", got, want)
	}
}

// TestServiceIPv6 checks the IPv6 cluster IP taken from a Service: only beside an IPv4
// primary, as PreferDualStack gives it in a dual-stack cluster.
func TestServiceIPv6(t *testing.T) {
	for _, tc := range []struct {
		ips  []string
		want string
	}{
		{nil, "invalid IP"},
		{[]string{"10.96.0.10"}, "invalid IP"},
		{[]string{"10.96.0.10", "2001:db8:96::a"}, "2001:db8:96::a"},
		{[]string{"2001:db8:96::a", "10.96.0.10"}, "invalid IP"},
		{[]string{"None"}, "invalid IP"},
	} {
		svc := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIPs: tc.ips}}
		if got := ServiceIPv6(svc).String(); got != tc.want {
			t.Errorf("ServiceIPv6(%v) = %s, want %s", tc.ips, got, tc.want)
		}
	}
}

// TestSecondIPv6 checks the IPv6 address taken from a pod's status: only beside an IPv4
// primary.
func TestSecondIPv6(t *testing.T) {
	pod := func(ips ...string) *corev1.Pod {
		p := &corev1.Pod{}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		if len(ips) > 0 {
			p.Status.PodIP = ips[0]
		}
		return p
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{pod(), "invalid IP"},
		{pod("10.1.0.3"), "invalid IP"},
		{pod("10.1.0.3", "2001:db8:101::3"), "2001:db8:101::3"},
		{pod("2001:db8:101::3", "10.1.0.3"), "invalid IP"}, // IPv6 primary: the family-less checks are its
		{pod("2001:db8:101::3"), "invalid IP"},
	} {
		if got := SecondIPv6(tc.pod).String(); got != tc.want {
			t.Errorf("SecondIPv6(%v) = %s, want %s", tc.pod.Status.PodIPs, got, tc.want)
		}
	}
}

// TestClusterSetIPs checks the split of a ServiceImport's IPs into the primary one and the
// IPv6 one beside an IPv4 primary.
func TestClusterSetIPs(t *testing.T) {
	for _, tc := range []struct {
		ips                []string
		primary, ipv6, err string
	}{
		{nil, "invalid IP", "invalid IP", ""},
		{[]string{"10.98.0.7"}, "10.98.0.7", "invalid IP", ""},
		{[]string{"10.98.0.7", "2001:db8:202::7"}, "10.98.0.7", "2001:db8:202::7", ""},
		{[]string{"2001:db8:202::7", "10.98.0.7"}, "2001:db8:202::7", "invalid IP", ""},
		{[]string{"10.98.0.7", "bogus"}, "", "", `ClusterSet IP "bogus"`},
	} {
		p, v6, err := ClusterSetIPs(tc.ips)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ClusterSetIPs(%v): err %v, want %q", tc.ips, err, tc.err)
			}
			continue
		}
		if err != nil || p.String() != tc.primary || v6.String() != tc.ipv6 {
			t.Errorf("ClusterSetIPs(%v) = %s, %s, %v; want %s, %s", tc.ips, p, v6, err, tc.primary, tc.ipv6)
		}
	}
}
