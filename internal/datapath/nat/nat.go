// Package nat is globalnet's data plane: on the active gateway it translates other clusters'
// traffic to this cluster's global ingress addresses into its pods (DNAT), and this cluster's
// traffic to other clusters into its global egress addresses (SNAT), in each IP family the
// cluster has a global CIDR of (the sets, maps and chains below end in -v4 or -v6). Everything lives in one
// nftables table, owner.GlobalnetNFTTable, which Apply rewrites from a desired State in one
// transaction. It imports no Kubernetes package: the caller turns API objects into a State.
//
// The rules are static; what changes with services and pods is held in sets and maps, so that an
// export, an unexport or a pod becoming ready changes elements, never rules:
//
//	prerouting  (nat, dstnat-10)   ip daddr . meta l4proto . th dport vmap @ingress-services-v4
//	                                 → goto ingress-lb-<k>-v4, the chain of services with k endpoints:
//	                                   dnat to @ingress-endpoints-<proto>-v4[daddr . proto . port . numgen random mod k]
//	                                   (one rule and one map per protocol, tcp, udp and sctp)
//	                               dnat ip to ip daddr map @ingress-pods-v4        (headless pods, 1:1)
//	postrouting (nat, srcnat-10)   out of the tunnel device, to @remote-cidrs-v4, not from @global-cidrs-v4:
//	                                 snat to @egress-pods-v4[saddr], else to the cluster's egress range
//	forward     (filter, filter)   to @global-cidrs-v4 and still untranslated: reject
//
// Why the ingress translation goes straight to the endpoints, not to the service's ClusterIP:
// netfilter binds a connection's destination NAT once, in the first nat chain that sets one, and
// skips the later nat chains of that hook. A DNAT to the ClusterIP here would therefore skip
// kube-proxy's own DNAT of that ClusterIP (whatever its mode) and the packet would be routed to
// an address nobody owns. Picking the endpoint ourselves, as kube-proxy's nftables mode does,
// needs neither kube-proxy's chains nor a Service with externalIPs. See docs/architecture.md
// (globalnet) for the packet paths.
package nat

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// Chains, sets and maps of the table. Set and map names, and the chains that depend on an IP
// family, end in the family's suffix (family.name).
const (
	chainPrerouting  = "prerouting"
	chainPostrouting = "postrouting"
	chainForward     = "forward"
	// lbChainPrefix + k + "-" + suffix is the chain that picks one of k endpoints. One chain per
	// endpoint count in use, not per service: nftables' numgen takes a constant modulus.
	lbChainPrefix = "ingress-lb-"

	setGlobalCIDRs      = "global-cidrs"
	setRemoteCIDRs      = "remote-cidrs"
	mapEgressPods       = "egress-pods"
	mapIngressServices  = "ingress-services"
	mapIngressEndpoints = "ingress-endpoints"
	mapIngressPods      = "ingress-pods"
)

// baseChains are the table's hooks. The NAT chains run 10 before the usual NAT priorities
// because netfilter applies only the first NAT binding of a connection per direction: our
// DNAT of a global address must come before any other (kube-proxy's, a CNI's), and our egress
// SNAT before the node's masquerade rules (kube-proxy's at srcnat, a CNI's or ip-masq-agent's),
// which would otherwise claim the connection with the node's address.
var baseChains = []baseChain{
	{chainPrerouting, knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority + "-10"},
	{chainPostrouting, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority + "-10"},
	{chainForward, knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority},
}

type baseChain struct {
	name     string
	typ      knftables.BaseChainType
	hook     knftables.BaseChainHook
	priority knftables.BaseChainPriority
}

// family is what differs between IPv4 and IPv6 in the table: every set, map and rule is built
// from one of these, so IPv6 is a second value (and tests), not a second code path.
type family struct {
	suffix   string // ends the names of the family's sets, maps and chains
	addrType string // nftables type of an address
	proto    string // payload protocol and NAT family keyword
}

var (
	ipv4 = family{suffix: "v4", addrType: "ipv4_addr", proto: "ip"}
	ipv6 = family{suffix: "v6", addrType: "ipv6_addr", proto: "ip6"}
)

// has reports whether a is of the family.
func (f family) has(a netip.Addr) bool { return a.Is4() == (f == ipv4) }

func (f family) name(base string) string { return base + "-" + f.suffix }

