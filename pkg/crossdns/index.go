package crossdns

import (
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// SchemaVersion is the version of the MCS DNS specification (KEP-1645 specification.md §1)
// these records follow, served as dns-version.<zone> TXT (§2.2).
const SchemaVersion = "1.0.0"

// Name labels with a meaning in the zone.
const (
	labelVersion = "dns-version"
	labelSvc     = "svc"
)

// Index holds the records of every imported service, computed once per change of its
// ServiceImport or EndpointSlices, so that a query is a map lookup under a read lock and never
// a call to the API server. The zero value is not usable; see NewIndex.
type Index struct {
	zone    string   // lower case, fully qualified
	reverse []string // reverse zones (under in-addr.arpa. or ip6.arpa.) it answers PTR in
	ttl     uint32

	mu sync.RWMutex
	// services holds only services that have at least one name: a ClusterSetIP import without
	// ips yet, or a headless one without ready endpoints, is absent, so that its name is
	// NXDOMAIN (§2.4.1: "If there are no ready endpoints … the answer should be NXDOMAIN").
	services map[types.NamespacedName]*service
	// namespaces counts the services of each namespace in services, which makes
	// <ns>.svc.<zone> an empty non-terminal (NODATA) rather than NXDOMAIN.
	namespaces map[string]int
	// ptrs maps each ready headless endpoint address to the name each service gives it, for
	// the PTR records of §2.4.3.
	ptrs      map[netip.Addr]map[types.NamespacedName]string
	endpoints int    // ready endpoint addresses in services, for the size metric
	serial    uint32 // the SOA serial: bumped on every change
}

// NewIndex returns an empty index for zone (e.g. "clusterset.local.") whose records carry ttl.
// It also answers the PTR records of headless endpoints in the reverse zones given, which must
// be in-addr.arpa., ip6.arpa. or zones below them (see ReverseZone).
func NewIndex(zone string, ttl uint32, reverse ...string) *Index {
	ix := &Index{
		zone:       strings.ToLower(dns.Fqdn(zone)),
		ttl:        ttl,
		services:   map[types.NamespacedName]*service{},
		namespaces: map[string]int{},
		ptrs:       map[netip.Addr]map[types.NamespacedName]string{},
	}
	for _, z := range reverse {
		ix.reverse = append(ix.reverse, strings.ToLower(dns.Fqdn(z)))
	}
	return ix
}

// service is the records of one imported service. It is immutable once built: queries read it
// outside the index lock, and the RRs are shared between responses (CoreDNS's cache plugin and
// the scrub writer copy before changing anything), so nothing may append to these slices.
type service struct {
	name node // <svc>.<ns>.svc.<zone>
	// ports maps "_<port>._<proto>" to the SRV RRset of that named port (§2.3.2, §2.4.2).
	ports  map[string]node
	protos map[string]bool // "_<proto>" labels under the service: empty non-terminals
	// hosts maps "<hostname>.<clusterid>" to its records (headless services only, §2.4.1).
	hosts    map[string]node
	clusters map[string]bool // cluster IDs with hostnames: empty non-terminals
	// ptrs maps each ready endpoint address with a name to that name (headless only, §2.4.3).
	ptrs   map[netip.Addr]string
	nAddrs int
}

// node is the records at one name: its addresses and its SRV RRset, with the addresses of the
// SRV targets for the additional section.
type node struct {
	a, aaaa       []dns.RR
	srv, srvExtra []dns.RR
}

// Set replaces the records of the service key with those of si and its imported slices; a nil
// si removes them. slices must be the EndpointSlices labelled with key's service name in key's
// namespace; slices of other services are ignored.
func (ix *Index) Set(key types.NamespacedName, si *mcsv1beta1.ServiceImport, slices []*discoveryv1.EndpointSlice) {
	var s *service
	if si != nil {
		s = buildService(ix.zone, ix.ttl, key, si, slices)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	old := ix.services[key]
	if old == nil && s == nil {
		return
	}
	ix.serial++
	if old != nil {
		ix.endpoints -= old.nAddrs
		for addr := range old.ptrs {
			if delete(ix.ptrs[addr], key); len(ix.ptrs[addr]) == 0 {
				delete(ix.ptrs, addr)
			}
		}
		if s == nil {
			delete(ix.services, key)
			if ix.namespaces[key.Namespace]--; ix.namespaces[key.Namespace] <= 0 {
				delete(ix.namespaces, key.Namespace)
			}
			return
		}
	} else {
		ix.namespaces[key.Namespace]++
	}
	ix.services[key] = s
	ix.endpoints += s.nAddrs
	for addr, name := range s.ptrs {
		if ix.ptrs[addr] == nil {
			ix.ptrs[addr] = map[types.NamespacedName]string{}
		}
		ix.ptrs[addr][key] = name
	}
}

// Size returns how many services have names and how many endpoint addresses they hold.
func (ix *Index) Size() (services, endpoints int) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.services), ix.endpoints
}

