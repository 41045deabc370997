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
	zone string // lower case, fully qualified
	ttl  uint32

	mu sync.RWMutex
	// services holds only services that have at least one name: a ClusterSetIP import without
	// ips yet, or a headless one without ready endpoints, is absent, so that its name is
	// NXDOMAIN (§2.4.1: "If there are no ready endpoints … the answer should be NXDOMAIN").
	services map[types.NamespacedName]*service
	// namespaces counts the services of each namespace in services, which makes
	// <ns>.svc.<zone> an empty non-terminal (NODATA) rather than NXDOMAIN.
	namespaces map[string]int
	endpoints  int    // ready endpoint addresses in services, for the size metric
	serial     uint32 // the SOA serial: bumped on every change
}

// NewIndex returns an empty index for zone (e.g. "clusterset.local.") whose records carry ttl.
func NewIndex(zone string, ttl uint32) *Index {
	return &Index{
		zone:       strings.ToLower(dns.Fqdn(zone)),
		ttl:        ttl,
		services:   map[types.NamespacedName]*service{},
		namespaces: map[string]int{},
	}
}

// service is the records of one imported service. It is immutable once built: queries read it
// outside the index lock, and the RRs are shared between responses (CoreDNS's cache plugin and
// the scrub writer copy before changing anything), so nothing may append to these slices.
type service struct {
	a, aaaa []dns.RR // for <svc>.<ns>.svc.<zone>
	// srv maps "_<port>._<proto>" to its SRV RRset, srvExtra to the A/AAAA of its targets.
	srv, srvExtra map[string][]dns.RR
	protos        map[string]bool // "_<proto>" labels under the service: empty non-terminals
	// hosts maps "<hostname>.<clusterid>" to its A/AAAA (headless services only, §2.4.1).
	hosts    map[string]hostRecords
	clusters map[string]bool // cluster IDs with hostnames: empty non-terminals
	nAddrs   int
}

type hostRecords struct{ a, aaaa []dns.RR }

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

// Lookup answers qname (in the zone, any case) of class IN and type qtype.
func (ix *Index) Lookup(qname string, qtype uint16) Result {
	qname = strings.ToLower(dns.Fqdn(qname))
	labels, ok := ix.relative(qname)
	ix.mu.RLock()
	r := nameError // not in the zone: the handler does not ask
	if ok {
		r = ix.lookup(qname, labels, qtype)
	}
	serial := ix.serial
	ix.mu.RUnlock()
	if len(r.Answer) == 0 {
		r.Ns = []dns.RR{ix.soa(serial)}
	}
	return r
}

// relative returns the labels of qname below the zone, leftmost first.
func (ix *Index) relative(qname string) ([]string, bool) {
	if qname == ix.zone {
		return nil, true
	}
	if !strings.HasSuffix(qname, "."+ix.zone) {
		return nil, false
	}
	rel := strings.TrimSuffix(qname, "."+ix.zone)
	if rel == "" {
		return nil, false
	}
	return dns.SplitDomainName(rel), true
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
			return Result{Rcode: dns.RcodeSuccess, Answer: []dns.RR{ix.soa(ix.serial)}}
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
	case 3: // <svc>.<ns>.svc.<zone>: §2.3.1, §2.4.1
		return addresses(qtype, s.a, s.aaaa)
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
		if strings.HasPrefix(labels[0], "_") { // _<port>._<proto>.<svc>…: §2.3.2, §2.4.2
			rrs, ok := s.srv[key]
			if !ok {
				return nameError
			}
			if qtype != dns.TypeSRV && qtype != dns.TypeANY {
				return noData
			}
			return Result{Rcode: dns.RcodeSuccess, Answer: rrs, Extra: s.srvExtra[key]}
		}
		h, ok := s.hosts[key] // <hostname>.<clusterid>.<svc>…: §2.4.1
		if !ok {
			return nameError
		}
		return addresses(qtype, h.a, h.aaaa)
	}
	return nameError
}

// addresses answers an address query at a name holding a and aaaa: NODATA for other types.
func addresses(qtype uint16, a, aaaa []dns.RR) Result {
	var rrs []dns.RR
	switch qtype {
	case dns.TypeA:
		rrs = a
	case dns.TypeAAAA:
		rrs = aaaa
	case dns.TypeANY:
		rrs = append(slices.Clip(a), aaaa...)
	}
	if len(rrs) == 0 {
		return noData
	}
	return Result{Rcode: dns.RcodeSuccess, Answer: rrs}
}