func (f family) lbChain(k int) string { return lbChainPrefix + strconv.Itoa(k) + "-" + f.suffix }

// DefaultFullSyncInterval is how often Apply rewrites every element even when it knows what the
// kernel holds, repairing anything someone else changed in our table.
const DefaultFullSyncInterval = 5 * time.Minute

// NAT writes the table owner.GlobalnetNFTTable in the network namespace of the thread that
// calls it (the gateway runs in its node's). It is safe for concurrent use.
type NAT struct {
	nft              knftables.Interface
	now              func() time.Time
	fullSyncInterval time.Duration

	mu sync.Mutex
	// applied is what the last successful Apply left in the sets and maps (name → key →
	// element). nil means unknown (none yet, or the last one failed): the next Apply rewrites
	// every element. Otherwise Apply sends only the difference, so one new export costs a few
	// elements however many there are.
	applied map[string]map[string]*knftables.Element
	// appliedMaps names the maps among applied's containers (the others are sets).
	appliedMaps map[string]bool
	// lastFull is when the last full rewrite succeeded.
	lastFull time.Time
	// lbChains are the load-balancing chains in the kernel after the last successful Apply.
	lbChains map[string]bool
	// orphaned are load-balancing chains no element pointed to after the last successful Apply.
	// They are deleted by the next one, never by the transaction that removes the elements
	// pointing to them: kernels before 6.2 can refuse to delete a chain whose last reference
	// (a verdict map element) goes in the same transaction (kube-proxy's nftables proxier
	// deletes its stale chains late for the same reason).
	orphaned map[string]bool
}

// Options configures New.
type Options struct {
	// FullSyncInterval: see DefaultFullSyncInterval. Optional.
	FullSyncInterval time.Duration
}

// New drives the nft binary for the table, in the calling thread's network namespace.
func New(o Options) (*NAT, error) {
	nft, err := knftables.New(knftables.InetFamily, owner.GlobalnetNFTTable)
	if err != nil {
		return nil, fmt.Errorf("preparing nftables (is the nft binary installed? hack/install-deps.sh installs it): %w", err)
	}
	return NewWith(nft, o), nil
}

// NewWith uses nft, e.g. knftables.NewFake(knftables.InetFamily, owner.GlobalnetNFTTable) in tests.
func NewWith(nft knftables.Interface, o Options) *NAT {
	if o.FullSyncInterval <= 0 {
		o.FullSyncInterval = DefaultFullSyncInterval
	}
	return &NAT{nft: nft, now: time.Now, fullSyncInterval: o.FullSyncInterval}
}

// Apply makes the table translate exactly s, in one transaction: a packet sees the old
// translation or the new one, never a mix and never none, and connections already translated
// keep their conntrack binding whatever changes. Calling it again with an equal State, also
// from a new process after a restart, changes nothing a packet can see. An invalid State is
// refused before the kernel is touched.
func (n *NAT) Apply(ctx context.Context, s State) error {
	s, err := normalize(s)
	if err != nil {
		return err
	}
	want := build(s)

	n.mu.Lock()
	defer n.mu.Unlock()
	full := n.applied == nil || n.now().Sub(n.lastFull) >= n.fullSyncInterval
	lbChains := n.lbChains
	var stale staleObjects
	if full {
		// Only a full sync reads the table from the kernel (to find what an earlier process
		// left): listing costs nft a read of the whole table, elements included.
		var err error
		if lbChains, stale, err = n.listKernel(ctx, want); err != nil {
			return err
		}
	}

	tx := n.nft.NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("octopus globalnet: global ingress addresses (DNAT) and egress addresses (SNAT)")})
	for _, c := range baseChains {
		tx.Add(&knftables.Chain{Name: c.name, Type: knftables.PtrTo(c.typ), Hook: knftables.PtrTo(c.hook), Priority: knftables.PtrTo(c.priority)})
		tx.Flush(&knftables.Chain{Name: c.name})
	}
	for _, set := range want.sets {
		tx.Add(set)
	}
	for _, m := range want.maps {
		tx.Add(m)
	}
	// Chains before the elements that point to them; rules after the sets they name.
	for _, name := range want.lbChainNames() {
		tx.Add(&knftables.Chain{Name: name})
		tx.Flush(&knftables.Chain{Name: name})
	}
	for _, r := range want.rules {
		tx.Add(r)
	}
	if full {
		for _, name := range want.containers() {
			if want.isMap(name) {
				tx.Flush(&knftables.Map{Name: name})
			} else {
				tx.Flush(&knftables.Set{Name: name})
			}
		}
		for _, name := range want.containers() {
			for _, key := range slices.Sorted(maps.Keys(want.elements[name])) {
				tx.Add(want.elements[name][key])
			}
		}
	} else {
		diffElements(tx, n.applied, want.elements)
		// A family the cluster no longer has (its global CIDR gone) leaves sets and maps
		// that no rule names any more.
		stale = n.goneContainers(want)
	}
	orphaned := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(lbChains)) {
		switch {
		case want.lbChains[name]:
		case n.orphaned[name]:
			tx.Delete(&knftables.Chain{Name: name})
		default:
			// Emptied now, deleted by the next Apply: its rules name the endpoint maps,
			// which go in this transaction when their IP family does.
			tx.Flush(&knftables.Chain{Name: name})
			orphaned[name] = true
		}
	}
	stale.remove(tx)
	if err := n.nft.Run(ctx, tx); err != nil {
		n.applied = nil
		return fmt.Errorf("writing nftables table %s: %w", owner.GlobalnetNFTTable, err)
	}
	n.applied = want.elements
	n.appliedMaps = map[string]bool{}
	for _, m := range want.maps {
		n.appliedMaps[m.Name] = true
	}
	n.orphaned = orphaned
	n.lbChains = maps.Clone(want.lbChains)
	maps.Copy(n.lbChains, orphaned)
	if full {
		n.lastFull = n.now()
	}
	return nil
}

