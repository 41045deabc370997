package verify

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
		if got := fmt.Sprintf("%q", pairFamilies(tc.from, tc.to)); got != tc.want {
			t.Errorf("pairFamilies(%v, %v) = %s, want %s", tc.from, tc.to, got, tc.want)
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
		if got := familyNote("east", "west", tc.from, tc.to); got != tc.want {
			t.Errorf("familyNote(%v, %v) = %q, want %q", tc.from, tc.to, got, tc.want)
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
		if got := secondIPv6(tc.pod).String(); got != tc.want {
			t.Errorf("secondIPv6(%v) = %s, want %s", tc.pod.Status.PodIPs, got, tc.want)
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
		p, v6, err := clusterSetIPs(tc.ips)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("clusterSetIPs(%v): err %v, want %q", tc.ips, err, tc.err)
			}
			continue
		}
		if err != nil || p.String() != tc.primary || v6.String() != tc.ipv6 {
			t.Errorf("clusterSetIPs(%v) = %s, %s, %v; want %s, %s", tc.ips, p, v6, err, tc.primary, tc.ipv6)
		}
	}
}

// TestResultNameFamily checks that a family shows in a check's name, and only then.
func TestResultNameFamily(t *testing.T) {
	r := Result{Check: CheckDNS, From: "east", To: "west"}
	if got := r.Name(); got != "dns east->west" {
		t.Errorf("Name() = %q", got)
	}
	r.Family = "IPv6"
	if got := r.Name(); got != "dns/IPv6 east->west" {
		t.Errorf("Name() with a family = %q", got)
	}
}
