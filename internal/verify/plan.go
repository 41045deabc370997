package verify

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

// This file is the pure part of verify: which checks a pair of clusters gets, where a
// client reaches the other cluster's probe server, and what a right import and DNS answer
// look like, for each addressing mode.

// AddressingSource says where verify learned a cluster's addressing.
type AddressingSource string

const (
	// SourceHub is the cluster's Cluster on the hub, read with the cluster's own hub
	// credential: what join set and what the cluster's agent acts on.
	SourceHub AddressingSource = "hub"
	// SourceProbe is the probe server pod's annotations: the hub could not be read, and the
	// pod carries the secondary network's network-status entry or error, which only the
	// ovnmaster of a cluster on the secondary network writes.
	SourceProbe AddressingSource = "probe-server"
	// SourceAssumed means neither told: the hub could not be read and the probe server is
	// not on the secondary network, so the cluster is checked as direct addressing (a
	// globalnet cluster cannot be told from a direct one without the hub).
	SourceAssumed AddressingSource = "assumed"
)

// errAddressingMismatch marks the checks of a pair that cannot connect by design.
var errAddressingMismatch = errors.New("AddressingMismatch")

// pairChecks returns the checks verify runs from a client in cluster from to the probe
// server of cluster to, in report order. The checks of a pair on the primary network (direct
// or globalnet, mixed or not) are Checks; of a pair on the secondary network SecondaryChecks,
// whose pod → service check is secondary-service: an import there has no ClusterSet IP. A
// pair of which one cluster is on the secondary network and the other not cannot connect at
// all (a pod confined to net1 reaches only other clusters' net1 addresses, a pod on the
// primary network none of them; the gateways refuse each other's Peers, and neither imports
// the other's services): the checks its client would run are returned with an
// errAddressingMismatch saying so, and they fail at once rather than time out.
func pairChecks(from, to ClusterAddressing) ([]Check, error) {
	fromSecondary := from.Addressing == v1alpha1.AddressingSecondary
	toSecondary := to.Addressing == v1alpha1.AddressingSecondary
	checks := Checks
	if fromSecondary {
		checks = SecondaryChecks
	}
	if fromSecondary != toSecondary {
		var assumed string
		for _, c := range []ClusterAddressing{from, to} {
			if c.Source == SourceAssumed {
				assumed += fmt.Sprintf(" (%s's addressing is assumed: the hub could not be read, and its probe server is not on the secondary network)", c.Cluster)
			}
		}
		return checks, fmt.Errorf("%w: %s uses %s addressing and %s %s addressing, which cannot reach each other (pods on the secondary network reach only other clusters' net1 addresses, pods on the primary network none of them; the gateways refuse each other's Peers and neither imports the other's services): join both with secondary addressing, or neither%s",
			errAddressingMismatch, from.Cluster, addressingName(from.Addressing), to.Cluster, addressingName(to.Addressing), assumed)
	}
	return checks, nil
}

func addressingName(a v1alpha1.Addressing) string {
	if a == "" {
		return string(v1alpha1.AddressingDirect)
	}
	return string(a)
}

// secondaryFromAnnotations says whether a pod's annotations show that its cluster is on the
// secondary network: the ovnmaster, which runs only there, writes either our network-status
// entry or the reason it could not.
func secondaryFromAnnotations(annotations map[string]string) bool {
	if _, ok := annotations[podnet.ErrorAnnotation]; ok {
		return true
	}
	_, ok, err := podnet.Find(annotations)
	return ok && err == nil
}

// podTarget is the address by which clients of other clusters reach the probe server pod
// of a cluster of addressing a: its net1 address on the secondary network (the first IPv4
// address of our network-status entry; the network is IPv4), its global IP in a globalnet
// cluster (globalIP, from its headless export), else its pod IP. Without a net1 address
// the error says why, from the ovnmaster's octopus.io/secondary-network-error.
func podTarget(a v1alpha1.Addressing, pod *corev1.Pod, globalIP netip.Addr) (netip.Addr, error) {
	switch a {
	case v1alpha1.AddressingSecondary:
		return secondaryAddress(pod)
	case v1alpha1.AddressingGlobalnet:
		if !globalIP.IsValid() {
			return netip.Addr{}, fmt.Errorf("pod %s/%s has no global IP", pod.Namespace, pod.Name)
		}
		return globalIP, nil
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("pod %s/%s has no pod IP (%q)", pod.Namespace, pod.Name, pod.Status.PodIP)
	}
	return ip, nil
}

