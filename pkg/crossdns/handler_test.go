package crossdns

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// staticSource is an index whose sync state the test sets.
type staticSource struct {
	*Index
	synced bool
}

func (s *staticSource) HasSynced() bool { return s.synced }

func serviceImport(ns, name string, typ mcsv1beta1.ServiceImportType, ips []string, ports ...mcsv1beta1.ServicePort) *mcsv1beta1.ServiceImport {
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: typ, IPs: ips, Ports: ports},
	}
}

type ep struct {
	addr, hostname string
	ready          *bool
}

func slice(ns, svc, cluster, name string, family discoveryv1.AddressType, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			mcsv1beta1.LabelServiceName: svc, mcsv1beta1.LabelSourceCluster: cluster,
		}},
		AddressType: family,
	}
	for _, e := range eps {
		de := discoveryv1.Endpoint{Addresses: []string{e.addr}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.hostname != "" {
			de.Hostname = ptr.To(e.hostname)
		}
		s.Endpoints = append(s.Endpoints, de)
	}
	return s
}

// zones are the zones of the handler under test: the clusterset zone and both reverse trees.
var zones = []string{"clusterset.local.", "in-addr.arpa.", "ip6.arpa."}

// fixture fills an index with the services the table below queries.
func fixture() *Index {
	ix := NewIndex("clusterset.local", 5, "in-addr.arpa.", "ip6.arpa.")
	ix.Set(types.NamespacedName{Namespace: "shop", Name: "web"}, serviceImport("shop", "web", mcsv1beta1.ClusterSetIP,
		[]string{"10.200.0.10", "fd00:200::a"},
		mcsv1beta1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		mcsv1beta1.ServicePort{Port: 9090}, // unnamed: no _<port>._<proto> SRV
		mcsv1beta1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		mcsv1beta1.ServicePort{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
	), nil)
	db := types.NamespacedName{Namespace: "shop", Name: "db"}
	ix.Set(db, serviceImport("shop", "db", mcsv1beta1.Headless, nil,
		mcsv1beta1.ServicePort{Name: "pg", Port: 5432},
		mcsv1beta1.ServicePort{Port: 8080}, // unnamed
	), []*discoveryv1.EndpointSlice{
		slice("shop", "db", "east", "db-east", discoveryv1.AddressTypeIPv4,
			ep{addr: "10.100.0.2", hostname: "db-0"},
			ep{addr: "10.100.0.3", ready: ptr.To(true)},
			ep{addr: "10.100.0.4", hostname: "db-9", ready: ptr.To(false)}),
		slice("shop", "db", "west", "db-west-4", discoveryv1.AddressTypeIPv4, ep{addr: "10.101.0.2", hostname: "db-0"}),
		slice("shop", "db", "west", "db-west-6", discoveryv1.AddressTypeIPv6, ep{addr: "fd00:101::2", hostname: "db-0"}),
		// Another service's slice handed over by mistake must not leak in.
		slice("shop", "other", "west", "other-west", discoveryv1.AddressTypeIPv4, ep{addr: "10.101.0.99", hostname: "x"}),
	})
	// Names that must not exist: a headless service without ready endpoints, a ClusterSetIP
	// import that has no IP yet.
	ix.Set(types.NamespacedName{Namespace: "idle", Name: "cold"}, serviceImport("idle", "cold", mcsv1beta1.Headless, nil),
		[]*discoveryv1.EndpointSlice{slice("idle", "cold", "east", "cold-east", discoveryv1.AddressTypeIPv4, ep{addr: "10.100.1.1", ready: ptr.To(false)})})
	ix.Set(types.NamespacedName{Namespace: "idle", Name: "new"}, serviceImport("idle", "new", mcsv1beta1.ClusterSetIP, nil), nil)
	return ix
}

const (
	soa    = "clusterset.local. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. 1 7200 1800 86400 5"
	soaIP4 = "in-addr.arpa. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. 1 7200 1800 86400 5"
	soaIP6 = "ip6.arpa. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. 1 7200 1800 86400 5"
)

// reverse returns the reverse name of addr.
func reverse(addr string) string {
	name, err := dns.ReverseAddr(addr)
	if err != nil {
		panic(err)
	}
	return name
}

func TestServeDNS(t *testing.T) {
	neg, neg4, neg6 := []dns.RR{test.SOA(soa)}, []dns.RR{test.SOA(soaIP4)}, []dns.RR{test.SOA(soaIP6)}
	webAddrs := []dns.RR{test.A("web.shop.svc.clusterset.local. 5 IN A 10.200.0.10"), test.AAAA("web.shop.svc.clusterset.local. 5 IN AAAA fd00:200::a")}
	webSRV := []dns.RR{ // at the service name: one per port number
		test.SRV("web.shop.svc.clusterset.local. 5 IN SRV 0 33 53 web.shop.svc.clusterset.local."),
		test.SRV("web.shop.svc.clusterset.local. 5 IN SRV 0 33 80 web.shop.svc.clusterset.local."),
		test.SRV("web.shop.svc.clusterset.local. 5 IN SRV 0 33 9090 web.shop.svc.clusterset.local."),
	}
	httpSRV := []dns.RR{test.SRV("_http._tcp.web.shop.svc.clusterset.local. 5 IN SRV 0 100 80 web.shop.svc.clusterset.local.")}
	dbTargets := []dns.RR{ // the addresses of the headless service's SRV targets
		test.A("10-100-0-3.east.db.shop.svc.clusterset.local. 5 IN A 10.100.0.3"),
		test.A("db-0.east.db.shop.svc.clusterset.local. 5 IN A 10.100.0.2"),
		test.A("db-0.west.db.shop.svc.clusterset.local. 5 IN A 10.101.0.2"),
		test.AAAA("db-0.west.db.shop.svc.clusterset.local. 5 IN AAAA fd00:101::2"),
	}
	cases := []struct {
		name string
		test.Case
	}{
		{"schema version (§2.2)", test.Case{Qname: "dns-version.clusterset.local.", Qtype: dns.TypeTXT,
			Answer: []dns.RR{test.TXT(`dns-version.clusterset.local. 5 IN TXT "1.0.0"`)}}},
		{"schema version, any case", test.Case{Qname: "DNS-Version.ClusterSet.Local.", Qtype: dns.TypeTXT,
			Answer: []dns.RR{test.TXT(`dns-version.clusterset.local. 5 IN TXT "1.0.0"`)}}},
		{"schema version has no address", test.Case{Qname: "dns-version.clusterset.local.", Qtype: dns.TypeA, Ns: neg}},
		{"apex SOA", test.Case{Qname: "clusterset.local.", Qtype: dns.TypeSOA, Answer: []dns.RR{test.SOA(soa)}}},
		{"apex NS: NODATA", test.Case{Qname: "clusterset.local.", Qtype: dns.TypeNS, Ns: neg}},

		// ClusterSetIP (§2.3).
		{"ClusterSetIP A (§2.3.1)", test.Case{Qname: "web.shop.svc.clusterset.local.", Qtype: dns.TypeA, Answer: webAddrs[:1]}},
		{"ClusterSetIP AAAA, dual-stack (§2.3.1)", test.Case{Qname: "web.shop.svc.clusterset.local.", Qtype: dns.TypeAAAA, Answer: webAddrs[1:]}},
		{"ClusterSetIP, any case", test.Case{Qname: "WEB.Shop.SVC.clusterset.LOCAL.", Qtype: dns.TypeA, Answer: webAddrs[:1]}},
		{"ClusterSetIP ANY: the addresses", test.Case{Qname: "web.shop.svc.clusterset.local.", Qtype: dns.TypeANY, Answer: webAddrs}},
		{"ClusterSetIP TXT: NODATA", test.Case{Qname: "web.shop.svc.clusterset.local.", Qtype: dns.TypeTXT, Ns: neg}},
		{"ClusterSetIP SRV at the service name: one per port number, unnamed too", test.Case{Qname: "web.shop.svc.clusterset.local.", Qtype: dns.TypeSRV,
			Answer: webSRV, Extra: webAddrs}},
		{"ClusterSetIP SRV at the service name, any case", test.Case{Qname: "Web.SHOP.svc.clusterset.local.", Qtype: dns.TypeSRV,
			Answer: webSRV, Extra: webAddrs}},
		{"ClusterSetIP SRV, named TCP port (§2.3.2)", test.Case{Qname: "_http._tcp.web.shop.svc.clusterset.local.", Qtype: dns.TypeSRV,
			Answer: httpSRV, Extra: webAddrs}},
		{"ClusterSetIP SRV, named port, any case", test.Case{Qname: "_HTTP._Tcp.web.shop.svc.clusterset.local.", Qtype: dns.TypeSRV,
			Answer: httpSRV, Extra: webAddrs}},
		{"ClusterSetIP SRV, UDP port (§2.3.2)", test.Case{Qname: "_dns._udp.web.shop.svc.clusterset.local.", Qtype: dns.TypeSRV,
			Answer: []dns.RR{test.SRV("_dns._udp.web.shop.svc.clusterset.local. 5 IN SRV 0 100 53 web.shop.svc.clusterset.local.")},
			Extra:  webAddrs}},
		{"ClusterSetIP SRV, the same number over TCP", test.Case{Qname: "_dns-tcp._tcp.web.shop.svc.clusterset.local.", Qtype: dns.TypeSRV,
			Answer: []dns.RR{test.SRV("_dns-tcp._tcp.web.shop.svc.clusterset.local. 5 IN SRV 0 100 53 web.shop.svc.clusterset.local.")},
			Extra:  webAddrs}},
		{"ClusterSetIP SRV name, ANY: the SRV", test.Case{Qname: "_http._tcp.web.shop.svc.clusterset.local.", Qtype: dns.TypeANY,
			Answer: httpSRV, Extra: webAddrs}},
		{"SRV name, A query: NODATA", test.Case{Qname: "_http._tcp.web.shop.svc.clusterset.local.", Qtype: dns.TypeA, Ns: neg}},
		{"a port on the wrong protocol", test.Case{Qname: "_http._udp.web.shop.svc.clusterset.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: neg}},
		{"_tcp is an empty non-terminal", test.Case{Qname: "_tcp.web.shop.svc.clusterset.local.", Qtype: dns.TypeSRV, Ns: neg}},
		{"_udp is an empty non-terminal", test.Case{Qname: "_udp.web.shop.svc.clusterset.local.", Qtype: dns.TypeSRV, Ns: neg}},
		{"a protocol without named ports", test.Case{Qname: "_sctp.web.shop.svc.clusterset.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: neg}},
		{"unnamed port has no _<port> SRV (§2.3.2)", test.Case{Qname: "_9090._tcp.web.shop.svc.clusterset.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: neg}},
		{"no per-cluster name for ClusterSetIP (§2.3.4)", test.Case{Qname: "east.web.shop.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: neg}},
		{"no hostnames for ClusterSetIP", test.Case{Qname: "db-0.east.web.shop.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: neg}},
		{"no PTR for a ClusterSetIP (§2.3.3 Limitations)", test.Case{Qname: reverse("10.200.0.10"), Qtype: dns.TypePTR, Rcode: dns.RcodeNameError, Ns: neg4}},
		{"no PTR for an IPv6 ClusterSetIP (§2.3.3 Limitations)", test.Case{Qname: reverse("fd00:200::a"), Qtype: dns.TypePTR, Rcode: dns.RcodeNameError, Ns: neg6}},

		// Headless (§2.4).
		{"headless A: ready endpoints of all clusters (§2.4.1)", test.Case{Qname: "db.shop.svc.clusterset.local.", Qtype: dns.TypeA,
			Answer: []dns.RR{
				test.A("db.shop.svc.clusterset.local. 5 IN A 10.100.0.2"),
				test.A("db.shop.svc.clusterset.local. 5 IN A 10.100.0.3"),
				test.A("db.shop.svc.clusterset.local. 5 IN A 10.101.0.2"),
			}}},
		{"headless AAAA (§2.4.1)", test.Case{Qname: "db.shop.svc.clusterset.local.", Qtype: dns.TypeAAAA,
			Answer: []dns.RR{test.AAAA("db.shop.svc.clusterset.local. 5 IN AAAA fd00:101::2")}}},
		{"headless, any case", test.Case{Qname: "DB.shop.svc.clusterset.local.", Qtype: dns.TypeAAAA,
			Answer: []dns.RR{test.AAAA("db.shop.svc.clusterset.local. 5 IN AAAA fd00:101::2")}}},
		{"headless hostname in east", test.Case{Qname: "db-0.east.db.shop.svc.clusterset.local.", Qtype: dns.TypeA,
			Answer: []dns.RR{test.A("db-0.east.db.shop.svc.clusterset.local. 5 IN A 10.100.0.2")}}},
		{"headless hostname in east, no AAAA", test.Case{Qname: "db-0.east.db.shop.svc.clusterset.local.", Qtype: dns.TypeAAAA, Ns: neg}},
		{"headless hostname in west, A", test.Case{Qname: "db-0.west.db.shop.svc.clusterset.local.", Qtype: dns.TypeA,
			Answer: []dns.RR{test.A("db-0.west.db.shop.svc.clusterset.local. 5 IN A 10.101.0.2")}}},
		{"headless hostname in west, AAAA", test.Case{Qname: "db-0.west.db.shop.svc.clusterset.local.", Qtype: dns.TypeAAAA,
			Answer: []dns.RR{test.AAAA("db-0.west.db.shop.svc.clusterset.local. 5 IN AAAA fd00:101::2")}}},
		{"headless hostname, any case", test.Case{Qname: "DB-0.West.db.shop.svc.clusterset.local.", Qtype: dns.TypeA,
			Answer: []dns.RR{test.A("db-0.west.db.shop.svc.clusterset.local. 5 IN A 10.101.0.2")}}},
		{"endpoint without hostname: system-assigned name (§2.1)", test.Case{Qname: "10-100-0-3.east.db.shop.svc.clusterset.local.", Qtype: dns.TypeA,
			Answer: []dns.RR{test.A("10-100-0-3.east.db.shop.svc.clusterset.local. 5 IN A 10.100.0.3")}}},
		{"unready endpoint has no name (§2.4.1)", test.Case{Qname: "db-9.east.db.shop.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: neg}},
		{"hostname in the wrong cluster", test.Case{Qname: "10-100-0-3.west.db.shop.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: neg}},
		{"no per-cluster address for headless (§2.4.4)", test.Case{Qname: "east.db.shop.svc.clusterset.local.", Qtype: dns.TypeA, Ns: neg}},
		{"no per-cluster address for headless, AAAA", test.Case{Qname: "west.db.shop.svc.clusterset.local.", Qtype: dns.TypeAAAA, Ns: neg}},
		{"no per-cluster SRV for headless", test.Case{Qname: "west.db.shop.svc.clusterset.local.", Qtype: dns.TypeSRV, Ns: neg}},
		{"unknown cluster", test.Case{Qname: "north.db.shop.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: neg}},
		{"headless SRV at the service name: ready endpoint × port, unnamed too", test.Case{Qname: "db.shop.svc.clusterset.local.", Qtype: dns.TypeSRV,
			Answer: []dns.RR{
				test.SRV("db.shop.svc.clusterset.local. 5 IN SRV 0 16 5432 10-100-0-3.east.db.shop.svc.clusterset.local."),
				test.SRV("db.shop.svc.clusterset.local. 5 IN SRV 0 16 5432 db-0.east.db.shop.svc.clusterset.local."),
				test.SRV("db.shop.svc.clusterset.local. 5 IN SRV 0 16 5432 db-0.west.db.shop.svc.clusterset.local."),
				test.SRV("db.shop.svc.clusterset.local. 5 IN SRV 0 16 8080 10-100-0-3.east.db.shop.svc.clusterset.local."),
				test.SRV("db.shop.svc.clusterset.local. 5 IN SRV 0 16 8080 db-0.east.db.shop.svc.clusterset.local."),
				test.SRV("db.shop.svc.clusterset.local. 5 IN SRV 0 16 8080 db-0.west.db.shop.svc.clusterset.local."),
			},
			Extra: dbTargets}},
		{"headless SRV: ready endpoint × named port (§2.4.2)", test.Case{Qname: "_pg._tcp.db.shop.svc.clusterset.local.", Qtype: dns.TypeSRV,
			Answer: []dns.RR{
				test.SRV("_pg._tcp.db.shop.svc.clusterset.local. 5 IN SRV 0 33 5432 10-100-0-3.east.db.shop.svc.clusterset.local."),
				test.SRV("_pg._tcp.db.shop.svc.clusterset.local. 5 IN SRV 0 33 5432 db-0.east.db.shop.svc.clusterset.local."),
				test.SRV("_pg._tcp.db.shop.svc.clusterset.local. 5 IN SRV 0 33 5432 db-0.west.db.shop.svc.clusterset.local."),
			},
			Extra: dbTargets}},
		{"headless unnamed port has no _<port> SRV (§2.4.2)", test.Case{Qname: "_8080._tcp.db.shop.svc.clusterset.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: neg}},
		{"headless SRV at an endpoint name: its ports", test.Case{Qname: "db-0.west.db.shop.svc.clusterset.local.", Qtype: dns.TypeSRV,
			Answer: []dns.RR{
				test.SRV("db-0.west.db.shop.svc.clusterset.local. 5 IN SRV 0 50 5432 db-0.west.db.shop.svc.clusterset.local."),
				test.SRV("db-0.west.db.shop.svc.clusterset.local. 5 IN SRV 0 50 8080 db-0.west.db.shop.svc.clusterset.local."),
			},
			Extra: dbTargets[2:]}},
		{"headless endpoint name TXT: NODATA", test.Case{Qname: "db-0.west.db.shop.svc.clusterset.local.", Qtype: dns.TypeTXT, Ns: neg}},
		{"another service's slice is ignored", test.Case{Qname: "x.west.db.shop.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: neg}},
		{"headless PTR (§2.4.3)", test.Case{Qname: reverse("10.100.0.2"), Qtype: dns.TypePTR,
			Answer: []dns.RR{test.PTR(reverse("10.100.0.2") + " 5 IN PTR db-0.east.db.shop.svc.clusterset.local.")}}},
		{"headless PTR, system-assigned name", test.Case{Qname: reverse("10.100.0.3"), Qtype: dns.TypePTR,
			Answer: []dns.RR{test.PTR(reverse("10.100.0.3") + " 5 IN PTR 10-100-0-3.east.db.shop.svc.clusterset.local.")}}},
		{"headless PTR, IPv6 (§2.4.3)", test.Case{Qname: reverse("fd00:101::2"), Qtype: dns.TypePTR,
			Answer: []dns.RR{test.PTR(reverse("fd00:101::2") + " 5 IN PTR db-0.west.db.shop.svc.clusterset.local.")}}},
		{"headless PTR, any case", test.Case{Qname: strings.ToUpper(reverse("fd00:101::2")), Qtype: dns.TypePTR,
			Answer: []dns.RR{test.PTR(reverse("fd00:101::2") + " 5 IN PTR db-0.west.db.shop.svc.clusterset.local.")}}},
		{"headless PTR name, A query: NODATA", test.Case{Qname: reverse("10.100.0.2"), Qtype: dns.TypeA, Ns: neg4}},
		{"unready endpoint has no PTR", test.Case{Qname: reverse("10.100.0.4"), Qtype: dns.TypePTR, Rcode: dns.RcodeNameError, Ns: neg4}},
		{"another service's slice has no PTR", test.Case{Qname: reverse("10.101.0.99"), Qtype: dns.TypePTR, Rcode: dns.RcodeNameError, Ns: neg4}},
		{"reverse name above a PTR: empty non-terminal", test.Case{Qname: "0.100.10.in-addr.arpa.", Qtype: dns.TypePTR, Ns: neg4}},
		{"reverse name two labels above a PTR", test.Case{Qname: "10.in-addr.arpa.", Qtype: dns.TypePTR, Ns: neg4}},
		{"IPv6 reverse name above a PTR", test.Case{Qname: "1.0.1.0.0.0.d.f.ip6.arpa.", Qtype: dns.TypePTR, Ns: neg6}},
		{"reverse name above no PTR", test.Case{Qname: "1.100.10.in-addr.arpa.", Qtype: dns.TypePTR, Rcode: dns.RcodeNameError, Ns: neg4}},
		{"reverse name not canonical", test.Case{Qname: "02.0.100.10.in-addr.arpa.", Qtype: dns.TypePTR, Rcode: dns.RcodeNameError, Ns: neg4}},
		{"reverse name too long", test.Case{Qname: "1." + reverse("10.100.0.2"), Qtype: dns.TypePTR, Rcode: dns.RcodeNameError, Ns: neg4}},
		{"reverse name not a nibble", test.Case{Qname: "g." + strings.TrimPrefix(reverse("fd00:101::2"), "2."), Qtype: dns.TypePTR, Rcode: dns.RcodeNameError, Ns: neg6}},
		{"reverse apex SOA", test.Case{Qname: "in-addr.arpa.", Qtype: dns.TypeSOA, Answer: []dns.RR{test.SOA(soaIP4)}}},
		{"reverse apex PTR: NODATA", test.Case{Qname: "ip6.arpa.", Qtype: dns.TypePTR, Ns: neg6}},

		{"headless without ready endpoints: NXDOMAIN (§2.4.1)", test.Case{Qname: "cold.idle.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: neg}},
		{"headless without ready endpoints: no SRV", test.Case{Qname: "cold.idle.svc.clusterset.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: neg}},
		{"ClusterSetIP without an IP yet", test.Case{Qname: "new.idle.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: neg}},
		{"ClusterSetIP without an IP yet: no SRV", test.Case{Qname: "new.idle.svc.clusterset.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: neg}},
		{"namespace with services: empty non-terminal", test.Case{Qname: "shop.svc.clusterset.local.", Qtype: dns.TypeA, Ns: neg}},
		{"namespace with services, SRV: empty non-terminal", test.Case{Qname: "shop.svc.clusterset.local.", Qtype: dns.TypeSRV, Ns: neg}},
		{"namespace without names", test.Case{Qname: "idle.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: neg}},
		{"svc: empty non-terminal", test.Case{Qname: "svc.clusterset.local.", Qtype: dns.TypeA, Ns: neg}},
		{"unknown service", test.Case{Qname: "nope.shop.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: neg}},
		{"unknown service, SRV", test.Case{Qname: "nope.shop.svc.clusterset.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: neg}},
		{"outside svc", test.Case{Qname: "web.shop.pod.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: neg}},
		{"too deep", test.Case{Qname: "a.db-0.east.db.shop.svc.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: neg}},
		{"SRV below an endpoint name", test.Case{Qname: "_pg._tcp.db-0.east.db.shop.svc.clusterset.local.", Qtype: dns.TypeSRV, Rcode: dns.RcodeNameError, Ns: neg}},
		{"other top-level name", test.Case{Qname: "foo.clusterset.local.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError, Ns: neg}},
		{"zone transfer refused", test.Case{Qname: "clusterset.local.", Qtype: dns.TypeAXFR, Rcode: dns.RcodeRefused}},
	}
	h := &Handler{Zones: zones, Source: &staticSource{Index: fixture(), synced: true}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := dnstest.NewRecorder(&test.ResponseWriter{})
			rcode, err := h.ServeDNS(context.Background(), rec, tc.Msg())
			if err != nil {
				t.Fatal(err)
			}
			if !isWritten(rcode) {
				// CoreDNS's server writes these replies itself.
				if rcode != tc.Rcode {
					t.Fatalf("rcode %s, want %s", dns.RcodeToString[rcode], dns.RcodeToString[tc.Rcode])
				}
				return
			}
			if rec.Msg == nil {
				t.Fatal("no reply written")
			}
			if !rec.Msg.Authoritative {
				t.Error("reply is not authoritative")
			}
			if err := test.SortAndCheck(rec.Msg, tc.Case); err != nil {
				t.Error(err)
			}
		})
	}
}

func isWritten(rcode int) bool {
	return rcode == dns.RcodeSuccess || rcode == dns.RcodeNameError
}

func TestServeDNSNotSynced(t *testing.T) {
	h := &Handler{Zones: zones, Source: &staticSource{Index: fixture(), synced: false}}
	if h.Ready() {
		t.Error("Ready() before the index has synced")
	}
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	rcode, _ := h.ServeDNS(context.Background(), rec, (&test.Case{Qname: "web.shop.svc.clusterset.local.", Qtype: dns.TypeA}).Msg())
	if rcode != dns.RcodeServerFailure || rec.Msg != nil {
		t.Errorf("before sync: rcode %s, reply %v; want SERVFAIL written by the server", dns.RcodeToString[rcode], rec.Msg)
	}
	h.Source.(*staticSource).synced = true
	if !h.Ready() {
		t.Error("not Ready() after sync")
	}
}

func TestServeDNSRouting(t *testing.T) {
	next := test.NextHandler(dns.RcodeSuccess, nil)
	cases := []struct {
		name      string
		zones     []string // nil for zones
		qname     string
		qclass    uint16
		fall      []string
		wantRcode int
	}{
		{"another zone goes to the next plugin", nil, "example.org.", dns.ClassINET, nil, dns.RcodeSuccess},
		{"a reverse zone not configured goes to the next plugin", []string{"clusterset.local."}, reverse("10.100.0.2"), dns.ClassINET, nil, dns.RcodeSuccess},
		{"a reverse zone configured is answered", []string{"clusterset.local.", "100.10.in-addr.arpa."}, reverse("10.100.0.9"), dns.ClassINET, nil, dns.RcodeNameError},
		{"outside the configured reverse zone", []string{"clusterset.local.", "100.10.in-addr.arpa."}, reverse("10.101.0.2"), dns.ClassINET, nil, dns.RcodeSuccess},
		{"reverse NXDOMAIN with fallthrough goes on", nil, reverse("10.100.0.9"), dns.ClassINET, []string{"in-addr.arpa."}, dns.RcodeSuccess},
		{"NXDOMAIN without fallthrough is answered", nil, "nope.shop.svc.clusterset.local.", dns.ClassINET, nil, dns.RcodeNameError},
		{"NXDOMAIN with fallthrough goes on", nil, "nope.shop.svc.clusterset.local.", dns.ClassINET, []string{"clusterset.local."}, dns.RcodeSuccess},
		{"fallthrough for another zone only", nil, "nope.shop.svc.clusterset.local.", dns.ClassINET, []string{"example.org."}, dns.RcodeNameError},
		{"existing names never fall through", nil, "web.shop.svc.clusterset.local.", dns.ClassINET, []string{"clusterset.local."}, dns.RcodeSuccess},
		{"class CHAOS refused", nil, "web.shop.svc.clusterset.local.", dns.ClassCHAOS, nil, dns.RcodeRefused},
		{"class ANY answered", nil, "web.shop.svc.clusterset.local.", dns.ClassANY, nil, dns.RcodeSuccess},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handler{Next: next, Zones: zones, Source: &staticSource{Index: fixture(), synced: true}}
			if tc.zones != nil {
				h.Zones = tc.zones
			}
			h.Fall.SetZonesFromArgs(tc.fall)
			if tc.fall == nil {
				h.Fall = fall.Zero
			}
			m := new(dns.Msg)
			m.SetQuestion(tc.qname, dns.TypePTR)
			if strings.HasSuffix(tc.qname, ".clusterset.local.") || tc.qname == "example.org." {
				m.Question[0].Qtype = dns.TypeA
			}
			m.Question[0].Qclass = tc.qclass
			rec := dnstest.NewRecorder(&test.ResponseWriter{})
			rcode, err := h.ServeDNS(context.Background(), rec, m)
			if err != nil {
				t.Fatal(err)
			}
			if rcode != tc.wantRcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[rcode], dns.RcodeToString[tc.wantRcode])
			}
		})
	}
}

// TestIndexUpdates: replacing and removing a service changes its names and the SOA serial, and
// the namespace's empty non-terminal goes with its last service.
func TestIndexUpdates(t *testing.T) {
	ix := NewIndex("clusterset.local.", 5)
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	serial := func() uint32 { return ix.Lookup("clusterset.local.", dns.TypeSOA).Answer[0].(*dns.SOA).Serial }
	steps := []struct {
		name     string
		si       *mcsv1beta1.ServiceImport
		wantA    []string
		wantNS   int // rcode of ns.svc.clusterset.local.
		wantSize int
	}{
		{"created", serviceImport("ns", "a", mcsv1beta1.ClusterSetIP, []string{"10.200.0.1"}), []string{"10.200.0.1"}, dns.RcodeSuccess, 1},
		{"IP changed", serviceImport("ns", "a", mcsv1beta1.ClusterSetIP, []string{"10.200.0.2"}), []string{"10.200.0.2"}, dns.RcodeSuccess, 1},
		{"IPs gone", serviceImport("ns", "a", mcsv1beta1.ClusterSetIP, nil), nil, dns.RcodeNameError, 0},
		{"back", serviceImport("ns", "a", mcsv1beta1.ClusterSetIP, []string{"10.200.0.3", "::ffff:10.200.0.4", "bogus"}), []string{"10.200.0.3", "10.200.0.4"}, dns.RcodeSuccess, 1},
		{"deleted", nil, nil, dns.RcodeNameError, 0},
	}
	last := serial()
	for _, s := range steps {
		ix.Set(key, s.si, nil)
		var got []string
		for _, rr := range ix.Lookup("a.ns.svc.clusterset.local.", dns.TypeA).Answer {
			got = append(got, rr.(*dns.A).A.String())
		}
		if len(got) != len(s.wantA) || (len(got) > 0 && (got[0] != s.wantA[0] || got[len(got)-1] != s.wantA[len(s.wantA)-1])) {
			t.Errorf("%s: A %v, want %v", s.name, got, s.wantA)
		}
		if r := ix.Lookup("ns.svc.clusterset.local.", dns.TypeA); r.Rcode != s.wantNS {
			t.Errorf("%s: ns.svc rcode %d, want %d", s.name, r.Rcode, s.wantNS)
		}
		if n, _ := ix.Size(); n != s.wantSize {
			t.Errorf("%s: size %d, want %d", s.name, n, s.wantSize)
		}
		if cur := serial(); cur == last {
			t.Errorf("%s: SOA serial stayed %d", s.name, cur)
		} else {
			last = cur
		}
	}
}

// TestDuplicateAddresses: two clusters reporting the same address (overlapping pod CIDRs) give
// one record at the service name (an RRset has no duplicates, RFC 2181 §5) and one per host.
func TestDuplicateAddresses(t *testing.T) {
	ix := NewIndex("clusterset.local.", 5)
	key := types.NamespacedName{Namespace: "ns", Name: "h"}
	ix.Set(key, serviceImport("ns", "h", mcsv1beta1.Headless, nil), []*discoveryv1.EndpointSlice{
		slice("ns", "h", "east", "h-east", discoveryv1.AddressTypeIPv4, ep{addr: "10.1.1.1", hostname: "a"}, ep{addr: "10.1.1.1", hostname: "a"}),
		slice("ns", "h", "west", "h-west", discoveryv1.AddressTypeIPv4, ep{addr: "10.1.1.1", hostname: "a"}),
	})
	for name, want := range map[string]int{
		"h.ns.svc.clusterset.local.":        1,
		"a.east.h.ns.svc.clusterset.local.": 1,
		"a.west.h.ns.svc.clusterset.local.": 1,
	} {
		if got := len(ix.Lookup(name, dns.TypeA).Answer); got != want {
			t.Errorf("%s: %d A records, want %d", name, got, want)
		}
	}
	if _, addrs := ix.Size(); addrs != 1 {
		t.Errorf("index holds %d addresses, want 1", addrs)
	}
}

// TestPTRUpdates: an address has one PTR record (§2.4.3), the same whatever order services and
// clusters came in, and it follows the services that name it.
func TestPTRUpdates(t *testing.T) {
	ix := NewIndex("clusterset.local.", 5, "in-addr.arpa.")
	h, g := types.NamespacedName{Namespace: "ns", Name: "h"}, types.NamespacedName{Namespace: "ns", Name: "g"}
	both := []*discoveryv1.EndpointSlice{
		slice("ns", "h", "west", "h-west", discoveryv1.AddressTypeIPv4, ep{addr: "10.1.1.1", hostname: "a"}),
		slice("ns", "h", "east", "h-east", discoveryv1.AddressTypeIPv4, ep{addr: "10.1.1.1", hostname: "a"}),
	}
	steps := []struct {
		name string
		set  func()
		want string // PTR target of 10.1.1.1, "" for NXDOMAIN
	}{
		{"two clusters, one address: the first name", func() { ix.Set(h, serviceImport("ns", "h", mcsv1beta1.Headless, nil), both) }, "a.east.h.ns.svc.clusterset.local."},
		{"another service names it first", func() {
			ix.Set(g, serviceImport("ns", "g", mcsv1beta1.Headless, nil), []*discoveryv1.EndpointSlice{
				slice("ns", "g", "east", "g-east", discoveryv1.AddressTypeIPv4, ep{addr: "10.1.1.1", hostname: "a"})})
		}, "a.east.g.ns.svc.clusterset.local."},
		{"that service deleted", func() { ix.Set(g, nil, nil) }, "a.east.h.ns.svc.clusterset.local."},
		{"east gone", func() { ix.Set(h, serviceImport("ns", "h", mcsv1beta1.Headless, nil), both[:1]) }, "a.west.h.ns.svc.clusterset.local."},
		{"deleted", func() { ix.Set(h, nil, nil) }, ""},
	}
	for _, s := range steps {
		s.set()
		r := ix.Lookup(reverse("10.1.1.1"), dns.TypePTR)
		got := ""
		if len(r.Answer) == 1 {
			got = r.Answer[0].(*dns.PTR).Ptr
		}
		if got != s.want || len(r.Answer) > 1 || (s.want == "" && r.Rcode != dns.RcodeNameError) {
			t.Errorf("%s: %s %v, want PTR %q", s.name, dns.RcodeToString[r.Rcode], r.Answer, s.want)
		}
	}
	if r := ix.Lookup("1.10.in-addr.arpa.", dns.TypePTR); r.Rcode != dns.RcodeNameError {
		t.Errorf("above a deleted PTR: %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
	}
}

// TestSRVWeight: the records of an SRV RRset share 100 as weight, each at least 1 (RFC 2782
// gives 0 a meaning of its own).
func TestSRVWeight(t *testing.T) {
	for _, n := range []int{1, 2, 3, 101, 150} {
		ix := NewIndex("clusterset.local.", 5)
		var eps []ep
		for i := range n {
			eps = append(eps, ep{addr: fmt.Sprintf("10.1.%d.%d", i/200, i%200+1)})
		}
		ix.Set(types.NamespacedName{Namespace: "ns", Name: "h"}, serviceImport("ns", "h", mcsv1beta1.Headless, nil, mcsv1beta1.ServicePort{Name: "p", Port: 1}),
			[]*discoveryv1.EndpointSlice{slice("ns", "h", "east", "h-east", discoveryv1.AddressTypeIPv4, eps...)})
		want := uint16(max(1, 100/n))
		for _, name := range []string{"_p._tcp.h.ns.svc.clusterset.local.", "h.ns.svc.clusterset.local."} {
			r := ix.Lookup(name, dns.TypeSRV)
			if len(r.Answer) != n {
				t.Fatalf("%d endpoints, %s: %d SRV records", n, name, len(r.Answer))
			}
			for _, rr := range r.Answer {
				if w := rr.(*dns.SRV).Weight; w != want {
					t.Fatalf("%d endpoints, %s: weight %d, want %d", n, name, w, want)
				}
			}
		}
	}
}

func TestReversePrefix(t *testing.T) {
	cases := []struct {
		name string
		want string // "" for not a reverse name
	}{
		{"in-addr.arpa.", "0.0.0.0/0"},
		{"10.in-addr.arpa.", "10.0.0.0/8"},
		{"0.100.10.in-addr.arpa.", "10.100.0.0/24"},
		{"4.3.2.1.in-addr.arpa.", "1.2.3.4/32"},
		{"255.0.0.0.in-addr.arpa.", "0.0.0.255/32"},
		{"256.in-addr.arpa.", ""},
		{"01.in-addr.arpa.", ""},
		{"-1.in-addr.arpa.", ""},
		{"5.4.3.2.1.in-addr.arpa.", ""},
		{"ip6.arpa.", "::/0"},
		{"d.f.ip6.arpa.", "fd00::/8"},
		{"f.ip6.arpa.", "f000::/4"},
		{reverse("fd00:101::2"), "fd00:101::2/128"},
		{"0." + reverse("fd00:101::2"), ""},
		{"ff.ip6.arpa.", ""},
		{"g.ip6.arpa.", ""},
		{"arpa.", ""},
		{"example.org.", ""},
		{"xin-addr.arpa.", ""},
	}
	for _, tc := range cases {
		got, ok := reversePrefix(tc.name)
		if (tc.want == "") != !ok || (ok && got.String() != tc.want) {
			t.Errorf("reversePrefix(%q) = %v, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
}

// TestSecondaryImport: a ClusterSetIP import of a cluster on the secondary network has no
// virtual IP; marked so by the import controller, it is answered as a headless import is, with
// every ready endpoint of every cluster (the pods' net1 addresses). Unmarked and without ips it
// has no name, as before.
func TestSecondaryImport(t *testing.T) {
	key := types.NamespacedName{Namespace: "shop", Name: "web"}
	si := serviceImport("shop", "web", mcsv1beta1.ClusterSetIP, nil, mcsv1beta1.ServicePort{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP})
	eps := []*discoveryv1.EndpointSlice{
		slice("shop", "web", "east", "web-east", discoveryv1.AddressTypeIPv4,
			ep{addr: "10.112.0.3"}, ep{addr: "10.112.0.2", ready: ptr.To(true)}, ep{addr: "10.112.0.9", ready: ptr.To(false)}),
		slice("shop", "web", "west", "web-west", discoveryv1.AddressTypeIPv4, ep{addr: "10.113.0.2"}),
	}
	for _, tc := range []struct {
		name   string
		marked bool
		qname  string
		qtype  uint16
		want   []string // answers, as text without the header
		rcode  int
	}{
		{"unmarked without ips: no name", false, "web.shop.svc.clusterset.local.", dns.TypeA, nil, dns.RcodeNameError},
		{"marked: every ready endpoint", true, "web.shop.svc.clusterset.local.", dns.TypeA, []string{"10.112.0.2", "10.112.0.3", "10.113.0.2"}, dns.RcodeSuccess},
		{"marked: SRV of the named port to each endpoint's name", true, "_http._tcp.web.shop.svc.clusterset.local.", dns.TypeSRV, []string{
			"0 33 8080 10-112-0-2.east.web.shop.svc.clusterset.local.",
			"0 33 8080 10-112-0-3.east.web.shop.svc.clusterset.local.",
			"0 33 8080 10-113-0-2.west.web.shop.svc.clusterset.local.",
		}, dns.RcodeSuccess},
		{"marked: an endpoint's own name", true, "10-113-0-2.west.web.shop.svc.clusterset.local.", dns.TypeA, []string{"10.113.0.2"}, dns.RcodeSuccess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := si.DeepCopy()
			if tc.marked {
				s.Annotations = map[string]string{v1alpha1.AddressingAnnotation: string(v1alpha1.AddressingSecondary)}
			}
			ix := NewIndex("clusterset.local.", 5)
			ix.Set(key, s, eps)
			r := ix.Lookup(tc.qname, tc.qtype)
			var got []string
			for _, rr := range r.Answer {
				got = append(got, strings.TrimPrefix(rr.String(), rr.Header().String()))
			}
			slices.Sort(got) // address records come in the slices' order
			if r.Rcode != tc.rcode || strings.Join(got, ";") != strings.Join(tc.want, ";") {
				t.Errorf("%s %s: rcode %d, answer %q; want %d, %q", tc.qname, dns.TypeToString[tc.qtype], r.Rcode, got, tc.rcode, tc.want)
			}
		})
	}
}
