package kube

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// NodeEndpoint is the address other clusters' gateways tunnel to when a gateway runs on node
// without --endpoint-ip: the Node's v1alpha1.EndpointIPAnnotation, else its ExternalIP, else
// its InternalIP. The gateway uses it and the operator reports it, so both name one address.
func NodeEndpoint(node *corev1.Node) (netip.Addr, error) {
	if a, ok := node.Annotations[v1alpha1.EndpointIPAnnotation]; ok {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("node %s: annotation %s: %w", node.Name, v1alpha1.EndpointIPAnnotation, err)
		}
		return ip, nil
	}
	for _, t := range []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP} {
		for _, a := range node.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == t {
				return ip, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("node %s has no ExternalIP or InternalIP: pass --endpoint-ip", node.Name)
}
