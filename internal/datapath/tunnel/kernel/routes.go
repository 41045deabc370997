package kernel

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// RouteDiff returns which of current (our routes, read from the kernel) to delete so that only
// desired remain. Every desired route is replaced anyway: RouteReplace of an identical route
// changes nothing, and it repairs one that someone altered.
func RouteDiff(current []netip.Prefix, desired map[netip.Prefix]netip.Addr) (del []netip.Prefix) {
	for _, p := range current {
		if _, ok := desired[p]; !ok {
			del = append(del, p)
		}
	}
	slices.SortFunc(del, comparePrefix)
	return del
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// OwnRoutes lists the routes we made through link (our protocol, our device, the main table)
// by destination, as the kernel holds them: deleting them as read matches exactly.
func OwnRoutes(linkIndex int) (map[netip.Prefix]netlink.Route, error) {
	filter := &netlink.Route{Protocol: owner.TunnelRouteProtocol, LinkIndex: linkIndex, Table: owner.MainTable}
	mask := netlink.RT_FILTER_PROTOCOL | netlink.RT_FILTER_OIF | netlink.RT_FILTER_TABLE
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, filter, mask)
	if err != nil {
		return nil, fmt.Errorf("listing the tunnel's routes (proto %d): %w", owner.TunnelRouteProtocol, err)
	}
	out := map[netip.Prefix]netlink.Route{}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		if p, ok := prefixFromIPNet(r.Dst); ok {
			out[p] = r
		}
	}
	return out, nil
}

// SyncRoutes makes the routes through link exactly desired (destination → onlink gateway, or
// the invalid Addr for a route straight into a point-to-point device).
func SyncRoutes(linkIndex int, desired map[netip.Prefix]netip.Addr) error {
	current, err := OwnRoutes(linkIndex)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range RouteDiff(slices.Collect(maps.Keys(current)), desired) {
		r := current[p]
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("deleting route %s: %w", p, err))
		}
	}
	dsts := make([]netip.Prefix, 0, len(desired))
	for p := range desired {
		dsts = append(dsts, p)
	}
	slices.SortFunc(dsts, comparePrefix)
	for _, p := range dsts {
		r := route(linkIndex, p, desired[p])
		if err := netlink.RouteReplace(&r); err != nil {
			errs = append(errs, fmt.Errorf("adding route %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

func route(linkIndex int, p netip.Prefix, gw netip.Addr) netlink.Route {
	r := netlink.Route{
		LinkIndex: linkIndex,
		Dst:       &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
		Protocol:  owner.TunnelRouteProtocol,
		Table:     owner.MainTable,
		Scope:     netlink.SCOPE_LINK,
	}
	if gw.IsValid() {
		r.Gw = gw.AsSlice()
		r.Scope = netlink.SCOPE_UNIVERSE
		// onlink: the next hop is the peer's underlay address, which is not on any subnet of
		// the tunnel device (it has none); the device's neighbour entry resolves it.
		r.Flags = int(netlink.FLAG_ONLINK)
	}
	return r
}

func prefixFromIPNet(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}
