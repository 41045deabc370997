package crossdns

import (
	"context"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// FuzzServeDNS feeds the handler arbitrary queries, both as wire messages (whatever unpacks)
// and as questions built from any name, type and class, through the scrub writer CoreDNS's
// server wraps replies in. It must never panic, and whatever it writes must be a reply to the
// question that packs within the client's size.
func FuzzServeDNS(f *testing.F) {
	seed := func(name string, qtype, qclass uint16) {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		m.Question[0].Qclass = qclass
		wire, _ := m.Pack()
		f.Add(wire, name, qtype, qclass, false)
	}
	seed("web.shop.svc.clusterset.local.", dns.TypeA, dns.ClassINET)
	seed("_pg._tcp.db.shop.svc.clusterset.local.", dns.TypeSRV, dns.ClassINET)
	seed("db-0.west.db.shop.svc.clusterset.local.", dns.TypeAAAA, dns.ClassANY)
	seed("db.shop.svc.clusterset.local.", dns.TypeSRV, dns.ClassINET)
	seed("db-0.west.db.shop.svc.clusterset.local.", dns.TypeSRV, dns.ClassINET)
	seed("2.0.100.10.in-addr.arpa.", dns.TypePTR, dns.ClassINET)
	seed("2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.0.1.0.0.0.d.f.ip6.arpa.", dns.TypePTR, dns.ClassINET)
	seed("0.100.10.in-addr.arpa.", dns.TypeANY, dns.ClassINET)
	seed("dns-version.clusterset.local.", dns.TypeTXT, dns.ClassCHAOS)
	seed(strings.Repeat("a", 63)+".east.db.shop.svc.clusterset.local.", dns.TypeANY, 0)
	seed(`\.\..\000.svc.clusterset.local.`, 65535, 65535)
	f.Add([]byte{0, 1, 2}, strings.Repeat("x.", 200)+"clusterset.local.", dns.TypeAXFR, uint16(dns.ClassINET), true)
	f.Add([]byte(nil), "..clusterset.local", uint16(0), uint16(254), true)

	h := &Handler{Zones: zones, Source: &staticSource{Index: fixture(), synced: true}}
	f.Fuzz(func(t *testing.T, wire []byte, name string, qtype, qclass uint16, tcp bool) {
		queries := []*dns.Msg{}
		if m := new(dns.Msg); m.Unpack(wire) == nil {
			queries = append(queries, m)
		}
		m := new(dns.Msg)
		m.SetQuestion(name, qtype) // no validation: any name reaches the handler
		m.Question[0].Qclass = qclass
		queries = append(queries, m)
		for _, q := range queries {
			rec := dnstest.NewRecorder(&test.ResponseWriter{TCP: tcp})
			_, _ = h.ServeDNS(context.Background(), request.NewScrubWriter(q, rec), q)
			if rec.Msg == nil {
				continue // the server writes the error reply
			}
			r := rec.Msg
			if !r.Response || r.Id != q.Id || len(r.Question) != 1 || r.Question[0] != q.Question[0] {
				t.Fatalf("reply %v does not answer %v", r, q)
			}
			if r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError {
				t.Fatalf("rcode %s written", dns.RcodeToString[r.Rcode])
			}
			wireOut, err := r.Pack()
			if err != nil {
				t.Fatalf("reply does not pack: %v\n%v", err, r)
			}
			state := request.Request{W: &test.ResponseWriter{TCP: tcp}, Req: q}
			if limit := state.Size(); !tcp && len(wireOut) > limit && !r.Truncated {
				t.Fatalf("UDP reply of %d bytes exceeds the client's %d without TC", len(wireOut), limit)
			}
		}
	})
}
