package gateway

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

func metavOf(clusterID, namespace string) metav1.ObjectMeta {
	labels := kube.ManagedLabels()
	// The hub's admission policy lets a cluster write only objects carrying its own ID.
	labels[v1alpha1.ClusterLabel] = clusterID
	return metav1.ObjectMeta{Name: clusterID, Namespace: namespace, Labels: labels}
}

// nodeAddresses fills in the endpoint and health-check addresses the flags left unset: the
// Node's endpoint (kube.NodeEndpoint) and the first host of its pod CIDR.
func nodeAddresses(node *corev1.Node, endpoint, healthCheck netip.Addr) (netip.Addr, netip.Addr, error) {
	if !endpoint.IsValid() {
		ip, err := kube.NodeEndpoint(node)
		if err != nil {
			return netip.Addr{}, netip.Addr{}, err
		}
		endpoint = ip
	}
	if !healthCheck.IsValid() {
		p, err := netip.ParsePrefix(node.Spec.PodCIDR)
		if err != nil {
			return netip.Addr{}, netip.Addr{}, fmt.Errorf("node %s has no pod CIDR to take a health-check address from: pass --health-check-ip", node.Name)
		}
		healthCheck = p.Masked().Addr().Next()
	}
	return endpoint, healthCheck, nil
}

// ensureAddr puts addr/32 (or /128) on the tunnel device: remote gateways probe it, and as
// the device's only address it is the source the kernel picks for this node's own packets
// into the tunnel, an address the remote side routes back through the tunnel (the underlay
// or LAN address would not be). The driver owns the device; the address goes with it.
func ensureAddr(device string, addr netip.Addr) error {
	l, err := netlink.LinkByName(device)
	if err != nil {
		return fmt.Errorf("finding tunnel device %s to give it the health-check address %s: %w", device, addr, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(addr.BitLen(), addr.BitLen())}}
	if err := netlink.AddrReplace(l, a); err != nil {
		return fmt.Errorf("adding health-check address %s to %s: %w", addr, device, err)
	}
	return nil
}
