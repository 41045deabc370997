// Package crossdns is a CoreDNS plugin that serves the Multi-Cluster Services DNS zone
// clusterset.local exactly as the MCS DNS specification (KEP-1645 specification.md, schema
// 1.0.0) describes it, from the ServiceImports and imported EndpointSlices of the cluster it
// runs in, with the SRV records the kubernetes plugin also answers at service and endpoint
// names; and, in the reverse zones (or CIDRs) given after the zone, the PTR records of headless
// endpoints.
//
// It keeps an in-memory index fed by informers, so that queries never reach the API server;
// until the informers have synced it answers SERVFAIL, and its Ready reports false. It imports
// nothing of Octopus's internals, so any CoreDNS build can include it:
//
//	crossdns [ZONE] [REVERSE-ZONES...] {
//	    kubeconfig PATH   # default: in-cluster configuration
//	    ttl SECONDS       # default 5
//	    fallthrough [ZONES...]
//	}
package crossdns

import (
	"context"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// pluginName is the directive's name in a Corefile.
const pluginName = "crossdns"

// Source is what the handler answers from: an index that is complete once HasSynced reports
// true. Kube implements it; tests wrap an Index.
type Source interface {
	HasSynced() bool
	Lookup(qname string, qtype uint16) Result
}

// Handler is the plugin: authoritative for Zones, answering from Source.
type Handler struct {
	Next plugin.Handler
	// Zones are the zones the handler answers (fully qualified, lower case): the clusterset
	// zone, and the reverse zones of the PTR records if any.
	Zones  []string
	Source Source
	Fall   fall.F
}

// Name implements plugin.Handler.
func (h *Handler) Name() string { return pluginName }

// Ready implements the ready plugin's Readiness: ready once the index holds the cluster's
// state, so that no pod is sent here while every name would still be SERVFAIL.
func (h *Handler) Ready() bool { return h.Source.HasSynced() }

// ServeDNS implements plugin.Handler. It writes at most one reply; CoreDNS's server wraps w in
// a scrub writer that fits the reply to the client's UDP or EDNS0 buffer size (truncating and
// setting TC when it does not fit) and mirrors the client's OPT record.
func (h *Handler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if r == nil || len(r.Question) != 1 {
		// request.Request assumes exactly one question; RFC 9619 allows no other count.
		countQuery(0, resultFormErr)
		return dns.RcodeFormatError, nil
	}
	state := request.Request{W: w, Req: r}
	qname := state.Name()
	if plugin.Zones(h.Zones).Matches(qname) == "" {
		return plugin.NextOrFailure(h.Name(), h.Next, ctx, w, r)
	}
	qtype := state.QType()
	switch {
	case !validName(qname):
		// Empty or over-long labels cannot be names in the zone, nor go back into a reply.
		countQuery(qtype, resultFormErr)
		return dns.RcodeFormatError, nil
	case state.QClass() != dns.ClassINET && state.QClass() != dns.ClassANY:
		// The zone exists only in class IN; other classes are not ours to answer.
		countQuery(qtype, resultRefused)
		return dns.RcodeRefused, nil
	case qtype == dns.TypeAXFR || qtype == dns.TypeIXFR:
		// No zone transfers: the zone is a view of one cluster's API, not a file to copy.
		countQuery(qtype, resultRefused)
		return dns.RcodeRefused, nil
	case !h.Source.HasSynced():
		// An incomplete index would deny names that exist (STYLE rule 13).
		countQuery(qtype, resultServFail)
		return dns.RcodeServerFailure, nil
	}

	res := h.Source.Lookup(qname, qtype)
	if res.Rcode == dns.RcodeNameError && h.Fall.Through(qname) {
		countQuery(qtype, resultFallthrough)
		return plugin.NextOrFailure(h.Name(), h.Next, ctx, w, r)
	}
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.Rcode = res.Rcode
	m.Answer, m.Ns, m.Extra = res.Answer, res.Ns, res.Extra
	switch {
	case res.Rcode == dns.RcodeNameError:
		countQuery(qtype, resultNXDomain)
	case len(res.Answer) == 0:
		countQuery(qtype, resultNoData)
	default:
		countQuery(qtype, resultAnswer)
	}
	if err := w.WriteMsg(m); err != nil {
		return dns.RcodeServerFailure, plugin.Error(pluginName, err)
	}
	return res.Rcode, nil
}

// validName reports whether name is a domain name a reply can carry.
func validName(name string) bool {
	_, ok := dns.IsDomainName(name)
	return ok
}
