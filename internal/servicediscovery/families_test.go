package servicediscovery

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func TestEndpointFamilies(t *testing.T) {
	slice := func(cluster string, typ discoveryv1.AddressType) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{mcsv1beta1.LabelSourceCluster: cluster}}, AddressType: typ}
	}
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	for _, tt := range []struct {
		name     string
		slices   []discoveryv1.EndpointSlice
		clusters []string
		want     []corev1.IPFamily
	}{
		{"no slices", nil, []string{"east"}, nil},
		{"IPv4 only", []discoveryv1.EndpointSlice{slice("east", discoveryv1.AddressTypeIPv4)}, []string{"east"}, []corev1.IPFamily{v4}},
		{"IPv6 only", []discoveryv1.EndpointSlice{slice("east", discoveryv1.AddressTypeIPv6)}, []string{"east"}, []corev1.IPFamily{v6}},
		{"both, IPv6 listed first: IPv4 first all the same", []discoveryv1.EndpointSlice{
			slice("east", discoveryv1.AddressTypeIPv6), slice("west", discoveryv1.AddressTypeIPv4)}, []string{"east", "west"}, []corev1.IPFamily{v4, v6}},
		{"a left-out cluster's family does not count", []discoveryv1.EndpointSlice{
			slice("east", discoveryv1.AddressTypeIPv4), slice("west", discoveryv1.AddressTypeIPv6)}, []string{"east"}, []corev1.IPFamily{v4}},
		{"FQDN slices carry no family", []discoveryv1.EndpointSlice{slice("east", discoveryv1.AddressTypeFQDN)}, []string{"east"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := endpointFamilies(tt.slices, tt.clusters); !slices.Equal(got, tt.want) {
				t.Errorf("endpointFamilies = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOfferedIPs(t *testing.T) {
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	for _, tt := range []struct {
		name     string
		ips      []string
		families []corev1.IPFamily
		wantIPs  []string
		wantFams []corev1.IPFamily
	}{
		{"single-stack cluster, IPv4 endpoints", []string{"10.200.0.9"}, []corev1.IPFamily{v4}, []string{"10.200.0.9"}, []corev1.IPFamily{v4}},
		{"single-stack IPv4 cluster, endpoints of both", []string{"10.200.0.9"}, []corev1.IPFamily{v4, v6}, []string{"10.200.0.9"}, []corev1.IPFamily{v4}},
		{"dual-stack cluster, endpoints of both", []string{"10.200.0.9", "2001:db8:200::9"}, []corev1.IPFamily{v4, v6},
			[]string{"10.200.0.9", "2001:db8:200::9"}, []corev1.IPFamily{v4, v6}},
		{"dual-stack cluster, IPv6 primary, endpoints of both: the Service's order", []string{"2001:db8:200::9", "10.200.0.9"}, []corev1.IPFamily{v4, v6},
			[]string{"2001:db8:200::9", "10.200.0.9"}, []corev1.IPFamily{v6, v4}},
		{"dual-stack cluster, IPv4 endpoints only", []string{"10.200.0.9", "2001:db8:200::9"}, []corev1.IPFamily{v4}, []string{"10.200.0.9"}, []corev1.IPFamily{v4}},
		{"dual-stack cluster, IPv6 endpoints only", []string{"10.200.0.9", "2001:db8:200::9"}, []corev1.IPFamily{v6}, []string{"2001:db8:200::9"}, []corev1.IPFamily{v6}},
		{"no endpoints yet: every address", []string{"10.200.0.9", "2001:db8:200::9"}, nil, []string{"10.200.0.9", "2001:db8:200::9"}, []corev1.IPFamily{v4, v6}},
		{"IPv4-only cluster, IPv6 endpoints only: nothing to offer", []string{"10.200.0.9"}, []corev1.IPFamily{v6}, nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ips, fams := offeredIPs(tt.ips, tt.families)
			if !slices.Equal(ips, tt.wantIPs) || !slices.Equal(fams, tt.wantFams) {
				t.Errorf("offeredIPs = %v %v, want %v %v", ips, fams, tt.wantIPs, tt.wantFams)
			}
		})
	}
}
