// Package ingressfilter decides, on a gateway node, what may come out of the tunnel: packets
// that arrive on a tunnel device reach only this cluster's advertised prefixes (its pod and
// service CIDRs and secondary block, or under globalnet its global CIDR, whose untranslated
// addresses the NAT refuses), never an address of the node itself but the health-check
// address, and that one only for ICMP echo (the health probes). VXLAN datagrams are accepted
// on the tunnel port only from the remote gateways' endpoints. Replies to connections this
// cluster opened pass whatever their addresses.
//
// It writes one nftables table, owner.IngressFilterNFTTable, from a desired State in one
// transaction, and imports no Kubernetes package: the gateway process computes the State.
//
// Where it hooks, and why (measured by TestKernelFilter):
//   - prerouting at dstnat-20: after conntrack (-200), so replies are recognised, and before
//     any DNAT (globalnet's at dstnat-10, kube-proxy's at dstnat), so the destination checked
//     is the one the remote cluster chose, not a pod address a translation made of it. A
//     globalnet cluster's private pod addresses are therefore unreachable from the tunnel,
//     while its exported global addresses, translated later, still work.
//   - `fib daddr type local` drops every address of the node (its underlay address, the pod
//     CIDR host address a bridge CNI gives it, kube-ipvs0's ClusterIPs) before the advertised
//     prefixes are accepted, since a node address may lie inside them and every host service
//     listening on 0.0.0.0 (kubelet, sshd, metrics) would answer there.
//   - input at filter-20 for the vxlan port: only datagrams delivered to this node are
//     checked, so pods' forwarded traffic to the same UDP port is not touched.
//
// A drop here is final whatever other tables accept (netfilter runs every base chain of a hook
// and a drop in any of them ends the packet; internal/datapath/hostfirewall measures the
// converse).
package ingressfilter

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// State is what the table lets through. The zero State lets nothing out of a tunnel (there is
// none to name) and filters no vxlan port.
type State struct {
	// Tunnels are the tunnel devices (wireguard or vxlan) whose decapsulated traffic is
	// filtered. Without any, nothing is filtered.
	Tunnels []string
	// Destinations are the prefixes traffic from a tunnel may go to: the cluster's advertised
	// ones, and on the hub's gateway the members' it forwards between. Node addresses inside
	// them stay refused.
	Destinations []netip.Prefix
	// HealthCheck are the node addresses that answer ICMP echo from the tunnel (the gateway's
	// health-check address on its tunnel device).
	HealthCheck []netip.Addr
	// VXLANPort is the UDP port of the vxlan tunnel; 0 (wireguard) filters no port.
	VXLANPort uint16
	// VXLANSources are the remote gateways' endpoint addresses, the only sources accepted on
	// VXLANPort.
	VXLANSources []netip.Addr
}

// Names in the table; the kernel lists them under these names.
const (
	chainPrerouting = "prerouting"
	chainInput      = "input"
	chainFromTunnel = "from-tunnel"
	setDest4        = "destinations-v4"
	setDest6        = "destinations-v6"
	setHealth4      = "health-check-v4"
	setHealth6      = "health-check-v6"
	setVXLAN4       = "vxlan-sources-v4"
	setVXLAN6       = "vxlan-sources-v6"
)

// preroutingPriority: after conntrack, before every DNAT (globalnet's runs at dstnat-10).
const preroutingPriority = knftables.DNATPriority + "-20"

// inputPriority runs before the host firewall table (filter-10) and typical host firewalls.
const inputPriority = knftables.FilterPriority + "-20"

// Filter writes owner.IngressFilterNFTTable in the network namespace of the thread that calls it.
type Filter struct {
	nft knftables.Interface
}

// New drives the nft binary for the table, in the calling thread's network namespace.
func New() (*Filter, error) {
	nft, err := knftables.New(knftables.InetFamily, owner.IngressFilterNFTTable)
	if err != nil {
		return nil, fmt.Errorf("preparing nftables for the tunnel ingress filter (is the nft binary installed? hack/install-deps.sh installs it): %w", err)
	}
	return NewWith(nft), nil
}

// NewWith uses nft, e.g. knftables.NewFake(knftables.InetFamily, owner.IngressFilterNFTTable) in tests.
func NewWith(nft knftables.Interface) *Filter { return &Filter{nft: nft} }

// Apply makes the table hold exactly s, replacing what it held, in one transaction: the
// chains and sets are added, flushed and refilled, so there is no moment in which the
// tunnel is unfiltered.
func (f *Filter) Apply(ctx context.Context, s State) error {
	tx := f.nft.NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("octopus gateway: what may come out of the tunnel")})
	base := []knftables.Chain{
		{Name: chainPrerouting, Type: knftables.PtrTo(knftables.FilterType), Hook: knftables.PtrTo(knftables.PreroutingHook), Priority: knftables.PtrTo(preroutingPriority)},
		{Name: chainInput, Type: knftables.PtrTo(knftables.FilterType), Hook: knftables.PtrTo(knftables.InputHook), Priority: knftables.PtrTo(inputPriority)},
		{Name: chainFromTunnel},
	}
	for i := range base {
		tx.Add(&base[i])
		tx.Flush(&knftables.Chain{Name: base[i].Name})
	}
	sets := []struct {
		name, typ string
		interval  bool
		elems     []string
	}{
		{setDest4, "ipv4_addr", true, prefixes(s.Destinations, true)},
		{setDest6, "ipv6_addr", true, prefixes(s.Destinations, false)},
		{setHealth4, "ipv4_addr", false, addrs(s.HealthCheck, true)},
		{setHealth6, "ipv6_addr", false, addrs(s.HealthCheck, false)},
		{setVXLAN4, "ipv4_addr", false, addrs(s.VXLANSources, true)},
		{setVXLAN6, "ipv6_addr", false, addrs(s.VXLANSources, false)},
	}
	for _, set := range sets {
		ks := &knftables.Set{Name: set.name, Type: set.typ}
		if set.interval {
			ks.Flags = []knftables.SetFlag{knftables.IntervalFlag}
		}
		tx.Add(ks)
		tx.Flush(&knftables.Set{Name: set.name})
		for _, e := range set.elems {
			tx.Add(&knftables.Element{Set: set.name, Key: []string{e}})
		}
	}
	for _, r := range rules(s) {
		tx.Add(r)
	}
	if err := f.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("writing the tunnel ingress filter (nftables table inet %s): %w", owner.IngressFilterNFTTable, err)
	}
	return nil
}

