package crossdns_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// memberWithMCS starts one real control plane serving the MCS CRDs and returns an admin
// client and the path of its kubeconfig.
func memberWithMCS(t *testing.T) (client.Client, string) {
	t.Helper()
	env := testenv.ControlPlanes(t, "member")
	c, err := client.New(env.Cluster("member").RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	crds, err := crd.MCS()
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.InstallCRDs(t.Context(), c, crds); err != nil {
		t.Fatal(err)
	}
	return c, controlplane.KubeconfigPath(env.Dir, "member")
}

func mustCreate(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

type endpoint struct {
	addr, hostname string
	ready          bool
}

// importedSlice is an EndpointSlice as the import side writes it for source cluster.
func importedSlice(ns, svc, cluster, name string, family discoveryv1.AddressType, eps ...endpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			mcsv1beta1.LabelServiceName: svc, mcsv1beta1.LabelSourceCluster: cluster,
			discoveryv1.LabelManagedBy: "test.octopus.io",
		}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("pg"), Port: ptr.To[int32](5432)}},
	}
	for _, e := range eps {
		de := discoveryv1.Endpoint{Addresses: []string{e.addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(e.ready)}}
		if e.hostname != "" {
			de.Hostname = ptr.To(e.hostname)
		}
		s.Endpoints = append(s.Endpoints, de)
	}
	return s
}

func serviceImport(ns, name string, typ mcsv1beta1.ServiceImportType, ips []string, ports ...mcsv1beta1.ServicePort) *mcsv1beta1.ServiceImport {
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: typ, IPs: ips, Ports: ports},
	}
}

