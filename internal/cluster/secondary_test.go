package cluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// TestSecondaryNetworkValues: a cluster joined with secondary addressing turns the member
// chart's secondary network on with its own block, global CIDR, the hub's globalnet pool (which
// VPC pods route through their gateway) and own CIDRs (which the VPCs are kept off); any other
// addressing leaves it off.
func TestSecondaryNetworkValues(t *testing.T) {
	joined := func(a v1alpha1.Addressing) *Joined {
		return &Joined{Cluster: &v1alpha1.Cluster{Spec: v1alpha1.ClusterSpec{ClusterID: "east", Addressing: a, SecondaryCIDR: "10.113.0.0/16",
			GlobalCIDR: "242.1.0.0/16", GlobalEgressSize: 16, PodCIDRs: []string{"10.1.0.0/16", "2001:db8:101::/56"}, ServiceCIDRs: []string{"10.97.0.0/16"}}}}
	}
	want := map[string]any{"enabled": true, "clusterID": "east", "cidr": "10.113.0.0/16", "routes": []any{"10.112.0.0/12"},
		"globalCIDR": "242.1.0.0/16", "globalEgressSize": int64(16), "globalPool": "242.0.0.0/8", "clusterCIDRs": []any{"10.1.0.0/16", "2001:db8:101::/56", "10.97.0.0/16"}}
	if diff := cmp.Diff(want, SecondaryNetworkValues(joined(v1alpha1.AddressingSecondary), "10.112.0.0/12", "242.0.0.0/8")); diff != "" {
		t.Errorf("secondary addressing (-want +got):\n%s", diff)
	}
	// A cluster without a global CIDR: the ovnmaster gives no external addresses. No pool
	// known: VPC pods route no global addresses.
	noGlobal := joined(v1alpha1.AddressingSecondary)
	noGlobal.Cluster.Spec.GlobalCIDR = ""
	delete(want, "globalCIDR")
	delete(want, "globalEgressSize")
	delete(want, "globalPool")
	if diff := cmp.Diff(want, SecondaryNetworkValues(noGlobal, "10.112.0.0/12", "")); diff != "" {
		t.Errorf("secondary addressing without a global CIDR (-want +got):\n%s", diff)
	}
	for _, a := range []v1alpha1.Addressing{v1alpha1.AddressingDirect, v1alpha1.AddressingGlobalnet} {
		if got := SecondaryNetworkValues(joined(a), "10.112.0.0/12", "242.0.0.0/8"); got != nil {
			t.Errorf("%s addressing: %v, want nil", a, got)
		}
	}
	if got := SecondaryNetworkValues(nil, "10.112.0.0/12", "242.0.0.0/8"); got != nil {
		t.Errorf("no cluster: %v, want nil", got)
	}
}
