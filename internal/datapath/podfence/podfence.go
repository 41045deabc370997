// Package podfence keeps the pods of the secondary network and of its VPCs off their gateway
// node's own services. A gateway node has an interface on the cluster's logical switch
// (podport.GatewayLink, with the block's first host) so that it can forward the pods' traffic to
// and from the other clusters, and one per VPC whose gateway it holds with an external address
// (the node end of the gateway's outside veth, podport.VpcGatewayOutsideNodeLinkPattern), which
// the VPC's SNATed traffic leaves by. But the node's stack also accepts, on those interfaces,
// whatever is sent to an address the node holds, so a service listening on all addresses (the
// kubelet, the node's own agents) would answer every pod of the secondary network and every VPC.
// One inet table (owner.GatewayGuardNFTTable), written in one transaction: its input chain sends
// what arrives on a guarded interface to the fence chain, which accepts replies to what the node
// itself opened and ICMP (a pod pinging its gateway, path-MTU errors) and drops the rest.
// Forwarded traffic, the interfaces' purpose, never reaches the input hook; but what the node
// DNATs before forwarding it (kube-proxy's ClusterIPs, the node's NodePorts) is a service of the
// cluster all the same, so its forward chain drops that from the VPCs' interfaces, and with it
// every connection a VPC opens to the cluster's own addresses (its pods, Services and secondary
// block), which the node would otherwise forward as any other traffic. What other clusters'
// pods send to the node arrives on the tunnel device, not here, and is not this table's to
// filter (the gateways' health probes come that way).
//
// A drop is final whatever other tables say (internal/datapath/hostfirewall explains how
// netfilter's base chains combine), so the host's own firewall cannot undo it. The table stays
// when the process stops, as the interfaces do (gateway-port's pods are replaced in a rolling
// update). It imports no Kubernetes package: `octopus-ovn gateway-port` applies it for its own
// node.
package podfence

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/netnsrun"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

const (
	chainInput   = "input"
	chainForward = "forward"
	chainFence   = "fence"
)

// inputPriority runs the chain before the filter-priority chains of typical host firewalls,
// so that its counter sees every packet it drops, as hostfirewall's does.
const inputPriority = knftables.FilterPriority + "-10"

// Guard writes owner.GatewayGuardNFTTable in the network namespace of the thread that calls it
// (gateway-port runs in its node's).
type Guard struct {
	nft knftables.Interface
}

// New drives the nft binary for the table, in the calling thread's network namespace.
func New() (*Guard, error) {
	nft, err := knftables.New(knftables.InetFamily, owner.GatewayGuardNFTTable)
	if err != nil {
		return nil, fmt.Errorf("preparing nftables for the gateway guard table (is the nft binary installed? hack/install-deps.sh installs it): %w", err)
	}
	return NewWith(nft), nil
}

// NewWith uses nft, e.g. knftables.NewFake(knftables.InetFamily, owner.GatewayGuardNFTTable) in
// tests.
func NewWith(nft knftables.Interface) *Guard { return &Guard{nft: nft} }

// Links are the interfaces the table guards. A name ending in "*" is every interface it
// starts (nftables' wildcard).
type Links struct {
	// Input are the interfaces whose traffic for the node itself is fenced: replies to what
	// the node opened and ICMP pass, the rest is dropped.
	Input []string
	// DNAT are the interfaces whose traffic the node forwards after a DNAT of its own is
	// dropped in the forward hook: kube-proxy's ClusterIPs and the node's NodePorts, which the
	// input hook never sees. A VPC's tenant reaches the cluster's services no more than the
	// node itself, while the rest it sends is forwarded as before.
	DNAT []string
	// Protected are the cluster's own CIDRs (pods, Services, the secondary block): a
	// connection that arrives on a DNAT interface to open to one of them is dropped in the
	// forward hook; replies to connections the cluster opened pass. Without it the node
	// forwards a VPC's packets to the pods and Services it routes, DNAT or not. Optional.
	Protected []netip.Prefix
}