// Zone returns the zone the index answers for, fully qualified and in lower case.
func (ix *Index) Zone() string { return ix.zone }

// Result is the answer to one question: the rcode (NOERROR or NXDOMAIN) and the sections. Ns is
// set for negative answers (NXDOMAIN and NODATA): the zone's SOA, as RFC 2308 §3 asks.
type Result struct {
	Rcode  int
	Answer []dns.RR
	Extra  []dns.RR
	Ns     []dns.RR
}

// Lookup answers qname (in the zone or one of the reverse zones, any case) of class IN and
// type qtype.
func (ix *Index) Lookup(qname string, qtype uint16) Result {
	qname = strings.ToLower(dns.Fqdn(qname))
	zone := ix.zoneOf(qname)
	ix.mu.RLock()
	var r Result
	switch zone {
	case "":
		r, zone = nameError, ix.zone // not in a zone of ours: the handler does not ask
	case ix.zone:
		r = ix.lookup(qname, ix.relative(qname), qtype)
	default:
		r = ix.lookupReverse(zone, qname, qtype)
	}
	serial := ix.serial
	ix.mu.RUnlock()
	if len(r.Answer) == 0 {
		r.Ns = []dns.RR{ix.soa(zone, serial)}
	}
	return r
}

// zoneOf returns the most specific of the index's zones that holds qname, "" for none.
func (ix *Index) zoneOf(qname string) string {
	if inZone(qname, ix.zone) {
		return ix.zone
	}
	best := ""
	for _, z := range ix.reverse {
		if inZone(qname, z) && len(z) > len(best) {
			best = z
		}
	}
	return best
}

// inZone reports whether name is zone or below it; both are fully qualified and lower case.
func inZone(name, zone string) bool {
	return name == zone || strings.HasSuffix(name, zone) && name[len(name)-len(zone)-1] == '.'
}

// relative returns the labels of qname, a name in the zone, below the zone, leftmost first.
func (ix *Index) relative(qname string) []string {
	if qname == ix.zone {
		return nil
	}
	return dns.SplitDomainName(strings.TrimSuffix(qname, "."+ix.zone))
}

var (
	noData     = Result{Rcode: dns.RcodeSuccess}
	nameError  = Result{Rcode: dns.RcodeNameError}
	txtVersion = []string{SchemaVersion}
)

// lookup walks the names the specification defines, from the zone down. The caller holds the
// read lock.
func (ix *Index) lookup(qname string, labels []string, qtype uint16) Result {
	n := len(labels)
	switch n {
	case 0: // the apex holds only the SOA
		if qtype == dns.TypeSOA || qtype == dns.TypeANY {
			return Result{Rcode: dns.RcodeSuccess, Answer: []dns.RR{ix.soa(ix.zone, ix.serial)}}
		}
		return noData
	case 1:
		switch labels[0] {
		case labelVersion: // §2.2
			if qtype == dns.TypeTXT || qtype == dns.TypeANY {
				return Result{Rcode: dns.RcodeSuccess, Answer: []dns.RR{&dns.TXT{Hdr: ix.hdr(qname, dns.TypeTXT), Txt: txtVersion}}}
			}
			return noData
		case labelSvc:
			if len(ix.services) > 0 {
				return noData // an empty non-terminal above the services
			}
		}
		return nameError
	}
	if labels[n-1] != labelSvc {
		return nameError
	}
	ns := labels[n-2]
	if n == 2 {
		if ix.namespaces[ns] > 0 {
			return noData
		}
		return nameError
	}
	s := ix.services[types.NamespacedName{Namespace: ns, Name: labels[n-3]}]
	if s == nil {
		return nameError
	}
	switch n {
	case 3: // <svc>.<ns>.svc.<zone>: §2.3.1, §2.4.1, and SRV as the kubernetes plugin answers it
		return s.name.answer(qtype)
	case 4:
		// _<proto>.<svc>… is an empty non-terminal above the SRV records. <clusterid>.<svc>…
		// has no address records of its own (§2.3.4, §2.4.4 forbid them) but, for a headless
		// service, names below it: an empty non-terminal (NODATA, RFC 8020 forbids NXDOMAIN
		// there); for a ClusterSetIP service nothing is below it, so it does not exist.
		if s.protos[labels[0]] || s.clusters[labels[0]] {
			return noData
		}
		return nameError
	case 5:
		key := labels[0] + "." + labels[1]
		nd, ok := s.hosts[key] // <hostname>.<clusterid>.<svc>…: §2.4.1
		if strings.HasPrefix(labels[0], "_") {
			nd, ok = s.ports[key] // _<port>._<proto>.<svc>…: §2.3.2, §2.4.2
		}
		if !ok {
			return nameError
		}
		return nd.answer(qtype)
	}
	return nameError
}

