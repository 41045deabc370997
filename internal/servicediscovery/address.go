package servicediscovery

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

// EndpointSet is what an exported service offers other clusters for one address type and one
// set of ports: it becomes one EndpointSlice on the hub (several, if it is very large).
type EndpointSet struct {
	AddressType discoveryv1.AddressType
	Ports       []discoveryv1.EndpointPort
	Endpoints   []discoveryv1.Endpoint
}

// AddressPolicy decides which addresses other clusters use to reach an exported service. It is
// the one place that choice is made, so that globalnet (global IPs) and the secondary network
// (net1 addresses) can replace DirectAddresses without touching the exporter.
//
// Endpoints returns the endpoint sets of svc, exported as typ; local holds the cluster's own
// EndpointSlices of svc (those labelled kubernetes.io/service-name). It must be deterministic,
// the same input (and cluster state) giving the same sets in the same order, because its output
// is compared with what the hub already holds to skip needless writes. An error fails the
// reconcile, which is retried.
type AddressPolicy interface {
	Endpoints(ctx context.Context, svc *corev1.Service, typ mcsv1beta1.ServiceImportType, local []discoveryv1.EndpointSlice) ([]EndpointSet, error)
}

// DirectAddresses is the policy of direct addressing, where other clusters route this one's
// pod CIDRs unchanged: every export offers its ready pods' addresses with the ports its
// EndpointSlices name (target ports, under the service ports' names). That is the KEP's model
// for both types: the importer's kube-proxy balances a ClusterSetIP import over the pods of every
// exporting cluster, the exporter's own included, pairing each port of the derived Service with
// the endpoint port of the same name. Offering the ClusterIP instead would be load-balanced twice:
// kube-proxy refuses a ClusterIP as an endpoint in the exporting cluster itself (its own
// service-IP check drops the DNATed packet), and elsewhere the second DNAT on the exporter's
// gateway node masquerades the client's address away.
type DirectAddresses struct{}

var _ AddressPolicy = DirectAddresses{}

// Endpoints implements AddressPolicy.
func (DirectAddresses) Endpoints(_ context.Context, _ *corev1.Service, typ mcsv1beta1.ServiceImportType, local []discoveryv1.EndpointSlice) ([]EndpointSet, error) {
	return readyPodEndpoints(local, typ == mcsv1beta1.Headless), nil
}

// ReasonUnsupportedIPFamily is the reason of an export's Valid=False condition when the
// cluster's addressing can offer none of its Service's address families to other clusters.
const ReasonUnsupportedIPFamily mcsv1beta1.ServiceExportConditionReason = "UnsupportedIPFamily"

// familyLimited is an AddressPolicy that can offer only some address families. For a
// Service of none of them unsupportedFamilies says why and what to do (the rest of a Valid
// condition's message, after "Service <ns>/<name> "); "" when it can be offered. The export
// is then invalid rather than valid and published with nothing, which an importer could not
// tell from a service without endpoints.
type familyLimited interface {
	unsupportedFamilies(svc *corev1.Service) string
}

// HasIPv4 reports whether svc has, or would get, IPv4 addresses: IPv4 among its ipFamilies, or,
// where those are not recorded (an object the API server has not defaulted), an IPv4 ClusterIP
// or none to tell by.
func HasIPv4(svc *corev1.Service) bool {
	if len(svc.Spec.IPFamilies) > 0 {
		return slices.Contains(svc.Spec.IPFamilies, corev1.IPv4Protocol)
	}
	a, err := netip.ParseAddr(svc.Spec.ClusterIP)
	return err != nil || a.Is4()
}

// GlobalAddresses is the policy of globalnet addressing, where other clusters cannot route this
// one's pod and service CIDRs (they overlap theirs) and reach it through global addresses that
// the active gateway translates (docs/architecture.md, globalnet). A ClusterSetIP export offers
// one endpoint, the Service's global IP, with the service's own ports: the gateway translates
// each port to the target port of a ready pod. A headless export offers each ready pod by its
// own global IP, with the target ports and hostnames DirectAddresses gives it. Addresses come
// from the Service's GlobalIngressIPs (labelled with the MCS service name) once allocated; until
// then, and for pods without one, nothing is offered, so an importer never sees an address that
// leads nowhere.
type GlobalAddresses struct {
	// Member reads the cluster's GlobalIngressIPs, e.g. the export controller's cache.
	Member client.Reader
}

