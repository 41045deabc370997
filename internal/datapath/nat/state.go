package nat

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/octopus-mcs/octopus/internal/ipam"
)

// Protocol is a transport protocol, by its nftables name.
type Protocol string

// The protocols a Service port can have.
const (
	TCP  Protocol = "tcp"
	UDP  Protocol = "udp"
	SCTP Protocol = "sctp"
)

// protocols are the Protocols in the order the table's per-protocol maps and rules are built.
var protocols = []Protocol{TCP, UDP, SCTP}

// State is everything the gateway translates. Apply makes the kernel hold exactly this; the
// zero State translates nothing.
type State struct {
	// GlobalCIDRs are this cluster's global CIDRs, at most one per IP family. Traffic to them
	// that no ingress address translates is refused on the gateway (rather than routed on,
	// towards whatever the node's default route is), and traffic from them is already global
	// and never translated again (the gateway's own health-check address).
	GlobalCIDRs []netip.Prefix
	// RemoteCIDRs are the destinations egress is translated for: the global CIDRs of the other
	// globalnet clusters, and the pod and service CIDRs of direct-addressing clusters, which
	// cannot route the overlapping addresses of this one either. They must not overlap
	// GlobalCIDRs; nested or repeated ones are merged.
	RemoteCIDRs []netip.Prefix
	// TunnelDevice is the gateway's tunnel link: egress is translated only for packets leaving
	// through it. A node that is no longer the active gateway routes its pods' traffic to the
	// active one over its LAN, untranslated; so a table left there by a gateway process that
	// died (it could not delete it) translates none of that traffic, whose replies would
	// otherwise reach the active gateway with no connection to reverse and be refused.
	// Optional: empty translates whatever interface the packet leaves by.
	TunnelDevice string
	// ClusterEgress is the range the cluster's traffic to RemoteCIDRs leaves with, at most one
	// per IP family, within GlobalCIDRs. Without one, only PodEgress sources are translated.
	ClusterEgress []ipam.Range
	// PodEgress gives single pods their own egress range instead of ClusterEgress (the
	// precedence between pod, namespace and cluster ranges is the caller's: this is the result).
	PodEgress []PodEgress
	// Services are the ingress addresses of exported ClusterSetIP services.
	Services []Service
	// Pods are the ingress addresses of the pods of exported headless services, translated
	// one to one, every protocol and port.
	Pods []PodIngress
}

// PodEgress is one pod's egress range.
type PodEgress struct {
	Pod   netip.Addr
	Range ipam.Range
}

// Service is an exported ClusterSetIP service's global ingress address.
type Service struct {
	// Name identifies the service in the kernel's ruleset (`nft list`): "namespace/name".
	// Optional.
	Name     string
	GlobalIP netip.Addr
	Ports    []Port
}

// Port is one port of a Service and the ready endpoints it leads to. A port without endpoints
// is refused like an unknown one.
type Port struct {
	Protocol  Protocol
	Port      uint16
	Endpoints []netip.AddrPort
}

// PodIngress is a headless service's pod and its global ingress address.
type PodIngress struct {
	// Name identifies the pod in the kernel's ruleset: "namespace/name". Optional.
	Name     string
	GlobalIP netip.Addr
	Pod      netip.Addr
}

// only returns the part of s (normalized) that is of family f.
func (s State) only(f family) State {
	prefixes := func(ps []netip.Prefix) []netip.Prefix {
		return slices.DeleteFunc(slices.Clone(ps), func(p netip.Prefix) bool { return !f.has(p.Addr()) })
	}
	out := State{GlobalCIDRs: prefixes(s.GlobalCIDRs), RemoteCIDRs: prefixes(s.RemoteCIDRs), TunnelDevice: s.TunnelDevice}
	for _, r := range s.ClusterEgress {
		if f.has(r.First) {
			out.ClusterEgress = append(out.ClusterEgress, r)
		}
	}
	for _, e := range s.PodEgress {
		if f.has(e.Pod) {
			out.PodEgress = append(out.PodEgress, e)
		}
	}
	for _, svc := range s.Services {
		if f.has(svc.GlobalIP) {
			out.Services = append(out.Services, svc)
		}
	}
	for _, p := range s.Pods {
		if f.has(p.GlobalIP) {
			out.Pods = append(out.Pods, p)
		}
	}
	return out
}

