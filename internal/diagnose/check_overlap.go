package diagnose

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/ipam"
)

var overlapCheck = check{
	Check: Check{Name: "cidr-overlap", Summary: "no two clusters with direct addressing share pod or service addresses"},
	set: func(ctx context.Context, e *env) []Finding {
		r, err := e.hub.reader.get(ctx)
		if err != nil {
			return []Finding{notChecked("overlapping CIDRs", err, "hub-access")}
		}
		return judgeOverlaps(r.clusters)
	},
}

// judgeOverlaps finds the pairs of direct-addressing clusters whose pod or service CIDRs
// share addresses: both would be routed as they are, so the gateways refuse one of the two
// Peers (internal/gateway's Compute, reason OverlappingSubnets). Each pair is reported once,
// against the younger cluster, which is the one to change.
func judgeOverlaps(clusters []v1alpha1.Cluster) []Finding {
	clusters = slices.Clone(clusters)
	slices.SortFunc(clusters, func(a, b v1alpha1.Cluster) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var direct []v1alpha1.Cluster
	for _, c := range clusters {
		if c.Spec.Addressing == "" || c.Spec.Addressing == v1alpha1.AddressingDirect {
			direct = append(direct, c)
		}
	}
	var out []Finding
	for i, older := range direct {
		for _, younger := range direct[i+1:] {
			if shared := sharedCIDRs(younger, older); shared != "" {
				out = append(out, Finding{Cluster: younger.Name, Severity: SeverityError,
					Message: fmt.Sprintf("%s of %s overlaps %s's CIDRs %s: with direct addressing both are routed as they are, so gateways refuse one of the two clusters' Peers (OverlappingSubnets) and the two clusters do not reach each other",
						shared, younger.Name, older.Name, cidrsOf(older)),
					Fix: fmt.Sprintf("join %s again with CIDRs that overlap no other cluster's (--pod-cidr, --service-cidr), or with --addressing globalnet or --addressing secondary", younger.Name)})
			}
		}
	}
	if len(out) == 0 {
		return []Finding{ok("the %d clusters with direct addressing share no pod or service addresses (%d others use globalnet or secondary addressing)",
			len(direct), len(clusters)-len(direct))}
	}
	return out
}

// sharedCIDRs names a's CIDRs that overlap any of b's ("pod CIDR 10.1.0.0/16"), or "".
func sharedCIDRs(a, b v1alpha1.Cluster) string {
	theirs, err := ipam.ParsePrefixes(append(slices.Clone(b.Spec.PodCIDRs), b.Spec.ServiceCIDRs...))
	if err != nil {
		return "" // the hub's CRD validation guards these
	}
	var hits []string
	for _, kind := range []struct {
		name  string
		cidrs []string
	}{{"pod CIDR", a.Spec.PodCIDRs}, {"service CIDR", a.Spec.ServiceCIDRs}} {
		mine, err := ipam.ParsePrefixes(kind.cidrs)
		if err != nil {
			continue
		}
		for _, p := range mine {
			if _, hit := ipam.FirstOverlap(p, theirs); hit {
				hits = append(hits, kind.name+" "+p.String())
			}
		}
	}
	return strings.Join(hits, " and ")
}

func cidrsOf(c v1alpha1.Cluster) string {
	return strings.Join(append(slices.Clone(c.Spec.PodCIDRs), c.Spec.ServiceCIDRs...), ",")
}