func (ix *Index) hdr(name string, rrtype uint16) dns.RR_Header {
	return hdr(name, rrtype, ix.ttl)
}

func hdr(name string, rrtype uint16, ttl uint32) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: rrtype, Class: dns.ClassINET, Ttl: ttl}
}

// soa is the zone's SOA. Its minimum (the negative-caching TTL, RFC 2308 §4) is the records'
// TTL, so that a name that appears is not hidden by a cached NXDOMAIN for longer than a changed
// answer would be.
func (ix *Index) soa(serial uint32) dns.RR {
	return &dns.SOA{
		Hdr:     ix.hdr(ix.zone, dns.TypeSOA),
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
	s := &service{srv: map[string][]dns.RR{}, srvExtra: map[string][]dns.RR{}, protos: map[string]bool{}}
	// targets are the names SRV records point at, with their address records.
	type target struct {
		name    string
		a, aaaa []dns.RR
	}
	var targets []target

	if si.Spec.Type == mcsv1beta1.Headless {
		s.hosts, s.clusters = map[string]hostRecords{}, map[string]bool{}
		var all addrSet
		hosts := map[string]*addrSet{} // "<hostname>.<clusterid>" → addresses
		var hostOrder []string
		for _, sl := range eps {
			if sl == nil || sl.Namespace != key.Namespace || sl.Labels[mcsv1beta1.LabelServiceName] != key.Name {
				continue
			}
			cluster := strings.ToLower(sl.Labels[mcsv1beta1.LabelSourceCluster])
			// A cluster ID that is not one DNS label cannot name records (§2.1 requires a
			// valid DNS label); its endpoints still count for the service name.
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
		s.a, s.aaaa = all.rrs(name, ttl)
		s.nAddrs = len(all.v4) + len(all.v6)
		slices.Sort(hostOrder) // stable answers, whatever order the slices came in
		for _, k := range hostOrder {
			hn := k + "." + name
			a, aaaa := hosts[k].rrs(hn, ttl)
			s.hosts[k] = hostRecords{a: a, aaaa: aaaa}
			targets = append(targets, target{name: hn, a: a, aaaa: aaaa})
		}
	} else { // ClusterSetIP (the default type)
		var ips addrSet
		for _, ip := range si.Spec.IPs {
			if addr, err := netip.ParseAddr(ip); err == nil && addr.Zone() == "" {
				ips.add(addr.Unmap())
			}
		}
		if ips.empty() {
			return nil // not reachable yet: the import has no clusterset IP
		}
		s.a, s.aaaa = ips.rrs(name, ttl)
		s.nAddrs = len(ips.v4) + len(ips.v6)
		targets = []target{{name: name, a: s.a, aaaa: s.aaaa}}
	}

	// SRV: one per named port (unnamed ports have none) and target. Priority and weight are not
	// prescribed (§2.3.2, §2.4.2): all targets get priority 0 and an equal share of weight, as
	// the kubernetes plugin does.
	weight := uint16(100 / max(len(targets), 1))
	for _, p := range si.Spec.Ports {
		if p.Name == "" || !isLabel("_"+strings.ToLower(p.Name)) || p.Port < 1 || p.Port > 65535 {
			continue
		}
		proto := "_" + strings.ToLower(string(protocolOrTCP(p.Protocol)))
		key := "_" + strings.ToLower(p.Name) + "." + proto
		owner := key + "." + name
		if _, dup := s.srv[key]; dup {
			continue
		}
		rrs := make([]dns.RR, 0, len(targets))
		var extra []dns.RR
		for _, t := range targets {
			rrs = append(rrs, &dns.SRV{Hdr: hdr(owner, dns.TypeSRV, ttl), Priority: 0, Weight: weight, Port: uint16(p.Port), Target: t.name})
			extra = append(extra, t.a...)
			extra = append(extra, t.aaaa...)
		}
		s.srv[key], s.srvExtra[key] = rrs, extra
		s.protos[proto] = true
	}
	return s
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