// staleObjects are chains, sets and maps of the table that the desired ruleset does not name:
// what an older version of the gateway built (a renamed map, a chain it no longer has). A table
// is never recreated to get rid of them (that would drop every translation for a moment), so a
// full sync deletes them in its transaction.
type staleObjects struct {
	chains, sets, maps []string
}

// remove adds the deletions to tx, after the flushes and adds of the wanted objects: by then the
// base chains hold only the new rules, so nothing wanted references a stale set or map. A
// stale chain is emptied first, then the sets and maps its rules (or other stale rules) used go,
// then the chain itself, which a stale verdict map may have pointed to.
func (s staleObjects) remove(tx *knftables.Transaction) {
	for _, name := range s.chains {
		tx.Flush(&knftables.Chain{Name: name})
	}
	for _, name := range s.maps {
		tx.Delete(&knftables.Map{Name: name})
	}
	for _, name := range s.sets {
		tx.Delete(&knftables.Set{Name: name})
	}
	for _, name := range s.chains {
		tx.Delete(&knftables.Chain{Name: name})
	}
}

// goneContainers are the sets and maps the last Apply wrote that want no longer has.
func (n *NAT) goneContainers(want *ruleset) staleObjects {
	var gone staleObjects
	for _, name := range slices.Sorted(maps.Keys(n.applied)) {
		if _, ok := want.elements[name]; ok {
			continue
		}
		if n.appliedMaps[name] {
			gone.maps = append(gone.maps, name)
		} else {
			gone.sets = append(gone.sets, name)
		}
	}
	return gone
}

// listKernel reads the table's chains, sets and maps from the kernel: the load-balancing chains
// there (Apply keeps deleting unused ones a transaction late), and everything want does not name.
func (n *NAT) listKernel(ctx context.Context, want *ruleset) (map[string]bool, staleObjects, error) {
	list := func(what string) ([]string, error) {
		names, err := n.nft.List(ctx, what)
		if err != nil && !knftables.IsNotFound(err) {
			return nil, fmt.Errorf("listing the %s of nftables table %s: %w", what, owner.GlobalnetNFTTable, err)
		}
		return names, nil
	}
	var stale staleObjects
	chains, err := list("chains")
	if err != nil {
		return nil, stale, err
	}
	lbChains := map[string]bool{}
	for _, name := range chains {
		switch {
		case strings.HasPrefix(name, lbChainPrefix):
			lbChains[name] = true
		case !slices.ContainsFunc(baseChains, func(c baseChain) bool { return c.name == name }):
			stale.chains = append(stale.chains, name)
		}
	}
	for _, what := range []string{"sets", "maps"} {
		names, err := list(what)
		if err != nil {
			return nil, stale, err
		}
		for _, name := range names {
			if _, wanted := want.elements[name]; wanted {
				continue
			}
			if what == "sets" {
				stale.sets = append(stale.sets, name)
			} else {
				stale.maps = append(stale.maps, name)
			}
		}
	}
	slices.Sort(stale.chains)
	slices.Sort(stale.sets)
	slices.Sort(stale.maps)
	return lbChains, stale, nil
}

