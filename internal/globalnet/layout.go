package globalnet

import (
	"fmt"
	"net/netip"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
)

// ClusterLayout lays out the global CIDR of a globalnet cluster's spec with an egress range of
// egressSize addresses (globalip.DefaultClusterEgressSize when zero). The agent's allocator and
// the gateway's NAT each compute it from the same Cluster, so they agree on the pool.
func ClusterLayout(spec v1alpha1.ClusterSpec, egressSize int) (globalip.Layout, error) {
	cidr, err := netip.ParsePrefix(spec.GlobalCIDR)
	if err != nil {
		return globalip.Layout{}, fmt.Errorf("cluster %s has globalnet addressing but its global CIDR %q does not parse: %w", spec.ClusterID, spec.GlobalCIDR, err)
	}
	layout, err := globalip.NewLayout(cidr, egressSize)
	if err != nil {
		return globalip.Layout{}, fmt.Errorf("laying out the global CIDR of cluster %s: %w", spec.ClusterID, err)
	}
	return layout, nil
}
