package diagnose

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

var cniCheck = check{
	Check:  Check{Name: "cni", Summary: "the CNI plugins the cluster runs, recognised by their DaemonSets or their Node annotations (any CNI works: the route agent routes remote CIDRs through the node's routing table)"},
	member: checkCNI,
}

// knownCNIs maps what a CNI's node DaemonSet is called, or its images contain, to the CNI's
// name and, where Octopus users should know something about it, a note. nodeAnnotation is a
// prefix of the annotations the CNI's node agent puts on every Node, which shows the CNI also
// when its agent runs outside pods (as flanneld does in the lab, docs/architecture.md §8a).
var knownCNIs = []struct {
	marker, name, note, nodeAnnotation string
}{
	{"calico-node", "Calico", "", ""},
	{"canal", "Canal", "", ""},
	{"cilium", "Cilium", "with kube-proxy replacement, Cilium serves the ClusterSet IPs (the imports' derived Services) itself", ""},
	{"flannel", "Flannel", "", "flannel.alpha.coreos.com/"},
	{"weave", "Weave Net", "", ""},
	{"kindnet", "kindnet", "", ""},
	{"antrea", "Antrea", "", ""},
	{"kube-ovn", "Kube-OVN", "", ""},
	{"ovnkube", "OVN-Kubernetes", "", ""},
	{"aws-node", "Amazon VPC CNI", "", ""},
	{"azure-cns", "Azure CNI", "", ""},
	{"kube-router", "kube-router", "", ""},
	{"multus", "Multus (meta-plugin)", "", ""},
}

// cniSeen is a CNI found in the cluster and what shows it (a DaemonSet, Node annotations).
type cniSeen struct {
	name, note, shownBy string
}

func checkCNI(ctx context.Context, e *env, m *member) []Finding {
	dss := &appsv1.DaemonSetList{}
	if err := m.c.List(ctx, dss); err != nil {
		return []Finding{notChecked("the cluster's CNI", fmt.Errorf("listing DaemonSets: %w", err), "versions")}
	}
	nodes := &corev1.NodeList{}
	if err := m.c.List(ctx, nodes); err != nil {
		return []Finding{notChecked("the cluster's CNI", fmt.Errorf("listing Nodes: %w", err), "versions")}
	}
	return []Finding{judgeCNIs(recogniseCNIs(dss.Items, nodes.Items))}
}

// recogniseCNIs finds the known CNIs among the DaemonSets, by name or image, each once; when
// none is, it looks for their Node annotations (a DaemonSet's CNI may annotate Nodes as
// another CNI would: Canal's flannel does).
func recogniseCNIs(dss []appsv1.DaemonSet, nodes []corev1.Node) []cniSeen {
	var seen []cniSeen
	for _, known := range knownCNIs {
		if i := slices.IndexFunc(dss, func(ds appsv1.DaemonSet) bool { return matchesCNI(ds, known.marker) }); i >= 0 {
			seen = append(seen, cniSeen{name: known.name, note: known.note, shownBy: "DaemonSet " + dss[i].Namespace + "/" + dss[i].Name})
		}
	}
	if len(seen) > 0 {
		return seen
	}
	for _, known := range knownCNIs {
		if known.nodeAnnotation == "" {
			continue
		}
		if i := slices.IndexFunc(nodes, func(n corev1.Node) bool { return hasAnnotationPrefix(n, known.nodeAnnotation) }); i >= 0 {
			seen = append(seen, cniSeen{name: known.name, note: known.note,
				shownBy: fmt.Sprintf("Node %s's %s annotations, no DaemonSet", nodes[i].Name, known.nodeAnnotation)})
		}
	}
	return seen
}

func hasAnnotationPrefix(n corev1.Node, prefix string) bool {
	for k := range n.Annotations {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

func matchesCNI(ds appsv1.DaemonSet, marker string) bool {
	if strings.Contains(ds.Name, marker) {
		return true
	}
	return slices.ContainsFunc(ds.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return strings.Contains(c.Image, marker) })
}

// judgeCNIs reports what was found: Octopus works with any CNI, so this is information for
// whoever reads a report about a path that does not work.
func judgeCNIs(seen []cniSeen) Finding {
	if len(seen) == 0 {
		return info("no known CNI found by DaemonSet or Node annotations (the CNI may run outside pods, as the lab's bridge does, or be one Octopus does not recognise); any CNI works as long as nodes route pod traffic through their routing table")
	}
	parts := make([]string, len(seen))
	for i, s := range seen {
		parts[i] = fmt.Sprintf("%s (%s)", s.name, s.shownBy)
		if s.note != "" {
			parts[i] += ": " + s.note
		}
	}
	return ok("CNI: %s", strings.Join(parts, "; "))
}