// normalize checks s and returns a copy in canonical order (so that equal states give equal
// transactions) with RemoteCIDRs merged. Every error names the offending value.
func normalize(s State) (State, error) {
	c := &checker{claimed: map[netip.Addr]string{}}
	out := State{
		GlobalCIDRs: c.globalCIDRs(s.GlobalCIDRs),
		RemoteCIDRs: c.remoteCIDRs(s.RemoteCIDRs),
	}
	c.tunnelDevice(s.TunnelDevice)
	out.TunnelDevice = s.TunnelDevice
	out.ClusterEgress = c.clusterEgress(s.ClusterEgress)
	out.PodEgress = c.podEgress(s.PodEgress)
	out.Services = c.services(s.Services)
	out.Pods = c.pods(s.Pods)
	if err := errors.Join(c.errs...); err != nil {
		return State{}, fmt.Errorf("invalid NAT state: %w", err)
	}
	return out, nil
}

// checker collects what is wrong with a State, field by field in normalize's order, so that
// one error lists every problem.
type checker struct {
	errs []error
	// global are the State's global CIDRs, once globalCIDRs has read them.
	global []netip.Prefix
	// claimed says what each global IP is given to so far: one global IP leads to one thing,
	// a service or a pod.
	claimed map[netip.Addr]string
}

func (c *checker) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// addr checks that a is an address in its plain form: an IPv4-mapped IPv6 address would be
// put in the IPv6 family's sets, where no IPv4 packet is ever looked up.
func (c *checker) addr(what string, a netip.Addr) {
	switch {
	case !a.IsValid():
		c.fail("%s: no address", what)
	case a.Is4In6():
		c.fail("%s %s: an IPv4-mapped IPv6 address; give it as %s", what, a, a.Unmap())
	}
}

// sameFamily checks that b, which a leads to or comes from, is of a's IP family: a
// translation never changes the family (NAT46 is not what globalnet does).
func (c *checker) sameFamily(what string, a, b netip.Addr) {
	if a.IsValid() && b.IsValid() && a.Is4() != b.Is4() {
		c.fail("%s: %s and %s are of different IP families", what, a, b)
	}
}

// onePerFamily checks that addrs, the first addresses of what, hold at most one per IP family.
func (c *checker) onePerFamily(what string, addrs []netip.Addr, all any) {
	if v4 := slices.IndexFunc(addrs, netip.Addr.Is4); v4 >= 0 && slices.ContainsFunc(addrs[v4+1:], netip.Addr.Is4) {
		c.fail("%s %v: at most one per IP family", what, all)
	} else if v6 := slices.IndexFunc(addrs, netip.Addr.Is6); v6 >= 0 && slices.ContainsFunc(addrs[v6+1:], netip.Addr.Is6) {
		c.fail("%s %v: at most one per IP family", what, all)
	}
}

// inGlobal checks that a is an address inside the cluster's global CIDR of its family.
func (c *checker) inGlobal(what string, a netip.Addr) {
	c.addr(what, a)
	if a.IsValid() && !slices.ContainsFunc(c.global, func(p netip.Prefix) bool { return p.Contains(a) }) {
		c.fail("%s %s is outside the cluster's global CIDRs %v", what, a, c.global)
	}
}

// claim gives ip to what, unless something else has it already.
func (c *checker) claim(ip netip.Addr, what string) {
	if prev, dup := c.claimed[ip]; dup {
		c.fail("global IP %s is given to both %s and %s", ip, prev, what)
	}
	c.claimed[ip] = what
}

func (c *checker) globalCIDRs(in []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	var firsts []netip.Addr
	for _, p := range in {
		c.addr("global CIDR", p.Addr())
		out = append(out, p.Masked())
		firsts = append(firsts, p.Addr())
	}
	c.onePerFamily("global CIDRs", firsts, out)
	// IPv4 first, so that equal states give equal transactions whatever the order given.
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	c.global = out
	return out
}

func (c *checker) remoteCIDRs(in []netip.Prefix) []netip.Prefix {
	for _, p := range in {
		c.addr("remote CIDR", p.Addr())
		if g, hit := ipam.FirstOverlap(p, c.global); hit {
			c.fail("remote CIDR %s overlaps the cluster's global CIDR %s", p, g)
		}
	}
	return mergePrefixes(in)
}

func (c *checker) tunnelDevice(d string) {
	// An interface name is at most 15 bytes (IFNAMSIZ), and quoted in the rule.
	if len(d) > 15 || strings.ContainsAny(d, "\"\\ \t\n") {
		c.fail("tunnel device %q: not an interface name", d)
	}
}

func (c *checker) clusterEgress(in []ipam.Range) []ipam.Range {
	var out []ipam.Range
	var firsts []netip.Addr
	for _, r := range in {
		if err := r.Validate(); err != nil {
			c.fail("cluster egress: %w", err)
			continue
		}
		c.inGlobal("cluster egress range start", r.First)
		c.inGlobal("cluster egress range end", r.Last)
		out = append(out, r)
		firsts = append(firsts, r.First)
	}
	c.onePerFamily("cluster egress ranges", firsts, out)
	slices.SortFunc(out, func(a, b ipam.Range) int { return a.First.Compare(b.First) })
	return out
}

