// Package routeagent is the Kubernetes side of the route agent: it learns, from the member
// cluster alone, which node is the active gateway and which remote CIDRs lie behind it, and
// has route.Table steer those CIDRs to that node.
//
// Nodes get no hub credential. The active gateway is the holder of the gateway's
// leader-election Lease (LeaseName in octopus-system; its holderIdentity is the gateway's
// node name), reached at that Node's InternalIP; the remote CIDRs are what the active gateway
// mirrors into the ConfigMap ConfigMapName from the Peers it accepted on the hub. Both objects
// live in the member cluster, so the route agents keep working while the hub is down.
package routeagent

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

const (
	// LeaseName is the gateway's leader-election Lease in v1alpha1.SystemNamespace. Its holder
	// is the active gateway's node name.
	LeaseName = "octopus-gateway"
	// ConfigMapName is the ConfigMap in v1alpha1.SystemNamespace where the active gateway
	// mirrors the remote clusters' CIDRs it routes.
	ConfigMapName = "octopus-gateway"
	// SubnetsKey holds the remote CIDRs, one per line, sorted.
	SubnetsKey = "remoteSubnets"
)

// SubnetsConfigMap renders the ConfigMap the active gateway writes.
func SubnetsConfigMap(subnets []netip.Prefix) *corev1.ConfigMap {
	lines := make([]string, 0, len(subnets))
	for _, s := range sortedPrefixes(subnets) {
		lines = append(lines, s.String())
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: v1alpha1.SystemNamespace},
		Data:       map[string]string{SubnetsKey: strings.Join(lines, "\n")},
	}
}

// ParseSubnets reads the CIDRs of the ConfigMap. A bad line is an error naming it; the good
// lines are returned all the same, so one bad entry does not withdraw every route.
func ParseSubnets(cm *corev1.ConfigMap) ([]netip.Prefix, error) {
	if cm == nil {
		return nil, nil
	}
	var out []netip.Prefix
	var bad []string
	for line := range strings.SplitSeq(cm.Data[SubnetsKey], "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		p, err := netip.ParsePrefix(line)
		if err != nil {
			bad = append(bad, line)
			continue
		}
		out = append(out, p.Masked())
	}
	if len(bad) > 0 {
		return sortedPrefixes(out), fmt.Errorf("ConfigMap %s/%s key %s: %q are not CIDRs; the active gateway writes this object, check its logs", cm.Namespace, cm.Name, SubnetsKey, bad)
	}
	return sortedPrefixes(out), nil
}

func sortedPrefixes(ps []netip.Prefix) []netip.Prefix {
	out := slices.Clone(ps)
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}
