package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/dnsconfig"
)

// reverseDNSInterval is how often the controller brings the reverse zones that the cluster's
// CoreDNS forwards to octopus-dns in step with the clusters on the hub. Clusters join and
// leave rarely, and the list is one small read of the hub, so a short poll is cheaper than
// keeping a watch open and also repairs a Corefile someone edited.
const reverseDNSInterval = 10 * time.Second

// The controller adds the other clusters' reverse zones to Octopus's block in the cluster's
// CoreDNS configuration (dnsconfig.ForwardReverse):
// +kubebuilder:rbac:groups="",namespace=kube-system,resources=configmaps,resourceNames=coredns,verbs=get;update

// keepReverseZones runs syncReverseZones every reverseDNSInterval until ctx ends. Errors are
// logged when they change, not every round, and retried on the next.
func keepReverseZones(ctx context.Context, hub client.Reader, member client.Client, namespace, clusterID string) {
	log := logf.FromContext(ctx).WithName("reverse-dns")
	lastErr := ""
	for {
		zones, changed, err := syncReverseZones(ctx, hub, member, namespace, clusterID)
		switch {
		case err != nil && ctx.Err() == nil:
			if err.Error() != lastErr {
				log.Error(err, "Not forwarding the other clusters' reverse zones to octopus-dns; retrying")
			}
			lastErr = err.Error()
		case err == nil:
			lastErr = ""
			if changed {
				log.Info("Updated the reverse zones the cluster's CoreDNS forwards to octopus-dns", "zones", zones)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(reverseDNSInterval):
		}
	}
}

// syncReverseZones makes the cluster's CoreDNS forward to octopus-dns the reverse zones of the
// addresses other clusters' headless endpoints are imported with, which octopus-dns answers PTR
// for, and returns them.
func syncReverseZones(ctx context.Context, hub client.Reader, member client.Client, namespace, clusterID string) ([]string, bool, error) {
	list := &v1alpha1.ClusterList{}
	if err := hub.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil, false, fmt.Errorf("listing the Clusters on the hub: %w", err)
	}
	zones := reverseZones(clusterID, list.Items)
	changed, err := dnsconfig.ForwardReverse(ctx, member, zones)
	return zones, changed, err
}

// reverseZones are the reverse zones of every other cluster's endpoint addresses as this
// cluster imports them: its pod CIDRs (direct addressing), its global CIDR (globalnet) or its
// secondary CIDR (secondary network). A range that overlaps one of this cluster's own pod or
// service CIDRs is left out, so that the cluster's own reverse lookups stay with its own DNS.
func reverseZones(clusterID string, clusters []v1alpha1.Cluster) []string {
	var own, remote []netip.Prefix
	for _, cl := range clusters {
		if cl.Name == clusterID {
			own = append(own, parsePrefixes(cl.Spec.PodCIDRs...)...)
			own = append(own, parsePrefixes(cl.Spec.ServiceCIDRs...)...)
			continue
		}
		switch cl.Spec.Addressing {
		case v1alpha1.AddressingGlobalnet:
			remote = append(remote, parsePrefixes(cl.Spec.GlobalCIDR)...)
		case v1alpha1.AddressingSecondary:
			remote = append(remote, parsePrefixes(cl.Spec.SecondaryCIDR)...)
		default:
			remote = append(remote, parsePrefixes(cl.Spec.PodCIDRs...)...)
		}
	}
	remote = slices.DeleteFunc(remote, func(p netip.Prefix) bool {
		return slices.ContainsFunc(own, p.Overlaps)
	})
	return dnsconfig.ArpaZones(remote)
}

// parsePrefixes parses the valid CIDRs of cidrs; the hub's schema validates them, and an
// invalid one costs only its own zone.
func parsePrefixes(cidrs ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range cidrs {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}
