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
	Check:  Check{Name: "cni", Summary: "the CNI plugins the cluster runs, recognised by their DaemonSets (any CNI works: the route agent routes remote CIDRs through the node's routing table)"},
	member: checkCNI,
}

// knownCNIs maps what a CNI's node DaemonSet is called, or its images contain, to the CNI's
// name and, where Octopus users should know something about it, a note.
var knownCNIs = []struct {
	marker, name, note string
}{
	{"calico-node", "Calico", ""},
	{"canal", "Canal", ""},
	{"cilium", "Cilium", "with kube-proxy replacement, Cilium serves the ClusterSet IPs (the imports' derived Services) itself"},
	{"flannel", "Flannel", ""},
	{"weave", "Weave Net", ""},
	{"kindnet", "kindnet", ""},
	{"antrea", "Antrea", ""},
	{"kube-ovn", "Kube-OVN", ""},
	{"ovnkube", "OVN-Kubernetes", ""},
	{"aws-node", "Amazon VPC CNI", ""},
	{"azure-cns", "Azure CNI", ""},
	{"kube-router", "kube-router", ""},
	{"multus", "Multus (meta-plugin)", ""},
}

// cniSeen is a CNI found in the cluster and the DaemonSet that shows it.
type cniSeen struct {
	name, note, daemonSet string
}

func checkCNI(ctx context.Context, e *env, m *member) []Finding {
	dss := &appsv1.DaemonSetList{}
	if err := m.c.List(ctx, dss); err != nil {
		return []Finding{notChecked("the cluster's CNI", fmt.Errorf("listing DaemonSets: %w", err), "versions")}
	}
	return []Finding{judgeCNIs(recogniseCNIs(dss.Items))}
}

// recogniseCNIs finds the known CNIs among the DaemonSets, by name or image, each once.
func recogniseCNIs(dss []appsv1.DaemonSet) []cniSeen {
	var seen []cniSeen
	for _, known := range knownCNIs {
		for _, ds := range dss {
			if matchesCNI(ds, known.marker) {
				seen = append(seen, cniSeen{name: known.name, note: known.note, daemonSet: ds.Namespace + "/" + ds.Name})
				break
			}
		}
	}
	return seen
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
		return info("no known CNI DaemonSet found (the CNI may run outside pods, as in the lab, or be one Octopus does not recognise); any CNI works as long as nodes route pod traffic through their routing table")
	}
	parts := make([]string, len(seen))
	for i, s := range seen {
		parts[i] = fmt.Sprintf("%s (DaemonSet %s)", s.name, s.daemonSet)
		if s.note != "" {
			parts[i] += ": " + s.note
		}
	}
	return ok("CNI: %s", strings.Join(parts, "; "))
}
