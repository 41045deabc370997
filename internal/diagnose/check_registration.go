package diagnose

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aboutv1alpha1 "github.com/octopus-mcs/octopus/api/about/v1alpha1"
	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
)

var registrationCheck = check{
	Check:  Check{Name: "registration", Summary: "the cluster's Cluster object on the hub, its cluster ID, and the CIDRs it registered against those it has"},
	member: checkRegistration,
}

func checkRegistration(ctx context.Context, e *env, m *member) []Finding {
	cred, err := m.cred.get(ctx)
	if err != nil {
		return []Finding{notChecked("the registration", err, "hub-access")}
	}
	hc, err := m.hubc.get(ctx)
	if err != nil {
		return []Finding{notChecked("the registration", err, "hub-access")}
	}
	cl := &v1alpha1.Cluster{}
	err = hc.Get(ctx, client.ObjectKey{Namespace: cred.Namespace, Name: cred.ClusterID}, cl)
	if apierrors.IsNotFound(err) {
		return []Finding{failure(fmt.Sprintf("re-run `%s`", m.rejoin()),
			"the hub has no Cluster %s: the cluster is not registered, so no gateway tunnels to it and no cluster imports its services", cred.ClusterID)}
	}
	if err != nil {
		return []Finding{notChecked("the registration", fmt.Errorf("reading Cluster %s on the hub: %w", cred.ClusterID, err), "hub-access")}
	}
	var out []Finding
	prop := &aboutv1alpha1.ClusterProperty{}
	err = m.c.Get(ctx, client.ObjectKey{Name: aboutv1alpha1.ClusterIDProperty}, prop)
	out = append(out, judgeClusterProperty(cred.ClusterID, prop, err, m.rejoin()))

	services, err := cluster.DiscoverServiceCIDRs(ctx, m.c)
	out = append(out, judgeCIDRs("service", cl.Spec.ServiceCIDRs, services, err, m.rejoin()))
	pods, err := cluster.DiscoverPodCIDRs(ctx, m.c)
	out = append(out, judgeCIDRs("pod", cl.Spec.PodCIDRs, pods, err, m.rejoin()))
	nodes := &corev1.NodeList{}
	if err := m.c.List(ctx, nodes); err != nil {
		return append(out, notChecked("the nodes' pod CIDRs", fmt.Errorf("listing Nodes: %w", err), "versions"))
	}
	if f, found := judgeNodePodCIDRs(cl.Spec.PodCIDRs, nodes.Items, m.rejoin()); found {
		out = append(out, f)
	}
	return out
}

// judgeClusterProperty compares the cluster ID of the About API (KEP-2149), which MCS tools
// read, with the one of the hub credential.
func judgeClusterProperty(id string, prop *aboutv1alpha1.ClusterProperty, err error, rejoin string) Finding {
	switch {
	case apierrors.IsNotFound(err):
		return warning(fmt.Sprintf("re-run `%s`", rejoin),
			"the cluster has no ClusterProperty %s: tools that read the cluster ID from the About API (`octopus verify`, MCS controllers) cannot tell which cluster this is", aboutv1alpha1.ClusterIDProperty)
	case err != nil:
		return notChecked("the ClusterProperty "+aboutv1alpha1.ClusterIDProperty, err, "versions")
	case prop.Spec.Value != id:
		return failure(fmt.Sprintf("leave (`octopus leave`) and join again under one ID, or re-run `%s`", rejoin),
			"the ClusterProperty %s says %q but the hub credential belongs to %q: the cluster answers to two IDs", aboutv1alpha1.ClusterIDProperty, prop.Spec.Value, id)
	}
	return ok("registered as %s on the hub, and %s says the same", id, aboutv1alpha1.ClusterIDProperty)
}

// judgeCIDRs compares the CIDRs of one kind ("pod", "service") registered on the hub with
// those discovered in the cluster (cluster.DiscoverPodCIDRs and DiscoverServiceCIDRs; err is
// their error when the cluster records none where Octopus can read them).
func judgeCIDRs(kind string, registered, discovered []string, err error, rejoin string) Finding {
	reg := strings.Join(registered, ",")
	if err != nil {
		return info("registered %s CIDRs %s; the cluster does not record its own where Octopus can read them (%v), so they cannot be compared", kind, reg, err)
	}
	if sameCIDRs(registered, discovered) {
		return ok("registered %s CIDRs %s, as the cluster has them", kind, reg)
	}
	have := strings.Join(discovered, ",")
	return failure(fmt.Sprintf("re-run `%s --%s-cidr %s` (join resumes and updates the registration)", rejoin, kind, have),
		"registered %s CIDRs %s, but the cluster has %s: addresses outside the registered ranges are not routed from other clusters, and registered ranges the cluster does not use may collide with other clusters'", kind, reg, have)
}

// judgeNodePodCIDRs checks that every Node's pod CIDR lies inside the registered pod CIDRs:
// pods on a node outside them are unreachable from other clusters, whatever else the cluster
// records. found is false when no node has a pod CIDR (the CNI allocates addresses itself).
func judgeNodePodCIDRs(registered []string, nodes []corev1.Node, rejoin string) (Finding, bool) {
	var regs []netip.Prefix
	for _, r := range registered {
		if p, err := netip.ParsePrefix(r); err == nil {
			regs = append(regs, p)
		}
	}
	var outside []string
	n := 0
	for _, node := range nodes {
		cidrs := node.Spec.PodCIDRs
		if len(cidrs) == 0 && node.Spec.PodCIDR != "" {
			cidrs = []string{node.Spec.PodCIDR}
		}
		for _, c := range cidrs {
			n++
			p, err := netip.ParsePrefix(c)
			if err != nil || !slices.ContainsFunc(regs, func(r netip.Prefix) bool { return contains(r, p) }) {
				outside = append(outside, fmt.Sprintf("%s (node %s)", c, node.Name))
			}
		}
	}
	if n == 0 {
		return Finding{}, false
	}
	if len(outside) > 0 {
		slices.Sort(outside)
		return failure(fmt.Sprintf("re-run `%s --pod-cidr CIDR` with a pod CIDR that covers every node's", rejoin),
			"pod CIDRs %s lie outside the registered pod CIDRs %s: pods there are unreachable from other clusters", strings.Join(outside, ", "), strings.Join(registered, ",")), true
	}
	return ok("every node's pod CIDR lies inside the registered pod CIDRs (%s)", plural(len(nodes), "node")), true
}

// contains reports whether prefix outer covers all of inner.
func contains(outer, inner netip.Prefix) bool {
	return outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}

// sameCIDRs compares two CIDR lists as sets of prefixes.
func sameCIDRs(a, b []string) bool {
	norm := func(ss []string) []string {
		out := make([]string, 0, len(ss))
		for _, s := range ss {
			if p, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil {
				out = append(out, p.Masked().String())
			} else {
				out = append(out, s)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(norm(a), norm(b))
}
