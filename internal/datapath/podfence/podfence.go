// Package podfence keeps the pods of the secondary network off their gateway node's own
// services. A gateway node has an interface on the cluster's logical switch (podport.GatewayLink,
// with the block's first host) so that it can forward the pods' traffic to and from the other
// clusters; but the node's stack also accepts, on that interface, whatever a pod sends to an
// address the node holds, so a service listening on all addresses (the kubelet, the node's own
// agents) would answer every pod of the cluster's secondary network. One inet table
// (owner.GatewayGuardNFTTable), one input chain, written in one transaction: on that interface
// it accepts replies to what the node itself opened and ICMP (a pod pinging its gateway,
// path-MTU errors), and drops the rest. Forwarded traffic, the interface's purpose, never
// reaches the input hook. What other clusters' pods send to the node arrives on the tunnel
// device, not here, and is not this table's to filter (the gateways' health probes come that
// way).
//
// A drop is final whatever other tables say (internal/datapath/hostfirewall explains how
// netfilter's base chains combine), so the host's own firewall cannot undo it. The table stays
// when the process stops, as the interface does (gateway-port's pods are replaced in a rolling
// update). It imports no Kubernetes package: `octopus-ovn gateway-port` applies it for its own
// node.
package podfence

import (
	"context"
	"fmt"
	"strconv"

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/netnsrun"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

const chainInput = "input"

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

// Guard makes the table guard the interface named link, replacing whatever it held (the table
// is added, its chain flushed and refilled, in one transaction): the same rules again change
// nothing that a packet could see.
func (g *Guard) Guard(ctx context.Context, link string) error {
	if link == "" {
		return fmt.Errorf("gateway guard: no interface to guard")
	}
	iif := "iifname " + strconv.Quote(link)
	tx := g.nft.NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("octopus gateway-port: the secondary network's pods reach the gateway node only for replies and ICMP")})
	tx.Add(&knftables.Chain{
		Name: chainInput, Type: knftables.PtrTo(knftables.FilterType), Hook: knftables.PtrTo(knftables.InputHook),
		Priority: knftables.PtrTo(inputPriority),
	})
	tx.Flush(&knftables.Chain{Name: chainInput})
	tx.Add(&knftables.Rule{Chain: chainInput, Rule: knftables.Concat(iif, "ct state { established, related } accept")})
	// ICMP and ICMPv6 by number: nft resolves protocol names through /etc/protocols, which
	// the images do not have ("Could not resolve protocol name" in the lab's pods).
	tx.Add(&knftables.Rule{Chain: chainInput, Rule: knftables.Concat(iif, "meta l4proto { 1, 58 } accept")})
	tx.Add(&knftables.Rule{Chain: chainInput, Rule: knftables.Concat(iif, "counter drop")})
	if err := g.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("guarding %s in nftables table inet %s: %w", link, owner.GatewayGuardNFTTable, err)
	}
	return nil
}

// GuardIn is Guard in the network namespace at netnsPath, where nft then runs; "" is the
// caller's own, entered without setns, which would need CAP_SYS_ADMIN even into one's own
// namespace (gateway-port runs in its node's with NET_ADMIN alone).
func (g *Guard) GuardIn(ctx context.Context, netnsPath, link string) error {
	if netnsPath == "" {
		return g.Guard(ctx, link)
	}
	return netnsrun.In(netnsPath, func() error { return g.Guard(ctx, link) })
}
