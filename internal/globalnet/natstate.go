package globalnet

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/nat"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
	"github.com/octopus-mcs/octopus/internal/ipam"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/servicediscovery"
)

// NATState is what the active gateway's NAT must translate: the cluster's global CIDR and
// egress range, egress to remote (the subnets of the accepted remote Peers), and ingress for
// every allocated record. A Service's global IP leads, per service port, to the ready
// endpoints of its local EndpointSlices on the target port of the same name, as kube-proxy
// pairs them; a pod's leads to the pod's address while it is a ready endpoint of its headless
// Service. exports holds the Services the records name, keyed by namespace/name. Records
// without an allocated address, and of targets no longer there, translate nothing.
func NATState(layout globalip.Layout, remote []netip.Prefix, records []v1alpha1.GlobalIngressIP, exports map[types.NamespacedName]Export) nat.State {
	s := nat.State{
		GlobalCIDRs:   []netip.Prefix{layout.CIDR},
		RemoteCIDRs:   remote,
		ClusterEgress: []ipam.Range{layout.ClusterEgress},
	}
	for _, g := range records {
		ip, err := netip.ParseAddr(g.Status.IP)
		if err != nil || !meta.IsStatusConditionTrue(g.Status.Conditions, v1alpha1.GlobalIngressIPConditionAllocated) || !layout.Pool.Contains(ip) {
			continue
		}
		t := g.Spec.Target
		service := t.Name
		if t.Kind == v1alpha1.GlobalIngressTargetPod {
			service = t.ServiceName
		}
		e, ok := exports[types.NamespacedName{Namespace: g.Namespace, Name: service}]
		if !ok || e.Service == nil {
			continue
		}
		name := g.Namespace + "/" + t.Name
		switch t.Kind {
		case v1alpha1.GlobalIngressTargetService:
			s.Services = append(s.Services, nat.Service{Name: name, GlobalIP: ip, Ports: servicePorts(e.Service, e.Slices)})
		case v1alpha1.GlobalIngressTargetPod:
			if pod, ok := podAddress(e.Slices, t.Name); ok {
				s.Pods = append(s.Pods, nat.PodIngress{Name: name, GlobalIP: ip, Pod: pod})
			}
		}
	}
	return s
}

// servicePorts pairs each port of svc with the ready IPv4 endpoints of slices that carry a
// port of the same name and protocol.
func servicePorts(svc *corev1.Service, slices []discoveryv1.EndpointSlice) []nat.Port {
	var ports []nat.Port
	for _, sp := range svc.Spec.Ports {
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		p := nat.Port{Protocol: nat.Protocol(strings.ToLower(string(proto))), Port: uint16(sp.Port)} //nolint:gosec // a Service port is 1-65535
		for _, s := range slices {
			if s.AddressType != discoveryv1.AddressTypeIPv4 {
				continue
			}
			var target int32
			for _, ep := range s.Ports {
				if ptr.Deref(ep.Name, "") == sp.Name && ptr.Deref(ep.Protocol, corev1.ProtocolTCP) == proto && ep.Port != nil {
					target = *ep.Port
				}
			}
			if target == 0 {
				continue
			}
			for _, ep := range s.Endpoints {
				if !servicediscovery.Ready(ep) {
					continue
				}
				if a, err := netip.ParseAddr(ep.Addresses[0]); err == nil {
					p.Endpoints = append(p.Endpoints, netip.AddrPortFrom(a, uint16(target))) //nolint:gosec // an endpoint port is 1-65535
				}
			}
		}
		ports = append(ports, p)
	}
	return ports
}

// podAddress is the address of pod while it is a ready endpoint in slices.
func podAddress(slices []discoveryv1.EndpointSlice, pod string) (netip.Addr, bool) {
	for _, s := range slices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" && ep.TargetRef.Name == pod && servicediscovery.Ready(ep) {
				if a, err := netip.ParseAddr(ep.Addresses[0]); err == nil {
					return a, true
				}
			}
		}
	}
	return netip.Addr{}, false
}

// DesiredNAT reads the records and the Services they name from c (a cache of the member
// cluster) and returns NATState of them, with the pods' egress ranges of the GlobalEgressIPs
// (PodEgress).
func DesiredNAT(ctx context.Context, c client.Reader, layout globalip.Layout, remote []netip.Prefix) (nat.State, error) {
	records := &v1alpha1.GlobalIngressIPList{}
	if err := c.List(ctx, records, client.MatchingLabels(kube.ManagedLabels())); err != nil {
		return nat.State{}, fmt.Errorf("listing GlobalIngressIPs: %w", err)
	}
	exports := map[types.NamespacedName]Export{}
	var err error
	for _, g := range records.Items {
		service := g.Spec.Target.Name
		if g.Spec.Target.Kind == v1alpha1.GlobalIngressTargetPod {
			service = g.Spec.Target.ServiceName
		}
		key := types.NamespacedName{Namespace: g.Namespace, Name: service}
		if _, done := exports[key]; done {
			continue
		}
		e, err := readExport(ctx, c, key)
		if err != nil {
			return nat.State{}, err
		}
		exports[key] = e
	}
	s := NATState(layout, remote, records.Items, exports)
	if s.PodEgress, err = desiredPodEgress(ctx, c); err != nil {
		return nat.State{}, err
	}
	return s, nil
}

// desiredPodEgress reads the GlobalEgressIPs, and the pods of the namespaces that have one, and
// returns PodEgress of them.
func desiredPodEgress(ctx context.Context, c client.Reader) ([]nat.PodEgress, error) {
	egress := &v1alpha1.GlobalEgressIPList{}
	if err := c.List(ctx, egress); err != nil {
		return nil, fmt.Errorf("listing GlobalEgressIPs: %w", err)
	}
	var pods []corev1.Pod
	listed := map[string]bool{}
	for _, g := range egress.Items {
		if listed[g.Namespace] {
			continue
		}
		listed[g.Namespace] = true
		list := &corev1.PodList{}
		if err := c.List(ctx, list, client.InNamespace(g.Namespace)); err != nil {
			return nil, fmt.Errorf("listing the pods of namespace %s (it has GlobalEgressIPs): %w", g.Namespace, err)
		}
		pods = append(pods, list.Items...)
	}
	return PodEgress(egress.Items, pods), nil
}