// secondaryAddress is pod's net1 address from the network-status entry the ovnmaster wrote.
func secondaryAddress(pod *corev1.Pod) (netip.Addr, error) {
	noAddress := func(why string) error {
		return fmt.Errorf("pod %s/%s has no address on the secondary network: %s", pod.Namespace, pod.Name, why)
	}
	st, ok, err := podnet.Find(pod.Annotations)
	if err != nil {
		return netip.Addr{}, noAddress(err.Error())
	}
	if !ok {
		if why := pod.Annotations[podnet.ErrorAnnotation]; why != "" {
			return netip.Addr{}, noAddress(why)
		}
		return netip.Addr{}, noAddress(fmt.Sprintf("no %s entry %s and no %s (is the ovnmaster running? `kubectl -n %s get pods`, `octopus show pods -n %s`)",
			podnet.NetworkStatusAnnotation, podnet.NetworkName, podnet.ErrorAnnotation, v1alpha1.SystemNamespace, pod.Namespace))
	}
	for _, s := range st.IPs {
		if ip, err := netip.ParseAddr(s); err == nil && ip.Is4() {
			return ip, nil
		}
	}
	return netip.Addr{}, noAddress(fmt.Sprintf("its %s entry %s holds no IPv4 address (%v)", podnet.NetworkStatusAnnotation, podnet.NetworkName, st.IPs))
}

// secondaryEndpoint checks what a client cluster on the secondary network imported of the
// probe Service of cluster exporter and returns the endpoint a client connects to: the
// ServiceImport must be marked octopus.io/addressing: secondary and have no ClusterSet IP
// (none would be reachable from net1), and the imported slices of exporter must hold, ready,
// want (the exporter's probe server's net1 address) and no other address, with the port
// named as the Service's (the target port: clients connect straight to the pod).
func secondaryEndpoint(si *mcsv1beta1.ServiceImport, imported []discoveryv1.EndpointSlice, exporter string, want netip.Addr) (netip.AddrPort, error) {
	name := si.Namespace + "/" + si.Name
	if got := si.Annotations[v1alpha1.AddressingAnnotation]; got != string(v1alpha1.AddressingSecondary) {
		return netip.AddrPort{}, fmt.Errorf("ServiceImport %s is not annotated %s: %s (the importing cluster's agent does not import with secondary addressing: `octopus show clusters`, its controller's log)",
			name, v1alpha1.AddressingAnnotation, v1alpha1.AddressingSecondary)
	}
	if len(si.Spec.IPs) > 0 {
		return netip.AddrPort{}, fmt.Errorf("ServiceImport %s has ClusterSet IPs %v, which pods on the secondary network cannot reach; want none", name, si.Spec.IPs)
	}
	var ready []netip.Addr
	var port int32
	for _, s := range imported {
		if s.Labels[mcsv1beta1.LabelSourceCluster] != exporter {
			continue
		}
		for _, p := range s.Ports {
			if p.Port != nil && (p.Name == nil || *p.Name == servicePortName) {
				port = *p.Port
			}
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					ready = append(ready, ip)
				}
			}
		}
	}
	if len(ready) == 0 {
		return netip.AddrPort{}, fmt.Errorf("ServiceImport %s has no ready endpoint of %s yet (want %s, its probe server's net1 address)", name, exporter, want)
	}
	if i := slices.IndexFunc(ready, func(a netip.Addr) bool { return a != want }); i >= 0 {
		return netip.AddrPort{}, fmt.Errorf("ServiceImport %s holds endpoint %s of %s, not its probe server's net1 address %s (a primary address published?)", name, ready[i], exporter, want)
	}
	if port == 0 {
		return netip.AddrPort{}, fmt.Errorf("the imported EndpointSlices of %s from %s have no port %q", name, exporter, servicePortName)
	}
	return netip.AddrPortFrom(want, uint16(port)), nil
}

// checkResolved checks dig's answer for a service name: it must hold want (the ClusterSet
// IP, or on the secondary network the other cluster's probe server's net1 address). On the
// secondary network it must hold nothing else either: the name answers with the exporters'
// pods, and only the other cluster exports this Service.
func checkResolved(name string, got []netip.Addr, want netip.Addr, secondary bool) error {
	if !secondary {
		if !slices.Contains(got, want) {
			return fmt.Errorf("%s resolved to %v, want the ClusterSet IP %s (is the clusterset.local zone forwarded to octopus-dns?)", name, got, want)
		}
		return nil
	}
	if len(got) == 0 || slices.ContainsFunc(got, func(a netip.Addr) bool { return a != want }) {
		return fmt.Errorf("%s resolved to %v, want only %s, the net1 address of the exporting cluster's probe server (is the clusterset.local zone forwarded to octopus-dns? `octopus show services`)", name, got, want)
	}
	return nil
}

// addressingLine is the report's account of each cluster's addressing: "east secondary,
// west direct (assumed: ...)"; the source is named when it is not the hub.
func addressingLine(clusters []ClusterAddressing) string {
	parts := make([]string, len(clusters))
	for i, c := range clusters {
		parts[i] = c.Cluster + " " + addressingName(c.Addressing)
		switch c.Source {
		case SourceProbe:
			parts[i] += " (from its probe server's annotations: the hub could not be read)"
		case SourceAssumed:
			parts[i] += " (assumed: the hub could not be read)"
		}
	}
	return strings.Join(parts, ", ")
}