// answer answers a query for qtype at the name holding nd: NODATA for types it does not hold.
// ANY gets the addresses, or at a name without any (_<port>._<proto>) the SRV RRset: RFC 8482
// §4.2 lets a server answer ANY with a subset of the RRsets.
func (nd node) answer(qtype uint16) Result {
	var rrs, extra []dns.RR
	switch qtype {
	case dns.TypeA:
		rrs = nd.a
	case dns.TypeAAAA:
		rrs = nd.aaaa
	case dns.TypeSRV:
		rrs, extra = nd.srv, nd.srvExtra
	case dns.TypeANY:
		if rrs = slices.Concat(nd.a, nd.aaaa); len(rrs) == 0 {
			rrs, extra = nd.srv, nd.srvExtra
		}
	}
	if len(rrs) == 0 {
		return noData
	}
	return Result{Rcode: dns.RcodeSuccess, Answer: rrs, Extra: extra}
}

func (ix *Index) hdr(name string, rrtype uint16) dns.RR_Header {
	return hdr(name, rrtype, ix.ttl)
}

func hdr(name string, rrtype uint16, ttl uint32) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: rrtype, Class: dns.ClassINET, Ttl: ttl}
}

// soa is the SOA of zone, one of the index's zones. Its minimum (the negative-caching TTL,
// RFC 2308 §4) is the records' TTL, so that a name that appears is not hidden by a cached
// NXDOMAIN for longer than a changed answer would be.
func (ix *Index) soa(zone string, serial uint32) dns.RR {
	return &dns.SOA{
		Hdr:     ix.hdr(zone, dns.TypeSOA),
		Ns:      "ns.dns." + ix.zone,
		Mbox:    "hostmaster." + ix.zone,
		Serial:  serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  ix.ttl,
	}
}

// buildService computes the records of one ServiceImport and its slices; nil when the service
// has no name to answer for.
func buildService(zone string, ttl uint32, key types.NamespacedName, si *mcsv1beta1.ServiceImport, eps []*discoveryv1.EndpointSlice) *service {
	name := key.Name + "." + key.Namespace + "." + labelSvc + "." + zone
	s := &service{ports: map[string]node{}, protos: map[string]bool{}}
	var targets []target
	if answeredByEndpoints(si) {
		targets = s.setEndpoints(name, ttl, key, eps)
	} else { // ClusterSetIP (the default type)
		targets = s.setClusterSetIPs(name, ttl, si.Spec.IPs)
	}
	if s.nAddrs == 0 {
		// A headless service without ready endpoints (§2.4.1), or an import that has no
		// clusterset IP yet: not reachable, no name.
		return nil
	}
	s.setSRV(name, ttl, si.Spec.Ports, targets)
	return s
}

// answeredByEndpoints reports whether the name of si is answered with its ready endpoints
// (and the names below it with theirs), rather than with its clusterset IPs: a headless
// import, or a ClusterSetIP import of a cluster on the secondary network. That one has no
// virtual IP, since its pods reach other clusters only over their net1 interface and a
// ClusterIP lives on the primary network; Octopus's import controller marks it
// (v1alpha1.AddressingAnnotation=secondary) and DNS balances instead (docs/architecture.md §6c).
func answeredByEndpoints(si *mcsv1beta1.ServiceImport) bool {
	return si.Spec.Type == mcsv1beta1.Headless ||
		si.Annotations[v1alpha1.AddressingAnnotation] == string(v1alpha1.AddressingSecondary)
}

