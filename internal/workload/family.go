package workload

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// The address families a pair of clusters is checked (verify) or measured (bench) in, named as
// Kubernetes names them. Both tools decide them with PairFamilies, so that what verify proves
// works in a family is what bench measures in it.
const (
	FamilyIPv4 = "IPv4"
	FamilyIPv6 = "IPv6"
)

// PairFamilies are the families the work of a pair runs in: both, IPv4 first, when the
// client's pod and the server's pod have an IPv6 address besides their primary IPv4 one (two
// dual-stack clusters with direct addressing: the gateways carry both families, and the
// exported Service is dual-stack); else one run with no family named ([""]), the pair's
// primary family as before dual-stack.
func PairFamilies(fromIPv6, toIPv6 netip.Addr) []string {
	if fromIPv6.IsValid() && toIPv6.IsValid() {
		return []string{FamilyIPv4, FamilyIPv6}
	}
	return []string{""}
}

// FamilyNote says why the pair from → to is done without IPv6 when one side has an IPv6
// address and the other has none: a dual-stack cluster beside an IPv4-only one (or one whose
// addressing is not direct, which both tools treat as IPv4 only). "" when both or neither have
// one: then nothing was left out. Without it a user of a mixed fleet would see IPv4 results
// and never learn that IPv6 between the two was not looked at. done is the tool's verb
// ("checked", "measured"), pods the name of its pods ("probe", "bench").
func FamilyNote(done, pods, from, to string, fromIPv6, toIPv6 netip.Addr) string {
	const why = "an IPv4-only cluster, or addressing other than direct"
	switch {
	case fromIPv6.IsValid() == toIPv6.IsValid():
		return ""
	case fromIPv6.IsValid():
		return fmt.Sprintf("IPv6 not %s from %s to %s: %s's %s server has no IPv6 address (%s)", done, from, to, to, pods, why)
	default:
		return fmt.Sprintf("IPv6 not %s from %s to %s: %s's %s client has no IPv6 address (%s)", done, from, to, from, pods, why)
	}
}

// SecondIPv6 is a dual-stack pod's IPv6 address: an IPv6 entry of status.podIPs after the
// primary IPv4 one; invalid when the pod is single-stack (or IPv6 is its primary family, whose
// work is the family-less one).
func SecondIPv6(pod *corev1.Pod) netip.Addr {
	ips := []string{pod.Status.PodIP}
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	return secondIPv6(ips)
}

// ServiceIPv6 is a dual-stack Service's IPv6 cluster IP beside its primary IPv4 one (the
// second of spec.clusterIPs under PreferDualStack); invalid when the Service is single-stack.
func ServiceIPv6(svc *corev1.Service) netip.Addr { return secondIPv6(svc.Spec.ClusterIPs) }

// secondIPv6 is the first IPv6 address of ips when the first of ips is IPv4; unparsable
// entries are skipped.
func secondIPv6(ips []string) netip.Addr {
	if len(ips) == 0 {
		return netip.Addr{}
	}
	if primary, err := netip.ParseAddr(ips[0]); err != nil || !primary.Is4() {
		return netip.Addr{}
	}
	for _, s := range ips[1:] {
		if a, err := netip.ParseAddr(s); err == nil && a.Is6() && !a.Is4In6() {
			return a
		}
	}
	return netip.Addr{}
}

// ClusterSetIPs splits a ServiceImport's ClusterSet IPs (spec.ips) into its primary one (the
// first, as before dual-stack) and its IPv6 one besides an IPv4 primary; either invalid when
// absent.
func ClusterSetIPs(ips []string) (primary, ipv6 netip.Addr, err error) {
	for i, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, netip.Addr{}, fmt.Errorf("ClusterSet IP %q: %w", s, err)
		}
		switch {
		case i == 0:
			primary = a
		case primary.Is4() && a.Is6() && !ipv6.IsValid():
			ipv6 = a
		}
	}
	return primary, ipv6, nil
}
