package servicediscovery

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
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
// the same input giving the same sets in the same order, because its output is compared with
// what the hub already holds to skip needless writes.
type AddressPolicy interface {
	Endpoints(svc *corev1.Service, typ mcsv1beta1.ServiceImportType, local []discoveryv1.EndpointSlice) []EndpointSet
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
func (DirectAddresses) Endpoints(_ *corev1.Service, typ mcsv1beta1.ServiceImportType, local []discoveryv1.EndpointSlice) []EndpointSet {
	return readyPodEndpoints(local, typ == mcsv1beta1.Headless)
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
			if len(ep.Addresses) == 0 || (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) {
				continue // a nil Ready means ready (discovery/v1)
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

// hostname is the endpoint's hostname, or else the name of its pod. MCS DNS names pods of a
// headless service <hostname>.<cluster>.<svc>.<ns>.svc.clusterset.local, and a pod without
// spec.hostname/subdomain has no hostname in its EndpointSlice; the pod name is unique in the
// cluster and stable for the pod's life, so it is the natural name (when it is a DNS label).
func hostname(ep discoveryv1.Endpoint) *string {
	if ep.Hostname != nil && *ep.Hostname != "" {
		return ptr.To(*ep.Hostname)
	}
	if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" && len(validation.IsDNS1123Label(ep.TargetRef.Name)) == 0 {
		return ptr.To(ep.TargetRef.Name)
	}
	return nil
}

// importType maps a Service's type to the ServiceImport type it is exported as; ok is false
// for a Service that cannot be exported (ExternalName, per the KEP: it has no endpoints of
// its own to share).
func importType(svc *corev1.Service) (typ mcsv1beta1.ServiceImportType, ok bool) {
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
