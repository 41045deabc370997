package globalnet

import (
	"fmt"
	"net/netip"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
)

// ClusterLayout lays out the global CIDR of a globalnet cluster's spec with an egress range of
// spec.globalEgressSize addresses (globalip.DefaultClusterEgressSize when unset). The agent's
// allocator and the gateway's NAT each compute it from the same Cluster, which join wrote and
// the API keeps immutable, so they agree on the egress range and the pool.
func ClusterLayout(spec v1alpha1.ClusterSpec) (globalip.Layout, error) {
	cidr, err := netip.ParsePrefix(spec.GlobalCIDR)
	if err != nil {
		return globalip.Layout{}, fmt.Errorf("cluster %s has globalnet addressing but its global CIDR %q does not parse: %w", spec.ClusterID, spec.GlobalCIDR, err)
	}
	layout, err := globalip.NewLayout(cidr, int(spec.GlobalEgressSize))
	if err != nil {
		return globalip.Layout{}, fmt.Errorf("laying out the global CIDR of cluster %s (spec.globalEgressSize %d): %w", spec.ClusterID, spec.GlobalEgressSize, err)
	}
	return layout, nil
}
