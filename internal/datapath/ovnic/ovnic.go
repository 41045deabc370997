// Package ovnic makes one cluster's OVN network an availability zone (AZ) of OVN interconnection
// (OVN-IC, the model Kube-OVN ships): it writes into the AZ's own NB database what ovn-ic (Debian's
// ovn-ic, OVN 23.03) needs to join the AZ to a transit switch and to advertise and learn routes:
//
//   - NB_Global's name, the AZ name ovn-ic registers in the IC SB database, and the options ovn-ic
//     reads: ic-route-adv and ic-route-learn (automatic routes), ic-route-blacklist (23.03's name
//     for what later OVN calls ic-route-denylist) for the subnets that opt out and the prefixes of
//     manual routes;
//   - a logical router with a port on each of the AZ's subnet switches (ovn-ic advertises the
//     router's directly connected networks) and a port on the transit switch, that one bound to
//     gateway chassis by priority (active-backup: the highest-priority live chassis carries it);
//   - manual static routes on that router.
//
// Apply takes the whole desired state of one AZ (AZ) and makes the NB database match it in one
// transaction, touching only rows that carry our markers (internal/datapath/owner) and the
// NB_Global keys we own; it writes nothing when the database already matches. Routes ovn-ic
// learned are ovn-ic's: they carry no marker of ours and Apply never deletes them.
//
// Opt-out is done by the blacklist, not by leaving the subnet off the router, because OVN-IC 23.03
// has no per-port or per-route "do not advertise" flag: the only filters are the AZ-wide
// blacklist (which stops both advertising and learning of prefixes inside it) and route tables
// (which only select what a transit port learns). The blacklist keeps the opted-out subnet
// routed inside its own AZ, and that AZ has no reason to learn the prefix from anyone else.
//
// Overlapping prefixes: before it advertises a prefix for the first time, Apply reads the IC SB
// database and refuses (an *OverlapError naming both AZs, nothing written) when another AZ already
// advertises an overlapping one, so identical CIDRs from two clusters never pollute anyone's
// learned routes (kube-ovn#7264). A prefix this AZ already advertises stays: the AZ that came
// second is the one refused.
//
// Why libovsdb against the NB (and the IC SB, read-only) rather than driving ovn-nbctl: the NB is
// written in one guarded transaction whose rows we find again by external_ids, which a sequence
// of ovn-nbctl calls cannot give; the IC SB models are generated like the NB ones
// (hack/ovn-models.sh ic-sb). The transit switch itself is created in the IC NB at deploy (the hub's
// job, issue 32 item 1), and ovn-ic copies it into every AZ's NB, where Apply waits for it.
//
// The package imports no Kubernetes client: a controller translates the cluster's objects into
// an AZ.
package ovnic

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// maxGatewayChassis bounds AZ.GatewayChassis: priorities are 100 down to 100-len+1, all
// positive, and active-backup across more than a handful of nodes serves nothing.
const maxGatewayChassis = 32

// AZ is the desired interconnection state of one availability zone (one cluster).
type AZ struct {
	// Name is the AZ's name, the cluster ID (required). It becomes NB_Global's name, which
	// ovn-ic registers in the IC SB; an NB database already named otherwise is refused, since
	// renaming an AZ would orphan everything ovn-ic registered under the old name.
	Name string
	// TransitSwitch is the transit switch's name in the IC NB database (required). ovn-ic copies
	// it into the AZ's NB; Apply fails with ErrNotReady until it has.
	TransitSwitch string
	// TransitAddress is the router's address on the transit switch, with the transit switch's
	// prefix length (required, IPv4). It is the next hop other AZs learn for this AZ's routes,
	// and the next hop manual routes in other AZs name. Unique among the AZs on the switch.
	TransitAddress netip.Prefix
	// GatewayChassis are the chassis (system-id, the node name by convention) that may carry
	// the router's transit port, highest priority first: the first live one is active, the
	// others are its backups. Empty leaves the port unbound (no traffic, routes still exchanged).
	GatewayChassis []string
	// Subnets are the AZ's subnet switches the router joins to the transit switch.
	Subnets []Subnet
	// AutoRoutes turns on ovn-ic's advertising of the AZ's subnets and learning of the other
	// AZs' (Kube-OVN's auto-route). Off, only Routes route between AZs.
	AutoRoutes bool
	// Routes are manual static routes on the router, typically to another AZ's subnet via that
	// AZ's TransitAddress. Their prefixes are never advertised and never learned from others
	// (they go into the blacklist): a manual route is the route to its prefix.
	Routes []Route
}

// Subnet is one of the AZ's logical switches, joined to the router.
type Subnet struct {
	// Switch is the logical switch's name in the AZ's NB (required); it is someone else's (the
	// secondary network's), Apply only adds the router's port to it.
	Switch string
	// Address is the router's address on the switch with the subnet's prefix length
	// (required, IPv4): inside the subnet, held by no pod's port.
	Address netip.Prefix
	// OptOut keeps the subnet from being advertised to other AZs (Kube-OVN's
	// disableInterConnection).
	OptOut bool
}

// Route is a manual static route.
type Route struct {
	// Prefix is the destination (required, IPv4, masked).
	Prefix netip.Prefix
	// NextHop is the router to send it to, another AZ's TransitAddress (required, IPv4).
	NextHop netip.Addr
}

