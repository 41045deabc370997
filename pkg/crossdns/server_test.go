package crossdns_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/ready"
	"github.com/go-logr/logr"
	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/util/wait"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/octopus-mcs/octopus/pkg/crossdns" // registers the plugin, and its reverse-zone rule
)

func TestMain(m *testing.M) {
	// What an in-process server needs: crossdns is not in CoreDNS's own list. (octopus-dns
	// sets its full list; TestOctopusDNS runs that binary.)
	dnsserver.Directives = []string{"bind", "ready", "crossdns"}
	caddy.Quiet, dnsserver.Quiet = true, true
	logf.SetLogger(logr.Discard()) // the agents of TestServiceDiscovery log through controller-runtime
	os.Exit(m.Run())
}

// startServer starts an in-process CoreDNS server for corefile (whose port must be 0) and
// returns its UDP and TCP addresses; it stops with the test.
func startServer(t *testing.T, corefile string) (udp, tcp string) {
	t.Helper()
	inst, err := caddy.Start(caddy.CaddyfileInput{Contents: []byte(corefile), ServerTypeName: "dns", Filepath: "Corefile"})
	if err != nil {
		t.Fatalf("starting CoreDNS with\n%s\n: %v", corefile, err)
	}
	t.Cleanup(func() {
		if err := inst.Stop(); err != nil {
			t.Errorf("stopping CoreDNS: %v", err)
		}
	})
	srv := inst.Servers()[0]
	return srv.LocalAddr().String(), srv.Addr().String()
}

// answer is a reply reduced to what the tests compare.
type answer struct {
	rcode  int
	rdata  []string // answer section: "TYPE rdata", sorted
	soa    bool     // the authority section is exactly the zone's SOA
	tc     bool
	nExtra int // additional records other than OPT
}

func (a answer) String() string {
	return fmt.Sprintf("%s %v soa=%v tc=%v extra=%d", dns.RcodeToString[a.rcode], a.rdata, a.soa, a.tc, a.nExtra)
}

func reduce(r *dns.Msg) answer {
	a := answer{rcode: r.Rcode, tc: r.Truncated}
	for _, rr := range r.Answer {
		h := rr.Header()
		a.rdata = append(a.rdata, dns.TypeToString[h.Rrtype]+" "+strings.TrimSpace(strings.TrimPrefix(rr.String(), h.String())))
	}
	slices.Sort(a.rdata)
	// The SOA of the zone the question is in (RFC 2308 §3): clusterset.local. or a reverse
	// zone such as d.f.ip6.arpa.
	a.soa = len(r.Ns) == 1 && r.Ns[0].Header().Rrtype == dns.TypeSOA && len(r.Question) == 1 &&
		(r.Ns[0].Header().Name == "clusterset.local." || crossdns.ReverseZone(r.Ns[0].Header().Name)) && dns.IsSubDomain(r.Ns[0].Header().Name, r.Question[0].Name)
	for _, rr := range r.Extra {
		if rr.Header().Rrtype != dns.TypeOPT {
			a.nExtra++
		}
	}
	return a
}

// exchange sends one question over network ("udp" or "tcp") to addr; bufsize > 0 adds EDNS0.
func exchange(ctx context.Context, network, addr, name string, qtype uint16, bufsize uint16) (*dns.Msg, error) {
	c := &dns.Client{Net: network, Timeout: 2 * time.Second, UDPSize: bufsize}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	if bufsize > 0 {
		m.SetEdns0(bufsize, false)
	}
	r, _, err := c.ExchangeContext(ctx, m, addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s over %s: %w", name, dns.TypeToString[qtype], network, err)
	}
	return r, nil
}

// waitAnswer polls name until check(reduced reply) returns "" or 30 s pass.
func waitAnswer(t *testing.T, network, addr, name string, qtype uint16, check func(answer) string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		msg := ask(ctx, network, addr, name, qtype, check)
		if ctx.Err() == nil { // keep the last real answer, not the deadline's
			last = msg
		}
		return msg == "", nil
	})
	if err != nil {
		t.Fatalf("%s %s over %s: %v; last: %s", name, dns.TypeToString[qtype], network, err, last)
	}
}

// ask returns what check says of the reply to name, or why there is none.
func ask(ctx context.Context, network, addr, name string, qtype uint16, check func(answer) string) string {
	r, err := exchange(ctx, network, addr, name, qtype, 0)
	if err != nil {
		return err.Error()
	}
	return check(reduce(r))
}

// is returns a check that the reply is want.
func is(want answer) func(answer) string {
	return func(got answer) string {
		if got.String() != want.String() {
			return fmt.Sprintf("got %s, want %s", got, want)
		}
		return ""
	}
}

func positive(rdata ...string) answer { return answer{rcode: dns.RcodeSuccess, rdata: sorted(rdata)} }

var (
	nodata   = answer{rcode: dns.RcodeSuccess, soa: true}
	nxdomain = answer{rcode: dns.RcodeNameError, soa: true}
)

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