// Delete removes the table and with it every translation; a table that is already gone is
// fine. Connections translated before keep their conntrack bindings until they end.
func (n *NAT) Delete(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.applied, n.orphaned, n.lbChains = nil, nil, nil
	tx := n.nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := n.nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
		return fmt.Errorf("deleting nftables table %s: %w", owner.GlobalnetNFTTable, err)
	}
	return nil
}

// diffElements adds to tx what turns the elements of applied into those of want. A changed
// element is deleted and added again: the kernel refuses to add a map key that exists.
func diffElements(tx *knftables.Transaction, applied, want map[string]map[string]*knftables.Element) {
	for _, name := range slices.Sorted(maps.Keys(applied)) {
		if _, kept := want[name]; !kept {
			continue // the whole set or map goes (goneContainers)
		}
		for _, key := range slices.Sorted(maps.Keys(applied[name])) {
			if w, ok := want[name][key]; !ok || !sameValue(w, applied[name][key]) {
				tx.Delete(applied[name][key])
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		for _, key := range slices.Sorted(maps.Keys(want[name])) {
			if a, ok := applied[name][key]; !ok || !sameValue(a, want[name][key]) {
				tx.Add(want[name][key])
			}
		}
	}
}

func sameValue(a, b *knftables.Element) bool {
	return slices.Equal(a.Value, b.Value) && (a.Comment == nil) == (b.Comment == nil) &&
		(a.Comment == nil || *a.Comment == *b.Comment)
}

// ruleset is the desired content of the table, built from a normalized State.
type ruleset struct {
	sets     []*knftables.Set
	maps     []*knftables.Map
	rules    []*knftables.Rule
	lbChains map[string]bool
	// elements holds every set's and map's elements: name → key → element.
	elements map[string]map[string]*knftables.Element
}

func (t *ruleset) lbChainNames() []string { return slices.Sorted(maps.Keys(t.lbChains)) }

func (t *ruleset) containers() []string { return slices.Sorted(maps.Keys(t.elements)) }

func (t *ruleset) isMap(name string) bool {
	return slices.ContainsFunc(t.maps, func(m *knftables.Map) bool { return m.Name == name })
}

func (t *ruleset) add(e *knftables.Element) {
	name := e.Set + e.Map
	t.elements[name][strings.Join(e.Key, " . ")] = e
}

// build computes the table for s (normalized): the sets, maps and rules of each IP family the
// cluster has a global CIDR of, side by side in the inet table's chains. A cluster without any
// global CIDR gets the IPv4 family's, empty: the table exists and translates nothing.
func build(s State) *ruleset {
	t := &ruleset{lbChains: map[string]bool{}, elements: map[string]map[string]*knftables.Element{}}
	built := false
	for _, f := range []family{ipv4, ipv6} {
		if slices.ContainsFunc(s.GlobalCIDRs, func(p netip.Prefix) bool { return f.has(p.Addr()) }) {
			t.buildFamily(f, s.only(f))
			built = true
		}
	}
	if !built {
		t.buildFamily(ipv4, State{})
	}
	return t
}

// buildFamily adds the sets, maps, rules and elements of family f for s, which holds only
// addresses of f.
func (t *ruleset) buildFamily(f family, s State) {
	set := func(base string) string {
		name := f.name(base)
		t.sets = append(t.sets, &knftables.Set{Name: name, Type: f.addrType, Flags: []knftables.SetFlag{knftables.IntervalFlag}})
		t.elements[name] = map[string]*knftables.Element{}
		return name
	}
	mapOf := func(base string, m knftables.Map) string {
		m.Name = f.name(base)
		t.maps = append(t.maps, &m)
		t.elements[m.Name] = map[string]*knftables.Element{}
		return m.Name
	}
	globalCIDRs := set(setGlobalCIDRs)
	remoteCIDRs := set(setRemoteCIDRs)
	egressPods := mapOf(mapEgressPods, knftables.Map{Type: f.addrType + " : interval " + f.addrType})
	ingressServices := mapOf(mapIngressServices, knftables.Map{Type: f.addrType + " . inet_proto . inet_service : verdict"})
	// typeof, not type: the numgen part of the key has no named type (and then the value's
	// type must be given by typeof too). The modulus here only describes the key's type; each
	// load-balancing chain uses its own. One map per protocol, because the value's port must be
	// typed by a protocol's header field ("th dport" there makes nft 1.0.6 unable to read the
	// map back from the kernel: every later rule naming it is refused with "conflicting
	// protocols specified: ip vs. th"), and nft may give a rule looking up a map whose value is
	// typed "tcp dport" an implicit "meta l4proto tcp" (1.0.6 did for every load-balancing chain
	// but the first one written): with a single map typed by TCP's port, UDP and SCTP ports
	// sharing a chain with a TCP port went untranslated and were refused in forward.
	ingressEndpoints := map[Protocol]string{}
	for _, p := range protocols {
		ingressEndpoints[p] = mapOf(mapIngressEndpoints+"-"+string(p), knftables.Map{
			TypeOf: f.proto + " daddr . meta l4proto . th dport . numgen random mod 1 : " + f.proto + " daddr . " + string(p) + " dport"})
	}
	ingressPods := mapOf(mapIngressPods, knftables.Map{Type: f.addrType + " : " + f.addrType})

	rule := func(chain string, parts ...any) {
		t.rules = append(t.rules, &knftables.Rule{Chain: chain, Rule: knftables.Concat(parts...)})
	}
	rule(chainPrerouting, f.proto, "daddr . meta l4proto . th dport vmap", "@", ingressServices)
	rule(chainPrerouting, "dnat", f.proto, "to", f.proto, "daddr map", "@", ingressPods)
	var egress []any
	if s.TunnelDevice != "" {
		egress = append(egress, "oifname", strconv.Quote(s.TunnelDevice))
	}
	egress = append(egress, f.proto, "daddr", "@", remoteCIDRs, f.proto, "saddr !=", "@", globalCIDRs, "snat", f.proto, "to")
	rule(chainPostrouting, append(egress, f.proto, "saddr map", "@", egressPods)...)
	for _, r := range s.ClusterEgress {
		rule(chainPostrouting, append(egress, r.String())...)
	}
	rule(chainForward, f.proto, "daddr", "@", globalCIDRs, "reject")

	for _, p := range s.GlobalCIDRs {
		t.add(&knftables.Element{Set: globalCIDRs, Key: []string{p.String()}})
	}
	for _, p := range s.RemoteCIDRs {
		t.add(&knftables.Element{Set: remoteCIDRs, Key: []string{p.String()}})
	}
	for _, e := range s.PodEgress {
		t.add(&knftables.Element{Map: egressPods, Key: []string{e.Pod.String()}, Value: []string{e.Range.String()}})
	}
	for _, svc := range s.Services {
		for _, p := range svc.Ports {
			k := len(p.Endpoints)
			if k == 0 {
				continue // refused in forward, like any address and port nothing translates
			}
			lb := f.lbChain(k)
			if !t.lbChains[lb] {
				t.lbChains[lb] = true
				for _, proto := range protocols {
					rule(lb, "dnat", f.proto, "to", f.proto, "daddr . meta l4proto . th dport . numgen random mod", k, "map", "@", ingressEndpoints[proto])
				}
			}
			key := []string{svc.GlobalIP.String(), string(p.Protocol), strconv.Itoa(int(p.Port))}
			t.add(&knftables.Element{Map: ingressServices, Key: key, Value: []string{"goto " + lb}, Comment: comment(svc.Name)})
			for i, ep := range p.Endpoints {
				t.add(&knftables.Element{Map: ingressEndpoints[p.Protocol], Key: append(slices.Clone(key), strconv.Itoa(i)),
					Value: []string{ep.Addr().String(), strconv.Itoa(int(ep.Port()))}})
			}
		}
	}
	for _, p := range s.Pods {
		t.add(&knftables.Element{Map: ingressPods, Key: []string{p.GlobalIP.String()}, Value: []string{p.Pod.String()},
			Comment: comment(p.Name)})
	}
}

func comment(name string) *string {
	if name == "" {
		return nil
	}
	return &name
}