var (
	_ AddressPolicy = GlobalAddresses{}
	_ familyLimited = GlobalAddresses{}
)

// unsupportedFamilies implements familyLimited: global addresses are IPv4 (the hub's globalnet
// pool), and the gateway translates them to IPv4 endpoints only; a dual-stack Service is offered
// by its IPv4 side.
func (GlobalAddresses) unsupportedFamilies(svc *corev1.Service) string {
	if HasIPv4(svc) {
		return ""
	}
	return fmt.Sprintf("has ipFamilies %v: globalnet's global addresses are IPv4 and lead only to IPv4 endpoints; "+
		"set ipFamilyPolicy PreferDualStack (or RequireDualStack) on the Service so that it gets IPv4 as well", svc.Spec.IPFamilies)
}

// Endpoints implements AddressPolicy.
func (g GlobalAddresses) Endpoints(ctx context.Context, svc *corev1.Service, typ mcsv1beta1.ServiceImportType, local []discoveryv1.EndpointSlice) ([]EndpointSet, error) {
	records := &v1alpha1.GlobalIngressIPList{}
	if err := g.Member.List(ctx, records, client.InNamespace(svc.Namespace), client.MatchingLabels{mcsv1beta1.LabelServiceName: svc.Name}); err != nil {
		return nil, fmt.Errorf("listing the GlobalIngressIPs of Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	global := map[v1alpha1.GlobalIngressTarget]string{}
	for _, r := range records.Items {
		if _, err := netip.ParseAddr(r.Status.IP); err == nil && meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.GlobalIngressIPConditionAllocated) {
			global[r.Spec.Target] = r.Status.IP
		}
	}
	ready := readyPodEndpoints(local, typ == mcsv1beta1.Headless)
	if typ == mcsv1beta1.ClusterSetIP {
		ip, ok := global[v1alpha1.GlobalIngressTarget{Kind: v1alpha1.GlobalIngressTargetService, Name: svc.Name}]
		if !ok || len(ready) == 0 {
			return nil, nil
		}
		ports := make([]discoveryv1.EndpointPort, 0, len(svc.Spec.Ports))
		for _, p := range svc.Spec.Ports {
			ports = append(ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(protocolOrTCP(p.Protocol)), Port: ptr.To(p.Port), AppProtocol: p.AppProtocol})
		}
		sortPorts(ports)
		return []EndpointSet{{AddressType: addressType(ip), Ports: ports, Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		}}}}, nil
	}
	// Headless: the pods' own addresses become their global ones; the sets keep their ports.
	pods := endpointPods(local)
	return readdressed(ready, func(ep discoveryv1.Endpoint) (string, error) {
		return global[v1alpha1.GlobalIngressTarget{Kind: v1alpha1.GlobalIngressTargetPod, Name: pods[ep.Addresses[0]], ServiceName: svc.Name}], nil
	})
}

// readdressed returns sets with each endpoint's address replaced by the one addr gives it (a
// pod's global or secondary address), dropping the endpoints it gives none ("") or one of
// another type than their set's, and the sets left empty; each set's endpoints sorted by
// their new address. An error of addr is returned as it is.
func readdressed(sets []EndpointSet, addr func(discoveryv1.Endpoint) (string, error)) ([]EndpointSet, error) {
	var out []EndpointSet
	for _, set := range sets {
		var eps []discoveryv1.Endpoint
		for _, ep := range set.Endpoints {
			ip, err := addr(ep)
			if err != nil {
				return nil, err
			}
			if ip == "" || addressType(ip) != set.AddressType {
				continue
			}
			ep.Addresses = []string{ip}
			eps = append(eps, ep)
		}
		if len(eps) > 0 {
			slices.SortFunc(eps, func(a, b discoveryv1.Endpoint) int { return compareAddrs(a.Addresses[0], b.Addresses[0]) })
			set.Endpoints = eps
			out = append(out, set)
		}
	}
	return out, nil
}