// TestKube: a real CoreDNS server with crossdns, fed by a real API server, answers real UDP and
// TCP queries for every record the specification defines, follows changes, and fits replies
// to the client's buffer.
func TestKube(t *testing.T) {
	c, kubeconfig := memberWithMCS(t)
	mustCreate(t, c,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
		serviceImport("shop", "web", mcsv1beta1.ClusterSetIP, []string{"10.200.0.10", "fd00:200::a"},
			mcsv1beta1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
			mcsv1beta1.ServicePort{Port: 9090, Protocol: corev1.ProtocolTCP}),
		serviceImport("shop", "db", mcsv1beta1.Headless, nil, mcsv1beta1.ServicePort{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}),
		importedSlice("shop", "db", "east", "db-east", discoveryv1.AddressTypeIPv4,
			endpoint{"10.100.0.2", "db-0", true}, endpoint{"10.100.0.3", "", true}, endpoint{"10.100.0.4", "db-9", false}),
		importedSlice("shop", "db", "west", "db-west", discoveryv1.AddressTypeIPv4, endpoint{"10.101.0.2", "db-0", true}),
		importedSlice("shop", "db", "west", "db-west-v6", discoveryv1.AddressTypeIPv6, endpoint{"fd00:101::2", "db-0", true}),
	)
	// A slice of the same service name without a source cluster is not an import: not ours.
	local := importedSlice("shop", "db", "", "db-local", discoveryv1.AddressTypeIPv4, endpoint{"10.100.9.9", "local", true})
	delete(local.Labels, mcsv1beta1.LabelSourceCluster)
	mustCreate(t, c, local)
	// Enough endpoints that the A answer does not fit 512 bytes.
	many := serviceImport("shop", "many", mcsv1beta1.Headless, nil, mcsv1beta1.ServicePort{Port: 5432, Protocol: corev1.ProtocolTCP})
	var eps []endpoint
	for i := range 100 {
		eps = append(eps, endpoint{fmt.Sprintf("10.102.%d.%d", i/200, i%200+1), "", true})
	}
	mustCreate(t, c, many, importedSlice("shop", "many", "north", "many-north", discoveryv1.AddressTypeIPv4, eps...))

	udp, tcp := startServer(t, fmt.Sprintf(".:0 {\n bind 127.0.0.1\n crossdns clusterset.local 10.0.0.0/8 fd00::/8 {\n  kubeconfig %s\n  ttl 7\n }\n}\n", kubeconfig))
	// Synced: the last object created is served.
	waitAnswer(t, "udp", udp, "many.shop.svc.clusterset.local.", dns.TypeTXT, is(nodata))

	webSRV := positive("SRV 0 100 80 web.shop.svc.clusterset.local.")
	webSRV.nExtra = 2
	dbSRV := positive(
		"SRV 0 33 5432 10-100-0-3.east.db.shop.svc.clusterset.local.",
		"SRV 0 33 5432 db-0.east.db.shop.svc.clusterset.local.",
		"SRV 0 33 5432 db-0.west.db.shop.svc.clusterset.local.")
	dbSRV.nExtra = 4
	webSRVs := positive("SRV 0 50 80 web.shop.svc.clusterset.local.", "SRV 0 50 9090 web.shop.svc.clusterset.local.")
	webSRVs.nExtra = 2
	cases := []struct {
		name  string
		qtype uint16
		want  answer
	}{
		{"dns-version.clusterset.local.", dns.TypeTXT, positive(`TXT "1.0.0"`)},
		{"web.shop.svc.clusterset.local.", dns.TypeA, positive("A 10.200.0.10")},
		{"web.shop.svc.clusterset.local.", dns.TypeAAAA, positive("AAAA fd00:200::a")},
		{"_http._tcp.web.shop.svc.clusterset.local.", dns.TypeSRV, webSRV},
		{"web.shop.svc.clusterset.local.", dns.TypeMX, nodata},
		{"_9090._tcp.web.shop.svc.clusterset.local.", dns.TypeSRV, nxdomain},
		{"east.web.shop.svc.clusterset.local.", dns.TypeA, nxdomain},
		{"db.shop.svc.clusterset.local.", dns.TypeA, positive("A 10.100.0.2", "A 10.100.0.3", "A 10.101.0.2")},
		{"db.shop.svc.clusterset.local.", dns.TypeAAAA, positive("AAAA fd00:101::2")},
		{"db-0.east.db.shop.svc.clusterset.local.", dns.TypeA, positive("A 10.100.0.2")},
		{"db-0.west.db.shop.svc.clusterset.local.", dns.TypeAAAA, positive("AAAA fd00:101::2")},
		{"10-100-0-3.east.db.shop.svc.clusterset.local.", dns.TypeA, positive("A 10.100.0.3")},
		{"db-9.east.db.shop.svc.clusterset.local.", dns.TypeA, nxdomain},
		{"local.db.shop.svc.clusterset.local.", dns.TypeA, nxdomain},
		{"east.db.shop.svc.clusterset.local.", dns.TypeA, nodata},
		{"_pg._tcp.db.shop.svc.clusterset.local.", dns.TypeSRV, dbSRV},
		{"web.shop.svc.clusterset.local.", dns.TypeSRV, webSRVs},
		{"db.shop.svc.clusterset.local.", dns.TypeSRV, dbSRV}, // one port: the same records as _pg._tcp
		{"2.0.100.10.in-addr.arpa.", dns.TypePTR, positive("PTR db-0.east.db.shop.svc.clusterset.local.")},
		// IPv6 reverse names (ip6.arpa., nibbles, §2.4.3): the headless endpoint's PTR, none for
		// a ClusterSetIP (§2.3.3), NODATA above an existing name and for another type.
		{"2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.0.1.0.0.0.d.f.ip6.arpa.", dns.TypePTR, positive("PTR db-0.west.db.shop.svc.clusterset.local.")},
		{"2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.0.1.0.0.0.d.f.ip6.arpa.", dns.TypeAAAA, nodata},
		{"a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.2.0.0.0.d.f.ip6.arpa.", dns.TypePTR, nxdomain},
		{"1.0.1.0.0.0.d.f.ip6.arpa.", dns.TypePTR, nodata},
		{"nope.shop.svc.clusterset.local.", dns.TypeA, nxdomain},
		{"shop.svc.clusterset.local.", dns.TypeA, nodata},
	}
	for _, network := range []string{"udp", "tcp"} {
		addr := map[string]string{"udp": udp, "tcp": tcp}[network]
		for _, tc := range cases {
			t.Run(network+"/"+dns.TypeToString[tc.qtype]+"/"+tc.name, func(t *testing.T) {
				r, err := exchange(t.Context(), network, addr, tc.name, tc.qtype, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !r.Authoritative {
					t.Error("reply not authoritative")
				}
				for _, rr := range append(r.Answer, r.Ns...) {
					if rr.Header().Ttl != 7 {
						t.Errorf("TTL %d, want the configured 7: %s", rr.Header().Ttl, rr)
					}
				}
				if msg := is(tc.want)(reduce(r)); msg != "" {
					t.Error(msg)
				}
			})
		}
	}

	t.Run("truncation and EDNS0", func(t *testing.T) {
		const name = "many.shop.svc.clusterset.local."
		r, err := exchange(t.Context(), "udp", udp, name, dns.TypeA, 0)
		if err != nil {
			t.Fatal(err)
		}
		r.Compress = true // the size on the wire
		if !r.Truncated || r.Len() > dns.MinMsgSize {
			t.Errorf("UDP without EDNS0: TC=%v, %d bytes; want TC and at most 512", r.Truncated, r.Len())
		}
		r, err = exchange(t.Context(), "udp", udp, name, dns.TypeA, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if r.Truncated || len(r.Answer) != 100 || r.IsEdns0() == nil {
			t.Errorf("UDP with EDNS0 4096: TC=%v, %d answers, OPT %v; want all 100 and an OPT", r.Truncated, len(r.Answer), r.IsEdns0())
		}
		r, err = exchange(t.Context(), "tcp", tcp, name, dns.TypeA, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Truncated || len(r.Answer) != 100 {
			t.Errorf("TCP: TC=%v, %d answers; want all 100", r.Truncated, len(r.Answer))
		}
	})

	t.Run("an endpoint going unready leaves the answers", func(t *testing.T) {
		s := &discoveryv1.EndpointSlice{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: "shop", Name: "db-east"}, s); err != nil {
			t.Fatal(err)
		}
		s.Endpoints[0].Conditions.Ready = ptr.To(false) // db-0 in east
		if err := c.Update(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		waitAnswer(t, "udp", udp, "db.shop.svc.clusterset.local.", dns.TypeA, is(positive("A 10.100.0.3", "A 10.101.0.2")))
		waitAnswer(t, "tcp", tcp, "db-0.east.db.shop.svc.clusterset.local.", dns.TypeA, is(nxdomain))
		waitAnswer(t, "udp", udp, "db-0.west.db.shop.svc.clusterset.local.", dns.TypeA, is(positive("A 10.101.0.2")))
	})

	t.Run("the last ready endpoint gone: NXDOMAIN", func(t *testing.T) {
		for _, name := range []string{"db-east", "db-west", "db-west-v6"} {
			if err := c.Delete(t.Context(), &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}); err != nil {
				t.Fatal(err)
			}
		}
		waitAnswer(t, "udp", udp, "db.shop.svc.clusterset.local.", dns.TypeA, is(nxdomain))
		waitAnswer(t, "udp", udp, "_pg._tcp.db.shop.svc.clusterset.local.", dns.TypeSRV, is(nxdomain))
	})

	t.Run("a deleted import removes the name", func(t *testing.T) {
		if err := c.Delete(t.Context(), serviceImport("shop", "web", "", nil)); err != nil {
			t.Fatal(err)
		}
		waitAnswer(t, "udp", udp, "web.shop.svc.clusterset.local.", dns.TypeA, is(nxdomain))
		waitAnswer(t, "tcp", tcp, "_http._tcp.web.shop.svc.clusterset.local.", dns.TypeSRV, is(nxdomain))
	})

	t.Run("metrics", func(t *testing.T) {
		got := gather(t)
		for _, want := range []string{
			`coredns_crossdns_queries_total{result="answer",type="A"}`,
			`coredns_crossdns_queries_total{result="nxdomain",type="A"}`,
			`coredns_crossdns_queries_total{result="nodata",type="TXT"}`,
			`coredns_crossdns_queries_total{result="answer",type="SRV"}`,
			`coredns_crossdns_index_services{}`,
			`coredns_crossdns_index_update_lag_seconds_count{}`,
		} {
			if v, ok := got[want]; !ok || v <= 0 {
				t.Errorf("%s = %v (present %v), want > 0", want, v, ok)
			}
		}
		// many is the one service left with names.
		if v := got[`coredns_crossdns_index_services{}`]; v != 1 {
			t.Errorf("index_services = %v, want 1", v)
		}
		if v := got[`coredns_crossdns_index_addresses{}`]; v != 100 {
			t.Errorf("index_addresses = %v, want 100", v)
		}
	})
}

// gather returns the crossdns metrics of the default registry as "name{labels}" → value.
func gather(t *testing.T) map[string]float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "coredns_crossdns_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[mf.GetName()+"_count{}"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}
