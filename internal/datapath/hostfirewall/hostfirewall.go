// Package hostfirewall accepts a gateway's tunnel UDP ports in its node's input hook, in one
// nftables table the gateway owns (owner.HostFirewallNFTTable), written from the desired ports
// in one transaction and deleted on clean shutdown. It imports no Kubernetes package: the
// gateway process calls it for its own node, since nothing can program another node's
// firewall through the Kubernetes API.
//
// What an accept here can and cannot do (measured by TestKernelAcceptDoesNotOverrideHostDrop
// against the running kernel): netfilter runs every base chain registered on a hook, in
// priority order, and a verdict of accept only ends the chain that gave it; the packet then
// traverses the next base chain, and a drop there is final. So this table opens the port on
// hosts whose input filtering is otherwise accepting, and it puts the port Octopus needs in the
// node's ruleset where `nft list ruleset` shows it, but it cannot override a drop or reject in
// the host's own firewall (firewalld, ufw, an iptables INPUT policy of DROP): that firewall
// must allow the port itself, which neither this table nor any other table of ours can do
// without editing rules we do not own.
package hostfirewall

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

const chainInput = "input"

// inputPriority runs our chain before the filter-priority chains of typical host firewalls
// (firewalld's filter_INPUT at filter+10, iptables-nft's INPUT at filter), so its counter sees
// every tunnel packet even where a later chain drops it; being earlier does not make the
// accept win (see the package comment).
const inputPriority = knftables.FilterPriority + "-10"

// Firewall writes owner.HostFirewallNFTTable in the network namespace of the thread that calls
// it (the gateway runs in its node's).
type Firewall struct {
	nft knftables.Interface
}

// New drives the nft binary for the table, in the calling thread's network namespace.
func New() (*Firewall, error) {
	nft, err := knftables.New(knftables.InetFamily, owner.HostFirewallNFTTable)
	if err != nil {
		return nil, fmt.Errorf("preparing nftables for the host firewall table (is the nft binary installed? hack/install-deps.sh installs it): %w", err)
	}
	return NewWith(nft), nil
}

// NewWith uses nft, e.g. knftables.NewFake(knftables.InetFamily, owner.HostFirewallNFTTable) in tests.
func NewWith(nft knftables.Interface) *Firewall { return &Firewall{nft: nft} }

// Open makes the table accept exactly the UDP ports, replacing whatever it held before (the
// table is added, then its chain flushed and refilled, in one transaction).
func (f *Firewall) Open(ctx context.Context, ports ...uint16) error {
	tx := f.nft.NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("octopus gateway: accepts the tunnel's UDP port")})
	tx.Add(&knftables.Chain{
		Name: chainInput, Type: knftables.PtrTo(knftables.FilterType), Hook: knftables.PtrTo(knftables.InputHook),
		Priority: knftables.PtrTo(inputPriority),
	})
	tx.Flush(&knftables.Chain{Name: chainInput})
	if set := portSet(ports); set != "" {
		tx.Add(&knftables.Rule{Chain: chainInput, Rule: knftables.Concat("udp dport", set, "counter accept")})
	}
	if err := f.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("accepting UDP ports %v in nftables table inet %s: %w", ports, owner.HostFirewallNFTTable, err)
	}
	return nil
}

// Close deletes the table; a table already gone is no error.
func (f *Firewall) Close(ctx context.Context) error {
	tx := f.nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := f.nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
		return fmt.Errorf("deleting nftables table inet %s: %w", owner.HostFirewallNFTTable, err)
	}
	return nil
}

// portSet is "{ p1, p2 }" of the distinct non-zero ports in ascending order, "" for none.
func portSet(ports []uint16) string {
	ps := slices.Clone(ports)
	slices.Sort(ps)
	ps = slices.Compact(ps)
	ps = slices.DeleteFunc(ps, func(p uint16) bool { return p == 0 })
	if len(ps) == 0 {
		return ""
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(int(p))
	}
	return "{ " + strings.Join(s, ", ") + " }"
}