// target is a name SRV records point at, with its address records.
type target struct {
	name    string
	a, aaaa []dns.RR
}

// setClusterSetIPs sets the addresses of a ClusterSetIP service (§2.3.1) and returns the one
// SRV target: the service name.
func (s *service) setClusterSetIPs(name string, ttl uint32, ips []string) []target {
	var set addrSet
	for _, ip := range ips {
		if addr, err := netip.ParseAddr(ip); err == nil && addr.Zone() == "" {
			set.add(addr.Unmap())
		}
	}
	if set.empty() {
		return nil
	}
	s.name.a, s.name.aaaa = set.rrs(name, ttl)
	s.nAddrs = len(set.v4) + len(set.v6)
	return []target{{name: name, a: s.name.a, aaaa: s.name.aaaa}}
}

// setEndpoints sets the records of a headless service's ready endpoints (§2.4.1, §2.4.3) and
// returns the SRV targets: the endpoints' names, sorted.
func (s *service) setEndpoints(name string, ttl uint32, key types.NamespacedName, eps []*discoveryv1.EndpointSlice) []target {
	s.hosts, s.clusters, s.ptrs = map[string]node{}, map[string]bool{}, map[netip.Addr]string{}
	var all addrSet
	hosts := map[string]*addrSet{} // "<hostname>.<clusterid>" → addresses
	var hostOrder []string
	for _, sl := range eps {
		if sl == nil || sl.Namespace != key.Namespace || sl.Labels[mcsv1beta1.LabelServiceName] != key.Name {
			continue
		}
		cluster := strings.ToLower(sl.Labels[mcsv1beta1.LabelSourceCluster])
		// A cluster ID that is not one DNS label cannot name records (§2.1 requires a valid DNS
		// label); its endpoints still count for the service name.
		clusterOK := isLabel(cluster)
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue // §2.4: only ready endpoints have records; nil means ready
			}
			for _, a := range ep.Addresses {
				addr, err := netip.ParseAddr(a)
				if err != nil || addr.Zone() != "" {
					continue
				}
				addr = addr.Unmap()
				all.add(addr)
				if !clusterOK {
					continue
				}
				host := endpointHostname(ep.Hostname, addr)
				if !isLabel(host) {
					continue
				}
				k := host + "." + cluster
				if hosts[k] == nil {
					hosts[k] = &addrSet{}
					hostOrder = append(hostOrder, k)
				}
				hosts[k].add(addr)
				s.clusters[cluster] = true
			}
		}
	}
	if all.empty() {
		return nil
	}
	s.name.a, s.name.aaaa = all.rrs(name, ttl)
	s.nAddrs = len(all.v4) + len(all.v6)
	slices.Sort(hostOrder) // stable answers, whatever order the slices came in
	targets := make([]target, 0, len(hostOrder))
	for _, k := range hostOrder {
		hn := k + "." + name
		a, aaaa := hosts[k].rrs(hn, ttl)
		s.hosts[k] = node{a: a, aaaa: aaaa}
		targets = append(targets, target{name: hn, a: a, aaaa: aaaa})
		// One PTR per address (§2.4.3, "only one PTR record may exist per IP address"): an
		// address with several names (two clusters reporting it) gets the first in order.
		for _, addr := range slices.Concat(hosts[k].v4, hosts[k].v6) {
			if _, named := s.ptrs[addr]; !named {
				s.ptrs[addr] = hn
			}
		}
	}
	return targets
}

