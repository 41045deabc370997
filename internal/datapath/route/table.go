// Package route keeps a node's routes to remote clusters pointing at the active gateway: Table
// takes a desired set of routes and applies it to one network namespace, touching only the
// routes that carry our markers (internal/datapath/owner).
package route

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// Route is one route to a remote cluster's CIDR, through a next hop on the node's network.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

func (r Route) String() string { return r.Dst.String() + " via " + r.Via.String() }

// TableOptions configure NewTable.
type TableOptions struct {
	// NetnsPath is the network namespace to manage (a /run/netns file). Optional: empty means
	// the namespace the process runs in.
	NetnsPath string
	// Log receives one line per change. Optional.
	Log logr.Logger
}

// Table applies a desired set of routes to one network namespace's main table, touching only
// routes marked with Protocol and owner.RouteAgentMetric.
type Table struct {
	h   *netlink.Handle
	log logr.Logger
}

// NewTable opens a netlink handle in the namespace. Close releases it.
func NewTable(o TableOptions) (*Table, error) {
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	var h *netlink.Handle
	var err error
	if o.NetnsPath == "" {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	} else {
		var ns netns.NsHandle
		if ns, err = netns.GetFromPath(o.NetnsPath); err != nil {
			return nil, fmt.Errorf("opening network namespace %s: %w", o.NetnsPath, err)
		}
		defer ns.Close()
		h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	}
	if err != nil {
		return nil, fmt.Errorf("opening a netlink socket for routes: %w", err)
	}
	return &Table{h: h, log: o.Log}, nil
}

// Close releases the netlink handle. Routes stay: the data plane survives a restarting agent.
func (t *Table) Close() { t.h.Close() }

// List returns our routes as the kernel has them now.
func (t *Table) List() ([]Route, error) {
	routes, err := t.ours()
	if err != nil {
		return nil, err
	}
	out := make([]Route, 0, len(routes))
	for _, r := range routes {
		if rt, ok := fromNetlink(r); ok {
			out = append(out, rt)
		}
	}
	slices.SortFunc(out, compareRoutes)
	return out, nil
}

// Apply makes our routes exactly desired: it re-reads the kernel (so routes someone deleted
// come back and leftovers of an earlier run go), deletes our routes that are not desired and
// replaces the desired ones. It never touches a route without our markers; a desired route
// whose slot (destination and owner.RouteAgentMetric) is held by a foreign route is reported, not taken. It
// is idempotent. Errors are collected: one bad route does not stop the others.
func (t *Table) Apply(desired []Route) error {
	want := map[netip.Prefix]netip.Addr{}
	var errs []error
	for _, r := range desired {
		if !r.Dst.IsValid() || !r.Via.IsValid() || r.Dst.Addr().Is4() != r.Via.Is4() {
			errs = append(errs, fmt.Errorf("route %s: need a destination and a next hop of one address family", r))
			continue
		}
		want[r.Dst.Masked()] = r.Via
	}
	current, err := t.ours()
	if err != nil {
		return err
	}
	have := map[netip.Prefix]netip.Addr{}
	for _, nr := range current {
		r, ok := fromNetlink(nr)
		if !ok {
			continue
		}
		if via, wanted := want[r.Dst]; wanted && via == r.Via {
			have[r.Dst] = r.Via
			continue
		}
		if err := t.h.RouteDel(&nr); err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("deleting route %s: %w", r, err))
			continue
		}
		t.log.Info("Deleted route", "dst", r.Dst.String(), "via", r.Via.String())
	}
	for dst, via := range want {
		if have[dst] == via {
			continue
		}
		if err := t.replace(Route{Dst: dst, Via: via}); err != nil {
			errs = append(errs, err)
			continue
		}
		t.log.Info("Set route", "dst", dst.String(), "via", via.String())
	}
	return errors.Join(errs...)
}

func (t *Table) replace(r Route) error {
	// A foreign route in our slot would be overwritten by RouteReplace: look first.
	family := netlink.FAMILY_V4
	if r.Dst.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	same, err := t.h.RouteListFiltered(family, &netlink.Route{Table: owner.MainTable, Dst: ipNet(r.Dst), Priority: owner.RouteAgentMetric},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
	if err != nil {
		return fmt.Errorf("listing routes to %s: %w", r.Dst, err)
	}
	for _, s := range same {
		if s.Priority == owner.RouteAgentMetric && s.Protocol != owner.RouteAgentProtocol {
			return fmt.Errorf("route %s: the kernel already has a route to %s with metric %d that is not ours (protocol %d); remove it or let the route agent own it", r, r.Dst, owner.RouteAgentMetric, s.Protocol)
		}
	}
	nr := &netlink.Route{
		Dst: ipNet(r.Dst), Gw: r.Via.AsSlice(), Table: owner.MainTable, Priority: owner.RouteAgentMetric,
		Protocol: owner.RouteAgentProtocol, Scope: netlink.SCOPE_UNIVERSE,
	}
	if err := t.h.RouteReplace(nr); err != nil {
		return fmt.Errorf("setting route %s: %w (is %s on a directly connected network of this node?)", r, err, r.Via)
	}
	return nil
}

// ours lists the routes carrying both markers, IPv4 and IPv6.
func (t *Table) ours() ([]netlink.Route, error) {
	filter := &netlink.Route{Table: owner.MainTable, Protocol: owner.RouteAgentProtocol}
	routes, err := t.h.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, fmt.Errorf("listing routes with protocol %d: %w", owner.RouteAgentProtocol, err)
	}
	return slices.DeleteFunc(routes, func(r netlink.Route) bool { return r.Priority != owner.RouteAgentMetric || r.Dst == nil }), nil
}

func fromNetlink(r netlink.Route) (Route, bool) {
	if r.Dst == nil || r.Gw == nil {
		return Route{}, false
	}
	ip, ok := netip.AddrFromSlice(r.Dst.IP)
	if !ok {
		return Route{}, false
	}
	ones, _ := r.Dst.Mask.Size()
	gw, ok := netip.AddrFromSlice(r.Gw)
	if !ok {
		return Route{}, false
	}
	return Route{Dst: netip.PrefixFrom(ip.Unmap(), ones).Masked(), Via: gw.Unmap()}, true
}

func ipNet(p netip.Prefix) *net.IPNet {
	p = p.Masked()
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func compareRoutes(a, b Route) int {
	if c := a.Dst.Addr().Compare(b.Dst.Addr()); c != 0 {
		return c
	}
	if c := a.Dst.Bits() - b.Dst.Bits(); c != 0 {
		return c
	}
	return a.Via.Compare(b.Via)
}
