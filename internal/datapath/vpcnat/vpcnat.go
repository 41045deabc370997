// Package vpcnat SNATs what a VPC sends out of its gateway's network namespace
// (podport.VpcGatewayNetns) to the VPC's egress address, so that whatever the gateway forwards
// outside, towards anything but the VPC's own link, carries an address outside the VPC's
// subnets, which may overlap everyone's. One inet table (owner.VpcGatewayNFTTable) in the
// gateway's namespace, written whole in one transaction: a set of the VPC's subnets (flushed
// and refilled) and one postrouting rule (its chain flushed and refilled). Static rule,
// changing data in the set, as kube-proxy's proxier keeps it.
//
// It imports no Kubernetes package: the caller gives the desired SNAT. Where the egress address
// comes from (the cluster's global CIDR, globalnet's allocator) is the caller's.
package vpcnat

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/netnsrun"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

const (
	chainPostrouting = "postrouting"
	setSubnets       = "vpc-subnets"
)

// SNAT is the desired translation of one VPC's gateway.
type SNAT struct {
	// Subnets are the VPC's subnets: packets from them are translated.
	Subnets []netip.Prefix
	// EgressIP is the address they leave with; the zero Addr means no SNAT (the table goes).
	EgressIP netip.Addr
	// VpcInterface is the gateway's interface on the VPC's link (podport.VpcGatewayInterface):
	// what goes back into the VPC keeps its addresses.
	VpcInterface string
}

func (s SNAT) validate() error {
	var errs []error
	if s.VpcInterface == "" {
		errs = append(errs, errors.New("no VPC interface"))
	}
	if s.EgressIP.IsValid() {
		if !s.EgressIP.Is4() {
			errs = append(errs, fmt.Errorf("egress address %v is not IPv4", s.EgressIP))
		}
		if len(s.Subnets) == 0 {
			errs = append(errs, errors.New("an egress address but no subnet to translate"))
		}
	}
	for _, p := range s.Subnets {
		if !p.IsValid() || !p.Addr().Is4() {
			errs = append(errs, fmt.Errorf("subnet %v is not an IPv4 prefix", p))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("VPC gateway SNAT: %w", err)
	}
	return nil
}

// Writer writes owner.VpcGatewayNFTTable in the network namespace of the thread that calls it.
type Writer struct {
	nft knftables.Interface
}

// New drives the nft binary for the table.
func New() (*Writer, error) {
	nft, err := knftables.New(knftables.InetFamily, owner.VpcGatewayNFTTable)
	if err != nil {
		return nil, fmt.Errorf("preparing nftables for the VPC gateway table (is the nft binary installed? hack/install-deps.sh installs it): %w", err)
	}
	return NewWith(nft), nil
}

// NewWith uses nft, e.g. knftables.NewFake(knftables.InetFamily, owner.VpcGatewayNFTTable).
func NewWith(nft knftables.Interface) *Writer { return &Writer{nft: nft} }

// Apply makes the table translate as s says, replacing whatever it held, in one transaction;
// with no EgressIP it removes the table. The same s again changes nothing a packet could see.
func (w *Writer) Apply(ctx context.Context, s SNAT) error {
	if err := s.validate(); err != nil {
		return err
	}
	tx := w.nft.NewTransaction()
	// Added first so that the delete below, or the flushes, never meet a missing object.
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("octopus: SNAT of the VPC's traffic leaving its gateway")})
	if !s.EgressIP.IsValid() {
		tx.Delete(&knftables.Table{})
		return w.run(ctx, tx)
	}
	tx.Add(&knftables.Set{Name: setSubnets, Type: "ipv4_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag}})
	tx.Flush(&knftables.Set{Name: setSubnets})
	subnets := slices.Clone(s.Subnets)
	slices.SortFunc(subnets, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	for _, p := range subnets {
		tx.Add(&knftables.Element{Set: setSubnets, Key: []string{p.Masked().String()}})
	}
	tx.Add(&knftables.Chain{
		Name: chainPostrouting, Type: knftables.PtrTo(knftables.NATType), Hook: knftables.PtrTo(knftables.PostroutingHook),
		Priority: knftables.PtrTo(knftables.SNATPriority),
	})
	tx.Flush(&knftables.Chain{Name: chainPostrouting})
	tx.Add(&knftables.Rule{Chain: chainPostrouting, Rule: knftables.Concat(
		"ip saddr", "@", setSubnets, "oifname !=", strconv.Quote(s.VpcInterface), "counter snat ip to", s.EgressIP.String())})
	return w.run(ctx, tx)
}

func (w *Writer) run(ctx context.Context, tx *knftables.Transaction) error {
	if err := w.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("writing nftables table inet %s: %w", owner.VpcGatewayNFTTable, err)
	}
	return nil
}

// ApplyIn is Apply in the network namespace at netnsPath, where nft then runs.
func (w *Writer) ApplyIn(ctx context.Context, netnsPath string, s SNAT) error {
	return netnsrun.In(netnsPath, func() error { return w.Apply(ctx, s) })
}