// setSRV sets the SRV records of ports pointing at targets. Priority and weight are not
// prescribed (§2.3.2, §2.4.2): every record has priority 0 and an equal share of 100 as
// weight, at least 1, as the kubernetes plugin gives them. Every SRV RRset of the service
// points at the same targets, so they share one additional section.
func (s *service) setSRV(name string, ttl uint32, ports []mcsv1beta1.ServicePort, targets []target) {
	if len(targets) == 0 {
		return
	}
	var extra []dns.RR
	for _, t := range targets {
		extra = append(extra, t.a...)
		extra = append(extra, t.aaaa...)
	}
	// numbers are the distinct port numbers: the SRV records at the service name and at each
	// endpoint name, where the kubernetes plugin answers one per port, named or not (the
	// owner name says nothing of the port, so none is needed), and an RRset holds no
	// duplicates (RFC 2181 §5) when two protocols share a number.
	var numbers []uint16
	for _, p := range ports {
		if p.Port < 1 || p.Port > 65535 {
			continue
		}
		number := uint16(p.Port)
		if !slices.Contains(numbers, number) {
			numbers = append(numbers, number)
		}
		// _<port>._<proto>: named ports only (§2.3.2, §2.4.2: "Unnamed ports do not have an
		// SRV record").
		label := "_" + strings.ToLower(p.Name)
		if p.Name == "" || !isLabel(label) {
			continue
		}
		proto := "_" + strings.ToLower(string(protocolOrTCP(p.Protocol)))
		key := label + "." + proto
		if _, dup := s.ports[key]; dup {
			continue
		}
		s.ports[key] = node{srv: srvSet(key+"."+name, ttl, []uint16{number}, targets), srvExtra: extra}
		s.protos[proto] = true
	}
	s.name.srv, s.name.srvExtra = srvSet(name, ttl, numbers, targets), extra
	for k, h := range s.hosts {
		hn := k + "." + name
		h.srv = srvSet(hn, ttl, numbers, []target{{name: hn}})
		h.srvExtra = slices.Concat(h.a, h.aaaa)
		s.hosts[k] = h
	}
}

// srvSet returns the SRV RRset at owner for every target and port, in that order.
func srvSet(owner string, ttl uint32, ports []uint16, targets []target) []dns.RR {
	n := len(ports) * len(targets)
	if n == 0 {
		return nil
	}
	weight := uint16(max(1, 100/n))
	rrs := make([]dns.RR, 0, n)
	for _, t := range targets {
		for _, port := range ports {
			rrs = append(rrs, &dns.SRV{Hdr: hdr(owner, dns.TypeSRV, ttl), Priority: 0, Weight: weight, Port: port, Target: t.name})
		}
	}
	return rrs
}

func protocolOrTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// endpointHostname is the endpoint's hostname (§2.1: its hostname field first), else a
// system-assigned identifier unique in its cluster: the address with dashes, as the kubernetes
// plugin names endpoints without a hostname (IPv6 in its full form, so that the label neither
// starts nor ends with a dash).
func endpointHostname(hostname *string, addr netip.Addr) string {
	if hostname != nil && *hostname != "" {
		return strings.ToLower(*hostname)
	}
	if addr.Is4() {
		return strings.ReplaceAll(addr.String(), ".", "-")
	}
	return strings.ReplaceAll(addr.StringExpanded(), ":", "-")
}

// isLabel reports whether s is one DNS label we can serve: 1-63 characters of letters, digits,
// '-' and '_' (the API validates hostnames and names; cluster IDs come from a label value).
func isLabel(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// addrSet collects distinct addresses per family in insertion order: an RRset holds no
// duplicates (RFC 2181 §5), even when two clusters report the same address.
type addrSet struct {
	v4, v6 []netip.Addr
	seen   map[netip.Addr]struct{} // a headless service may have thousands of endpoints
}

func (s *addrSet) add(a netip.Addr) {
	if _, dup := s.seen[a]; dup {
		return
	}
	if s.seen == nil {
		s.seen = map[netip.Addr]struct{}{}
	}
	s.seen[a] = struct{}{}
	if a.Is4() {
		s.v4 = append(s.v4, a)
	} else {
		s.v6 = append(s.v6, a)
	}
}

func (s *addrSet) empty() bool { return len(s.v4)+len(s.v6) == 0 }

func (s *addrSet) rrs(name string, ttl uint32) (a, aaaa []dns.RR) {
	for _, ip := range s.v4 {
		a = append(a, &dns.A{Hdr: hdr(name, dns.TypeA, ttl), A: ip.AsSlice()})
	}
	for _, ip := range s.v6 {
		aaaa = append(aaaa, &dns.AAAA{Hdr: hdr(name, dns.TypeAAAA, ttl), AAAA: ip.AsSlice()})
	}
	return a, aaaa
}
