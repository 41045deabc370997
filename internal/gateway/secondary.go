package gateway

import (
	"fmt"
	"net/netip"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/ipam/hostaddr"
)

// secondaryBlock is a secondary cluster's block (Cluster.spec.secondaryCIDR) and the address
// its gateway is probed at: the block's first host, the gateway port's address
// (hostaddr.Block.Gateway, which no pod is ever given, and which octgw already holds on every
// gateway node; docs/architecture.md §6s says why no other address). It returns false for
// clusters of other addressing.
func secondaryBlock(c *v1alpha1.Cluster) (netip.Prefix, netip.Addr, bool, error) {
	if c.Spec.Addressing != v1alpha1.AddressingSecondary {
		return netip.Prefix{}, netip.Addr{}, false, nil
	}
	p, err := netip.ParsePrefix(c.Spec.SecondaryCIDR)
	if err != nil {
		return netip.Prefix{}, netip.Addr{}, false, fmt.Errorf("cluster %s uses secondary addressing but its secondary CIDR %q is not a CIDR: %w; fix the Cluster object on the hub (re-run `octopus join`)", c.Spec.ClusterID, c.Spec.SecondaryCIDR, err)
	}
	b, err := hostaddr.NewBlock(p)
	if err != nil {
		return netip.Prefix{}, netip.Addr{}, false, fmt.Errorf("cluster %s's secondary CIDR: %w", c.Spec.ClusterID, err)
	}
	return b.Prefix(), b.Gateway(), true, nil
}

// routedOnPrimary is what the route agents should route to the active gateway over the
// cluster's primary network: the accepted Peers' subnets, but nothing for a secondary
// cluster. Its Peers are secondary clusters (Compute refuses the others), whose blocks its
// pods route over net1 to the gateway port (the NRI plugin's --route), so a node route to
// them would only catch the traffic of pods off the secondary network (host-network and
// opted-out pods) and send it into the tunnel from a private primary address, which the
// remote pod would answer over its own primary network: to one of its own cluster's pods
// when the primary CIDRs overlap.
func routedOnPrimary(local Local, remote []netip.Prefix) []netip.Prefix {
	if local.Addressing == v1alpha1.AddressingSecondary {
		return nil
	}
	return remote
}