// ErrNotReady says that what Apply builds on is not in the AZ's NB database yet: the NB_Global
// row (ovn-northd creates it), a subnet switch, or the transit switch (ovn-ic copies it from the
// IC NB once the AZ is registered). Retry later; only the AZ's name and options may have been
// written meanwhile (see Apply).
var ErrNotReady = errors.New("not ready")

// ErrAddressHeld says another port on a subnet switch holds the address the router's port is to
// take there (the secondary network's gateway port, when the ovnmaster was not told the
// cluster is an AZ). Nothing is written; the AZ applies once the address is free.
var ErrAddressHeld = errors.New("address held by another port")

// OverlapError is a prefix this AZ would advertise that overlaps one another AZ already
// advertises on the same transit switch. Nothing was written.
type OverlapError struct {
	AZ, OtherAZ         string
	Prefix, OtherPrefix netip.Prefix
	TransitSwitch       string
}

func (e *OverlapError) Error() string {
	return fmt.Sprintf("prefix %s of AZ %s overlaps %s, which AZ %s already advertises on transit switch %s: refused, nothing applied (give one of them another CIDR or opt the subnet out)",
		e.Prefix, e.AZ, e.OtherPrefix, e.OtherAZ, e.TransitSwitch)
}

// RouterName is the name of the AZ's interconnection router.
func RouterName(az string) string { return owner.OVNInterconnectNamePrefix + az }

// RouterPortName is the name of the router's port towards switch sw (a subnet switch or the
// transit switch).
func RouterPortName(az, sw string) string { return owner.OVNInterconnectNamePrefix + az + "-" + sw }

// SwitchPortName is the name of the switch port on sw that peers with the router's port.
func SwitchPortName(az, sw string) string { return RouterPortName(az, sw) + "-rtr" }

// macFor derives a router port's MAC from its IPv4 address: 0a:58 and the address bytes, the
// convention of the secondary network's ports (locally administered, unique where the address
// is, stable without being stored).
func macFor(ip netip.Addr) string {
	a := ip.As4()
	return net.HardwareAddr{0x0a, 0x58, a[0], a[1], a[2], a[3]}.String()
}

func (az AZ) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if az.Name == "" || strings.ContainsAny(az.Name, ", ") {
		bad("AZ name %q: required, without commas or spaces", az.Name)
	}
	if az.TransitSwitch == "" {
		bad("transit switch: required")
	}
	if !az.TransitAddress.IsValid() || !az.TransitAddress.Addr().Is4() || az.TransitAddress.Bits() > 30 {
		bad("transit address %s: an IPv4 address with the transit switch's prefix length (at most /30) is required", az.TransitAddress)
	}
	if len(az.GatewayChassis) > maxGatewayChassis {
		bad("%d gateway chassis: at most %d", len(az.GatewayChassis), maxGatewayChassis)
	}
	seenChassis := map[string]bool{}
	for _, c := range az.GatewayChassis {
		if c == "" || seenChassis[c] {
			bad("gateway chassis %q: empty or listed twice", c)
		}
		seenChassis[c] = true
	}
	seenSwitch := map[string]bool{az.TransitSwitch: true}
	for _, s := range az.Subnets {
		if s.Switch == "" || seenSwitch[s.Switch] {
			bad("subnet switch %q: empty, listed twice or the transit switch", s.Switch)
		}
		seenSwitch[s.Switch] = true
		if !s.Address.IsValid() || !s.Address.Addr().Is4() || s.Address.Bits() > 30 {
			bad("subnet %s: the router's address needs an IPv4 address with the subnet's prefix length (at most /30)", s.Address)
		}
	}
	for i, a := range az.Subnets {
		for _, b := range az.Subnets[i+1:] {
			if a.Address.IsValid() && b.Address.IsValid() && a.Address.Overlaps(b.Address) {
				bad("subnets %s (%s) and %s (%s) overlap", a.Address.Masked(), a.Switch, b.Address.Masked(), b.Switch)
			}
		}
	}
	seenRoute := map[netip.Prefix]bool{}
	for _, r := range az.Routes {
		if !r.Prefix.IsValid() || !r.Prefix.Addr().Is4() || r.Prefix != r.Prefix.Masked() || !r.NextHop.Is4() {
			bad("route %s via %s: a masked IPv4 prefix and an IPv4 next hop are required", r.Prefix, r.NextHop)
			continue
		}
		if seenRoute[r.Prefix] {
			bad("route %s: listed twice", r.Prefix)
		}
		seenRoute[r.Prefix] = true
	}
	return errors.Join(errs...)
}

// advertised are the prefixes ovn-ic will advertise for az: its subnets that do not opt out,
// when routes are automatic.
func (az AZ) advertised() []netip.Prefix {
	if !az.AutoRoutes {
		return nil
	}
	var ps []netip.Prefix
	for _, s := range az.Subnets {
		if !s.OptOut {
			ps = append(ps, s.Address.Masked())
		}
	}
	return ps
}

// denylist is ic-route-blacklist's value: the opted-out subnets and the manual routes'
// prefixes, sorted, comma separated ("" for none).
func (az AZ) denylist() string {
	var ps []string
	for _, s := range az.Subnets {
		if s.OptOut {
			ps = append(ps, s.Address.Masked().String())
		}
	}
	for _, r := range az.Routes {
		ps = append(ps, r.Prefix.String())
	}
	slices.Sort(ps)
	return strings.Join(slices.Compact(ps), ",")
}
