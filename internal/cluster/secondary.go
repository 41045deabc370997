package cluster

import (
	"slices"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
)

// SecondaryNetworkValues are the member chart's secondaryNetwork values (charts/octopus-member)
// of a cluster joined with secondary addressing: on, with its ID and the secondary block the
// hub allocated it, and routes to the hub's whole secondary pool (the block of every other
// cluster; the cluster's own, more specific, stays on-link), and its global CIDR and egress
// size, which the ovnmaster lays out as the agent does to give each Vpc's gateway an external
// address, the hub's globalnet pool globalPool (every cluster's global CIDR), which VPC pods
// route through their VPC's gateway, and its pod and service CIDRs, which gateway-port keeps
// the VPCs off. Nil for any
// other addressing: the chart leaves the secondary network off.
// Node-specific settings (datapath, underlay interface, the NRI socket) are the installer's.
func SecondaryNetworkValues(j *Joined, pool, globalPool string) map[string]any {
	if j == nil || j.Cluster == nil || j.Cluster.Spec.Addressing != v1alpha1.AddressingSecondary {
		return nil
	}
	spec := j.Cluster.Spec
	values := map[string]any{
		"enabled":   true,
		"clusterID": spec.ClusterID,
		"cidr":      spec.SecondaryCIDR,
		"routes":    []any{pool},
	}
	if spec.GlobalCIDR != "" {
		values["globalCIDR"] = spec.GlobalCIDR
		values["globalEgressSize"] = int64(spec.GlobalEgressSize)
	}
	if globalPool != "" {
		values["globalPool"] = globalPool
	}
	// What no VPC may reach through its gateway (gatewayPort.vpcs).
	var own []any
	for _, c := range slices.Concat(spec.PodCIDRs, spec.ServiceCIDRs) {
		own = append(own, c)
	}
	if len(own) > 0 {
		values["clusterCIDRs"] = own
	}
	return values
}

// InterconnectValues are the member chart's secondaryNetwork.interconnect values of a
// cluster joined with --interconnect ovn-ic: on, with ovn-ic-config's endpoints (the ones ovn-ic
// dials, ssl: with the cluster's IC certificate) and the hub's secondary pool, which the
// icmaster derives the transit address from.
func InterconnectValues(ic icconfig.Config, pool string) map[string]any {
	hosts := make([]any, len(ic.DBHosts))
	for i, h := range ic.DBHosts {
		hosts[i] = h
	}
	return map[string]any{
		"enabled":       true,
		"icDBHost":      hosts,
		"icNBPort":      ic.NBPort,
		"icSBPort":      ic.SBPort,
		"secondaryPool": pool,
	}
}