// rules are the table's rules for s, in chain order.
func rules(s State) []*knftables.Rule {
	var rs []*knftables.Rule
	add := func(chain string, rule ...string) {
		rs = append(rs, &knftables.Rule{Chain: chain, Rule: knftables.Concat(rule)})
	}
	if tunnels := ifnameSet(s.Tunnels); tunnels != "" {
		add(chainPrerouting, "iifname", tunnels, "jump", chainFromTunnel)
		// Replies to what this cluster opened (also its pods' egress under globalnet,
		// whose replies come back to an egress address no one exported).
		add(chainFromTunnel, "ct state established,related return")
		// Protocols by number: nft resolves names through /etc/protocols, which the
		// gateway's image lacks ("Could not resolve protocol name" for ipv6-icmp made every
		// gateway pod exit at start; TestApplyWithoutProtocolsFile).
		add(chainFromTunnel, "meta l4proto 1 icmp type echo-request ip daddr", "@"+setHealth4, "return")
		add(chainFromTunnel, "meta l4proto 58 icmpv6 type echo-request ip6 daddr", "@"+setHealth6, "return")
		add(chainFromTunnel, "fib daddr type local counter drop comment", `"a node address"`)
		add(chainFromTunnel, "ip daddr", "@"+setDest4, "return")
		add(chainFromTunnel, "ip6 daddr", "@"+setDest6, "return")
		add(chainFromTunnel, "counter drop comment", `"not advertised"`)
	}
	if s.VXLANPort != 0 {
		port := strconv.Itoa(int(s.VXLANPort))
		add(chainInput, "meta nfproto ipv4 udp dport", port, "ip saddr !=", "@"+setVXLAN4, "counter drop comment", `"vxlan from a non-gateway"`)
		add(chainInput, "meta nfproto ipv6 udp dport", port, "ip6 saddr !=", "@"+setVXLAN6, "counter drop comment", `"vxlan from a non-gateway"`)
	}
	return rs
}

// Delete deletes the table; a table already gone is no error.
func (f *Filter) Delete(ctx context.Context) error {
	tx := f.nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := f.nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
		return fmt.Errorf("deleting nftables table inet %s: %w", owner.IngressFilterNFTTable, err)
	}
	return nil
}

// ifnameSet is `{ "a", "b" }` of the distinct non-empty names, sorted; "" for none.
func ifnameSet(names []string) string {
	ns := slices.Clone(names)
	slices.Sort(ns)
	ns = slices.Compact(ns)
	ns = slices.DeleteFunc(ns, func(n string) bool { return n == "" })
	if len(ns) == 0 {
		return ""
	}
	for i, n := range ns {
		ns[i] = strconv.Quote(n)
	}
	return "{ " + strings.Join(ns, ", ") + " }"
}

// prefixes are the masked prefixes of one family, sorted, without any that another contains
// (an interval set refuses overlapping elements).
func prefixes(ps []netip.Prefix, v4 bool) []string {
	var kept []netip.Prefix
	for _, p := range ps {
		if p.IsValid() && p.Addr().Unmap().Is4() == v4 {
			kept = append(kept, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p)).Masked())
		}
	}
	// Shortest first, so a prefix is checked against every wider one already kept.
	slices.SortFunc(kept, func(a, b netip.Prefix) int {
		if a.Bits() != b.Bits() {
			return a.Bits() - b.Bits()
		}
		return a.Addr().Compare(b.Addr())
	})
	var out []netip.Prefix
	for _, p := range kept {
		if !slices.ContainsFunc(out, func(w netip.Prefix) bool { return w.Contains(p.Addr()) }) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	s := make([]string, len(out))
	for i, p := range out {
		s[i] = p.String()
	}
	return s
}

// unmapBits is what an IPv4-mapped IPv6 prefix loses on unmapping.
func unmapBits(p netip.Prefix) int {
	if p.Addr().Is4In6() {
		return 96
	}
	return 0
}

// addrs are the distinct addresses of one family, sorted.
func addrs(as []netip.Addr, v4 bool) []string {
	var kept []netip.Addr
	for _, a := range as {
		if a.IsValid() && a.Unmap().Is4() == v4 {
			kept = append(kept, a.Unmap())
		}
	}
	slices.SortFunc(kept, netip.Addr.Compare)
	kept = slices.Compact(kept)
	s := make([]string, len(kept))
	for i, a := range kept {
		s[i] = a.String()
	}
	return s
}