// Guard makes the table guard links, replacing whatever it held (the table is added, its
// chains flushed and refilled, in one transaction): the same rules again change nothing that a
// packet could see.
func (g *Guard) Guard(ctx context.Context, links Links) error {
	if len(links.Input) == 0 {
		return errors.New("gateway guard: no interface to guard")
	}
	if err := validLinks(slices.Concat(links.Input, links.DNAT)); err != nil {
		return fmt.Errorf("gateway guard: %w", err)
	}
	protected, err := protectedSets(links.Protected)
	if err != nil {
		return fmt.Errorf("gateway guard: %w", err)
	}
	tx := g.nft.NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("octopus gateway-port: the secondary network's and the VPCs' pods reach the gateway node only for replies and ICMP")})
	tx.Add(&knftables.Chain{Name: chainFence})
	tx.Add(&knftables.Chain{
		Name: chainInput, Type: knftables.PtrTo(knftables.FilterType), Hook: knftables.PtrTo(knftables.InputHook),
		Priority: knftables.PtrTo(inputPriority),
	})
	tx.Add(&knftables.Chain{
		Name: chainForward, Type: knftables.PtrTo(knftables.FilterType), Hook: knftables.PtrTo(knftables.ForwardHook),
		Priority: knftables.PtrTo(inputPriority),
	})
	tx.Flush(&knftables.Chain{Name: chainInput})
	tx.Flush(&knftables.Chain{Name: chainForward})
	tx.Flush(&knftables.Chain{Name: chainFence})
	for _, link := range links.Input {
		tx.Add(&knftables.Rule{Chain: chainInput, Rule: knftables.Concat("iifname", strconv.Quote(link), "goto", chainFence)})
	}
	for _, link := range links.DNAT {
		tx.Add(&knftables.Rule{Chain: chainForward, Rule: knftables.Concat("iifname", strconv.Quote(link), "ct status dnat counter drop")})
		for _, set := range protected {
			tx.Add(&knftables.Rule{Chain: chainForward, Rule: knftables.Concat("iifname", strconv.Quote(link), set, "ct state != { established, related } counter drop")})
		}
	}
	tx.Add(&knftables.Rule{Chain: chainFence, Rule: "ct state { established, related } accept"})
	// ICMP and ICMPv6 by number: nft resolves protocol names through /etc/protocols, which
	// the images do not have ("Could not resolve protocol name" in the lab's pods).
	tx.Add(&knftables.Rule{Chain: chainFence, Rule: "meta l4proto { 1, 58 } accept"})
	tx.Add(&knftables.Rule{Chain: chainFence, Rule: "counter drop"})
	if err := g.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("guarding %s in nftables table inet %s: %w", strings.Join(links.Input, ", "), owner.GatewayGuardNFTTable, err)
	}
	return nil
}

// protectedSets are the destination matches of the protected CIDRs, one per family present
// ("ip daddr { ... }", then "ip6 daddr { ... }"), in a stable order so that the same CIDRs give
// the same rules. A prefix that is invalid or has host bits set is refused before anything is
// written.
func protectedSets(cidrs []netip.Prefix) ([]string, error) {
	var v4, v6 []string
	for _, p := range cidrs {
		switch {
		case !p.IsValid():
			return nil, errors.New("protected CIDR: an invalid prefix")
		case p != p.Masked():
			return nil, fmt.Errorf("protected CIDR %s has host bits set: did you mean %s?", p, p.Masked())
		case p.Addr().Is4():
			v4 = append(v4, p.String())
		default:
			v6 = append(v6, p.String())
		}
	}
	var sets []string
	for _, f := range []struct {
		match string
		cidrs []string
	}{{"ip daddr", v4}, {"ip6 daddr", v6}} {
		if len(f.cidrs) > 0 {
			slices.Sort(f.cidrs)
			sets = append(sets, f.match+" { "+strings.Join(slices.Compact(f.cidrs), ", ")+" }")
		}
	}
	return sets, nil
}

// validLinks refuses what is no interface name (IFNAMSIZ bounds one to 15 bytes) or
// pattern, before anything is written: a name that nft would read as more than a string
// must never reach the rule.
func validLinks(links []string) error {
	for _, l := range links {
		name := strings.TrimSuffix(l, "*")
		if name == "" || len(name) > 15 || strings.ContainsFunc(name, func(r rune) bool {
			return r <= ' ' || r > '~' || r == '"' || r == '*' || r == '/' || r == '\\'
		}) {
			return fmt.Errorf("interface %q: want a name of 1 to 15 printable bytes without spaces, quotes, slashes or '*', or such a name and one trailing '*'", l)
		}
	}
	return nil
}

// GuardIn is Guard in the network namespace at netnsPath, where nft then runs; "" is the
// caller's own, entered without setns, which would need CAP_SYS_ADMIN even into one's own
// namespace (gateway-port runs in its node's with NET_ADMIN alone).
func (g *Guard) GuardIn(ctx context.Context, netnsPath string, links Links) error {
	if netnsPath == "" {
		return g.Guard(ctx, links)
	}
	return netnsrun.In(netnsPath, func() error { return g.Guard(ctx, links) })
}
