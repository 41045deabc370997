// Package routeagent is the Kubernetes side of the route agent: it learns, from the member
// cluster alone, which node is the active gateway and which remote CIDRs lie behind it, and
// has route.Table steer those CIDRs to that node.
//
// Nodes get no hub credential. The active gateway is the node the ConfigMap
// v1alpha1.GatewayConfigMapName names (GatewayKey), reached at that Node's InternalIP: the
// active gateway writes its node name there only once its tunnels are configured and its Peer
// is published, so the route agents move to a new gateway when it can forward, not when it
// took the Lease (make-before-break, docs/architecture.md §6d). A ConfigMap without the key
// (written by a gateway of an earlier version) leaves the choice to the holder of the
// gateway's leader-election Lease (v1alpha1.GatewayLeaseName in octopus-system; its
// holderIdentity is the gateway's node name). The remote CIDRs are what the active gateway
// mirrors into the same ConfigMap from the Peers it accepted on the hub. Both objects live in
// the member cluster, so the route agents keep working while the hub is down.
package routeagent

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/ipam"
)

// SubnetsKey holds the remote CIDRs, one per line, sorted.
const SubnetsKey = "remoteSubnets"

// GatewayKey holds the node name of the active gateway that wrote the ConfigMap, once its
// tunnels were applied and its Peer published: the node the route agents route through. The
// name is v1alpha1's because the ovnmaster reads it too, without linking this package.
const GatewayKey = v1alpha1.GatewayConfigMapGatewayKey

// GatewayConfigMap renders the ConfigMap the active gateway on node writes: the remote
// subnets, and node as the gateway to route through.
func GatewayConfigMap(node string, subnets []netip.Prefix) *corev1.ConfigMap {
	cm := SubnetsConfigMap(subnets)
	cm.Data[GatewayKey] = node
	return cm
}

// ActiveGateway is the node the ConfigMap names as the gateway to route through; empty when
// it names none (a gateway of an earlier version wrote it): the Lease holder is then.
func ActiveGateway(cm *corev1.ConfigMap) string {
	if cm == nil {
		return ""
	}
	return strings.TrimSpace(cm.Data[GatewayKey])
}

// SubnetsConfigMap renders a ConfigMap with the remote subnets alone.
func SubnetsConfigMap(subnets []netip.Prefix) *corev1.ConfigMap {
	lines := make([]string, 0, len(subnets))
	for _, s := range ipam.SortPrefixes(subnets) {
		lines = append(lines, s.String())
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.GatewayConfigMapName, Namespace: v1alpha1.SystemNamespace},
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
		return ipam.SortPrefixes(out), fmt.Errorf("ConfigMap %s/%s key %s: %q are not CIDRs; the active gateway writes this object, check its logs", cm.Namespace, cm.Name, SubnetsKey, bad)
	}
	return ipam.SortPrefixes(out), nil
}