func (c *checker) podEgress(in []PodEgress) []PodEgress {
	var out []PodEgress
	seenSrc := map[netip.Addr]bool{}
	for _, e := range in {
		c.addr("egress pod", e.Pod)
		if err := e.Range.Validate(); err != nil {
			c.fail("egress of pod %s: %w", e.Pod, err)
			continue
		}
		c.sameFamily("egress range of pod "+e.Pod.String(), e.Pod, e.Range.First)
		c.inGlobal("egress range start of pod "+e.Pod.String()+":", e.Range.First)
		c.inGlobal("egress range end of pod "+e.Pod.String()+":", e.Range.Last)
		if seenSrc[e.Pod] {
			c.fail("pod %s has two egress ranges", e.Pod)
		}
		seenSrc[e.Pod] = true
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b PodEgress) int { return a.Pod.Compare(b.Pod) })
	return out
}

func (c *checker) services(in []Service) []Service {
	var out []Service
	for _, svc := range in {
		out = append(out, c.service(svc))
	}
	slices.SortFunc(out, func(a, b Service) int { return a.GlobalIP.Compare(b.GlobalIP) })
	return out
}

// service checks one service and returns it with its ports, and each port's endpoints, in
// canonical order.
func (c *checker) service(svc Service) Service {
	what := cmp.Or(svc.Name, "a service")
	c.inGlobal("ingress address of "+what, svc.GlobalIP)
	c.claim(svc.GlobalIP, what)
	out := Service{Name: svc.Name, GlobalIP: svc.GlobalIP}
	type portKey struct {
		proto Protocol
		port  uint16
	}
	seenPort := map[portKey]bool{}
	for _, p := range svc.Ports {
		switch p.Protocol {
		case TCP, UDP, SCTP:
		default:
			c.fail("%s port %d: protocol %q is not one of tcp, udp, sctp", what, p.Port, p.Protocol)
		}
		if p.Port == 0 {
			c.fail("%s: port 0", what)
		}
		key := portKey{p.Protocol, p.Port}
		if seenPort[key] {
			c.fail("%s has port %d/%s twice", what, p.Port, p.Protocol)
		}
		seenPort[key] = true
		out.Ports = append(out.Ports, Port{Protocol: p.Protocol, Port: p.Port, Endpoints: c.endpoints(what, svc.GlobalIP, p)})
	}
	slices.SortFunc(out.Ports, func(a, b Port) int {
		return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
	})
	return out
}

// endpoints checks the endpoints of port p of the service what and returns them sorted and
// deduplicated, so that an endpoint's index, and so the element that holds it, stays the same
// while the set does.
func (c *checker) endpoints(what string, global netip.Addr, p Port) []netip.AddrPort {
	eps := slices.Clone(p.Endpoints)
	for _, ep := range eps {
		c.addr(fmt.Sprintf("endpoint of %s port %d/%s", what, p.Port, p.Protocol), ep.Addr())
		c.sameFamily(fmt.Sprintf("ingress address and endpoint of %s port %d/%s", what, p.Port, p.Protocol), global, ep.Addr())
		if ep.Port() == 0 {
			c.fail("endpoint %s of %s: port 0", ep, what)
		}
	}
	slices.SortFunc(eps, netip.AddrPort.Compare)
	return slices.Compact(eps)
}

func (c *checker) pods(in []PodIngress) []PodIngress {
	var out []PodIngress
	for _, p := range in {
		what := cmp.Or(p.Name, "pod "+p.Pod.String())
		c.inGlobal("ingress address of "+what, p.GlobalIP)
		c.addr(what, p.Pod)
		c.sameFamily("ingress address and address of "+what, p.GlobalIP, p.Pod)
		c.claim(p.GlobalIP, what)
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b PodIngress) int { return a.GlobalIP.Compare(b.GlobalIP) })
	return out
}

// mergePrefixes returns the prefixes sorted with every one that lies inside another dropped:
// an nftables interval set refuses overlapping elements.
func mergePrefixes(ps []netip.Prefix) []netip.Prefix {
	sorted := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		sorted = append(sorted, p.Masked())
	}
	// Shorter prefixes first among equal addresses, so a covering prefix precedes what it covers.
	slices.SortFunc(sorted, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	var out []netip.Prefix
	for _, p := range sorted {
		if n := len(out); n > 0 && out[n-1].Overlaps(p) {
			continue // sorted by address, so an overlapping predecessor contains p
		}
		out = append(out, p)
	}
	return out
}