// SecondaryAddresses is the policy of secondary addressing, where other clusters reach this
// one's pods only over the OVN secondary network: each pod's second interface, net1, has an
// address of the cluster's secondary CIDR, which the ovnmaster reports in the pod's
// network-status annotation (internal/secondarynet/podnet). Both types offer each ready pod by that
// address, with the target ports and (for headless services) the hostname DirectAddresses gives
// it: a ClusterSetIP import is then balanced by the importing side over every cluster's pods
// (docs/architecture.md §6s: by DNS, there being no virtual IP on the secondary network). A pod
// without a secondary address yet, with an annotation that cannot be read, or that has gone is
// not offered, so an importer never sees an address that leads nowhere.
type SecondaryAddresses struct {
	// Member reads the metadata of the cluster's Pods, e.g. the export controller's cache.
	Member client.Reader
}

var _ AddressPolicy = SecondaryAddresses{}

// Endpoints implements AddressPolicy.
func (p SecondaryAddresses) Endpoints(ctx context.Context, svc *corev1.Service, typ mcsv1beta1.ServiceImportType, local []discoveryv1.EndpointSlice) ([]EndpointSet, error) {
	pods := endpointPods(local)
	return readdressed(readyPodEndpoints(local, typ == mcsv1beta1.Headless), func(ep discoveryv1.Endpoint) (string, error) {
		pod, ok := pods[ep.Addresses[0]]
		if !ok {
			return "", nil // not a pod (a hand-made endpoint): it has no secondary address
		}
		ip, err := p.secondaryIP(ctx, svc.Namespace, pod)
		if err != nil || !ip.IsValid() {
			return "", err
		}
		return ip.String(), nil
	})
}

// secondaryIP is the secondary address of pod namespace/name, the zero Addr when it has none
// that can be used (no entry yet, an unreadable annotation, no or a malformed address, the pod
// gone). Only failing to read the cache is an error.
func (p SecondaryAddresses) secondaryIP(ctx context.Context, namespace, name string) (netip.Addr, error) {
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	if err := p.Member.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return netip.Addr{}, nil
		}
		return netip.Addr{}, fmt.Errorf("reading Pod %s/%s for its secondary address: %w", namespace, name, err)
	}
	entry, ok, err := podnet.Find(pod.Annotations)
	if err != nil {
		logf.FromContext(ctx).V(1).Info("Left out a pod whose network-status cannot be read", "pod", namespace+"/"+name, "error", err.Error())
		return netip.Addr{}, nil
	}
	if !ok || len(entry.IPs) == 0 {
		return netip.Addr{}, nil
	}
	ip, err := netip.ParseAddr(entry.IPs[0])
	if err != nil || ip.Zone() != "" {
		logf.FromContext(ctx).V(1).Info("Left out a pod whose secondary address is malformed", "pod", namespace+"/"+name, "address", entry.IPs[0])
		return netip.Addr{}, nil //nolint:nilerr // bad data of the pod's: it is left out, not retried
	}
	return ip.Unmap(), nil
}

// endpointPods maps the addresses of the local slices' pod endpoints to their pods' names.
func endpointPods(local []discoveryv1.EndpointSlice) map[string]string {
	pods := map[string]string{}
	for _, s := range local {
		for _, ep := range s.Endpoints {
			if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" && len(ep.Addresses) > 0 {
				pods[ep.Addresses[0]] = ep.TargetRef.Name
			}
		}
	}
	return pods
}

func addressType(ip string) discoveryv1.AddressType {
	if strings.Contains(ip, ":") {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}

// readyPodEndpoints collects the ready endpoints of the local slices, grouped by address type
// and port set. Only ready endpoints are offered: the KEP lets an importer route to any
// endpoint it sees, and the owning cluster knows best which pods can serve. Hostnames are
// kept only where DNS names pods (withHostnames: headless services).
func readyPodEndpoints(local []discoveryv1.EndpointSlice, withHostnames bool) []EndpointSet {
	groups := map[string]*EndpointSet{}
	seen := map[string]bool{}
	for i := range local {
		s := &local[i]
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue // FQDN slices are not produced for pods
		}
		ports := slices.Clone(s.Ports)
		sortPorts(ports)
		key := string(s.AddressType) + "|" + portsKey(ports)
		for _, ep := range s.Endpoints {
			if !Ready(ep) {
				continue
			}
			// While kube-controller-manager moves an endpoint between slices it can be in two.
			if id := key + "|" + ep.Addresses[0]; seen[id] {
				continue
			} else {
				seen[id] = true
			}
			g := groups[key]
			if g == nil {
				g = &EndpointSet{AddressType: s.AddressType, Ports: ports}
				groups[key] = g
			}
			var host *string
			if withHostnames {
				host = hostname(ep)
			}
			g.Endpoints = append(g.Endpoints, discoveryv1.Endpoint{
				Addresses: slices.Clone(ep.Addresses),
				Hostname:  host,
				// Ready by the filter above; serving and terminating as the cluster sees them.
				Conditions: discoveryv1.EndpointConditions{
					Ready: ptr.To(true), Serving: ptr.To(ep.Conditions.Serving == nil || *ep.Conditions.Serving),
					Terminating: ptr.To(ep.Conditions.Terminating != nil && *ep.Conditions.Terminating),
				},
			})
		}
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	sets := make([]EndpointSet, 0, len(keys))
	for _, k := range keys {
		g := groups[k]
		slices.SortFunc(g.Endpoints, func(a, b discoveryv1.Endpoint) int { return compareAddrs(a.Addresses[0], b.Addresses[0]) })
		sets = append(sets, *g)
	}
	return sets
}

// Ready reports whether an endpoint of a local EndpointSlice may be offered to other clusters:
// it has an address and is ready (a nil Ready means ready, per discovery/v1).
func Ready(ep discoveryv1.Endpoint) bool {
	return len(ep.Addresses) > 0 && (ep.Conditions.Ready == nil || *ep.Conditions.Ready)
}

// hostname is the endpoint's hostname, and nothing else. The MCS DNS specification follows
// the cluster's own there: an endpoint without a hostname is named by its address in dashed
// form (10-1-1-23.<cluster>.<svc>.<ns>.svc.clusterset.local), which the DNS server derives from
// the address. Publishing the pod's name instead would give those endpoints a name no client
// that builds it from the address can find.
func hostname(ep discoveryv1.Endpoint) *string {
	if ep.Hostname != nil && *ep.Hostname != "" {
		return ptr.To(*ep.Hostname)
	}
	return nil
}

// ImportType maps a Service's type to the ServiceImport type it is exported as; ok is false
// for a Service that cannot be exported (ExternalName, per the KEP: it has no endpoints of
// its own to share).
func ImportType(svc *corev1.Service) (typ mcsv1beta1.ServiceImportType, ok bool) {
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return "", false
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		return mcsv1beta1.Headless, true
	default: // ClusterIP, NodePort, LoadBalancer: all have a ClusterIP
		return mcsv1beta1.ClusterSetIP, true
	}
}

func protocolOrTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

func sortPorts(ports []discoveryv1.EndpointPort) {
	slices.SortFunc(ports, func(a, b discoveryv1.EndpointPort) int {
		return cmp.Or(
			cmp.Compare(ptr.Deref(a.Name, ""), ptr.Deref(b.Name, "")),
			cmp.Compare(ptr.Deref(a.Protocol, ""), ptr.Deref(b.Protocol, "")),
			cmp.Compare(ptr.Deref(a.Port, 0), ptr.Deref(b.Port, 0)),
		)
	})
}

func portsKey(ports []discoveryv1.EndpointPort) string {
	var b strings.Builder
	for _, p := range ports {
		b.WriteString(ptr.Deref(p.Name, ""))
		b.WriteByte('/')
		b.WriteString(string(ptr.Deref(p.Protocol, "")))
		b.WriteByte('/')
		b.WriteString(strconv.Itoa(int(ptr.Deref(p.Port, 0))))
		b.WriteByte('/')
		b.WriteString(ptr.Deref(p.AppProtocol, ""))
		b.WriteByte(',')
	}
	return b.String()
}

// compareAddrs orders addresses numerically where they parse, so that 10.0.0.9 sorts before
// 10.0.0.10, and falls back to the strings.
func compareAddrs(a, b string) int {
	x, errX := netip.ParseAddr(a)
	y, errY := netip.ParseAddr(b)
	if errX != nil || errY != nil {
		return strings.Compare(a, b)
	}
	return x.Compare(y)
}
