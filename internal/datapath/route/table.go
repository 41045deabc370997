// Package route is the one writer of routes in the data plane: a Table takes the whole desired
// set of one owner's routes and makes a network namespace's main table match it, touching only
// routes that carry that owner's markers (internal/datapath/owner). The route agent uses one
// for the routes to the active gateway, each tunnel driver one for the routes into its device.
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

// Route is one route to a remote CIDR. Via is the next hop; on a Table bound to a device it is
// optional: without it the route goes straight into the device (a point-to-point tunnel), with
// it the next hop is reached through the device whatever its addresses (onlink).
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

func (r Route) String() string {
	if !r.Via.IsValid() {
		return r.Dst.String()
	}
	return r.Dst.String() + " via " + r.Via.String()
}

// TableOptions configure NewTable.
type TableOptions struct {
	// Protocol and Metric are the markers of the owner's routes (owner.RouteAgentProtocol
	// and owner.RouteAgentMetric, owner.TunnelRouteProtocol and owner.TunnelRouteMetric): the
	// table lists, replaces and deletes only routes that carry both. Protocol is required and
	// must not be one of the kernel's own (0-4), or the table would take routes it did not make.
	Protocol int
	Metric   int
	// Device binds the table to one link: every route leaves through it, and only routes
	// through it are ours, so that tables with the same markers on different devices keep
	// apart. Optional.
	Device string
	// NetnsPath is the network namespace to manage (a /run/netns file). Optional: empty means
	// the namespace of the calling thread when NewTable runs.
	NetnsPath string
	// Log receives one line per change. Optional.
	Log logr.Logger
}

// maxKernelProtocol is RTPROT_STATIC, the last protocol number the kernel and iproute2 use
// for routes that nobody in particular owns (unspec, redirect, kernel, boot, static).
const maxKernelProtocol = unix.RTPROT_STATIC

// Table applies a desired set of routes to one network namespace's main table.
type Table struct {
	h        *netlink.Handle
	protocol netlink.RouteProtocol
	metric   int
	device   string
	log      logr.Logger
}

// NewTable opens a netlink handle in the namespace. Close releases it.
func NewTable(o TableOptions) (*Table, error) {
	if o.Protocol <= maxKernelProtocol || o.Protocol > 255 {
		return nil, fmt.Errorf("route table: protocol %d is not an owner's marker: choose one of internal/datapath/owner", o.Protocol)
	}
	if o.Metric < 0 {
		return nil, fmt.Errorf("route table: metric %d is negative", o.Metric)
	}
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
	return &Table{h: h, protocol: netlink.RouteProtocol(o.Protocol), metric: o.Metric, device: o.Device, log: o.Log}, nil
}

// Close releases the netlink handle. Routes stay: the data plane survives a restarting agent,
// and a device's routes go with the device.
func (t *Table) Close() { t.h.Close() }

// List returns our routes as the kernel has them now, sorted.
func (t *Table) List() ([]Route, error) {
	link, err := t.link()
	if err != nil {
		return nil, err
	}
	routes, err := t.ours(link)
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

// Apply makes our routes exactly desired. It re-reads the kernel, so routes someone deleted
// come back and leftovers of an earlier run go; it deletes our routes to destinations that are
// not desired (a route already gone is fine) and RouteReplaces the desired ones that are
// missing or have another next hop. It never touches a route without our markers: a desired
// route whose slot (destination and our metric) is held by a route of another protocol is
// reported, not taken. It is idempotent. Errors are collected: one bad route does not stop
// the others.
func (t *Table) Apply(desired []Route) error {
	want := map[netip.Prefix]netip.Addr{}
	var errs []error
	for _, r := range desired {
		if err := t.validate(r); err != nil {
			errs = append(errs, err)
			continue
		}
		dst, via := r.Dst.Masked(), r.Via.Unmap()
		if other, dup := want[dst]; dup && other != via {
			errs = append(errs, fmt.Errorf("route %s: %s is desired through two next hops, %s and %s", r, dst, viaString(other), viaString(via)))
			continue
		}
		want[dst] = via
	}
	link, err := t.link()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	current, err := t.ours(link)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	byRoute := make(map[Route]netlink.Route, len(current))
	have := make([]Route, 0, len(current))
	for _, nr := range current {
		if r, ok := fromNetlink(nr); ok {
			byRoute[r] = nr
			have = append(have, r)
		}
	}
	del, set := diff(have, want)
	for _, r := range del {
		nr := byRoute[r]
		if err := t.h.RouteDel(&nr); err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("deleting route %s: %w", r, err))
			continue
		}
		t.log.Info("Deleted route", "dst", r.Dst.String(), "via", viaString(r.Via))
	}
	for _, r := range set {
		if err := t.replace(link, r); err != nil {
			errs = append(errs, err)
			continue
		}
		t.log.Info("Set route", "dst", r.Dst.String(), "via", viaString(r.Via))
	}
	return errors.Join(errs...)
}

// diff returns which of current (our routes, read from the kernel) to delete, those to
// destinations that are not desired, and which desired routes to write, those missing or with
// another next hop, both sorted. A desired destination is never deleted first: RouteReplace
// changes its next hop in place, so a failover re-points traffic without a moment with no
// route.
func diff(current []Route, desired map[netip.Prefix]netip.Addr) (del, set []Route) {
	have := map[netip.Prefix]netip.Addr{}
	for _, r := range current {
		if _, ok := desired[r.Dst]; !ok {
			del = append(del, r)
			continue
		}
		have[r.Dst] = r.Via
	}
	for dst, via := range desired {
		if cur, ok := have[dst]; !ok || cur != via {
			set = append(set, Route{Dst: dst, Via: via})
		}
	}
	slices.SortFunc(del, compareRoutes)
	slices.SortFunc(set, compareRoutes)
	return del, set
}

func (t *Table) validate(r Route) error {
	switch {
	case !r.Dst.IsValid():
		return fmt.Errorf("route %s: no destination", r)
	case !r.Via.IsValid() && t.device == "":
		return fmt.Errorf("route %s: need a next hop", r)
	case r.Via.IsValid() && r.Dst.Addr().Is4() != r.Via.Unmap().Is4():
		return fmt.Errorf("route %s: need a destination and a next hop of one address family", r)
	}
	return nil
}

// link is the index of the bound device, or 0.
func (t *Table) link() (int, error) {
	if t.device == "" {
		return 0, nil
	}
	l, err := t.h.LinkByName(t.device)
	if err != nil {
		return 0, fmt.Errorf("looking up device %s for its routes: %w", t.device, err)
	}
	return l.Attrs().Index, nil
}

func (t *Table) replace(link int, r Route) error {
	// A foreign route in our slot would be overwritten by RouteReplace: look first.
	family := netlink.FAMILY_V4
	if r.Dst.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	same, err := t.h.RouteListFiltered(family, &netlink.Route{Table: owner.MainTable, Dst: ipNet(r.Dst)},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
	if err != nil {
		return fmt.Errorf("listing routes to %s: %w", r.Dst, err)
	}
	for _, s := range same {
		if s.Priority == t.metric && s.Protocol != t.protocol {
			return fmt.Errorf("route %s: the kernel already has a route to %s with metric %d that is not ours (protocol %d, ours %d); remove it, or leave that destination to it", r, r.Dst, t.metric, s.Protocol, t.protocol)
		}
	}
	nr := &netlink.Route{
		LinkIndex: link, Dst: ipNet(r.Dst), Table: owner.MainTable, Priority: t.metric, Protocol: t.protocol,
		Scope: netlink.SCOPE_UNIVERSE,
	}
	switch {
	case r.Via.IsValid():
		nr.Gw = r.Via.AsSlice()
		if link != 0 {
			// The next hop (a tunnel peer's underlay address) is on no subnet of the device,
			// which has none; the device's neighbour entry resolves it.
			nr.Flags = int(netlink.FLAG_ONLINK)
		}
	default:
		nr.Scope = netlink.SCOPE_LINK
	}
	if err := t.h.RouteReplace(nr); err != nil {
		if link == 0 {
			return fmt.Errorf("setting route %s: %w (is %s on a directly connected network of this node?)", r, err, r.Via)
		}
		return fmt.Errorf("setting route %s on %s: %w", r, t.device, err)
	}
	return nil
}

// ours lists the routes carrying our markers (and leaving through our device, when bound),
// IPv4 and IPv6.
func (t *Table) ours(link int) ([]netlink.Route, error) {
	filter := &netlink.Route{Table: owner.MainTable, Protocol: t.protocol, LinkIndex: link}
	mask := netlink.RT_FILTER_TABLE | netlink.RT_FILTER_PROTOCOL
	if link != 0 {
		mask |= netlink.RT_FILTER_OIF
	}
	routes, err := t.h.RouteListFiltered(netlink.FAMILY_ALL, filter, mask)
	if err != nil {
		return nil, fmt.Errorf("listing routes with protocol %d: %w", t.protocol, err)
	}
	return slices.DeleteFunc(routes, func(r netlink.Route) bool { return r.Priority != t.metric || r.Dst == nil }), nil
}

func fromNetlink(r netlink.Route) (Route, bool) {
	if r.Dst == nil {
		return Route{}, false
	}
	ip, ok := netip.AddrFromSlice(r.Dst.IP)
	if !ok {
		return Route{}, false
	}
	ones, _ := r.Dst.Mask.Size()
	out := Route{Dst: netip.PrefixFrom(ip.Unmap(), ones).Masked()}
	if r.Gw != nil {
		gw, ok := netip.AddrFromSlice(r.Gw)
		if !ok {
			return Route{}, false
		}
		out.Via = gw.Unmap()
	}
	return out, true
}

func viaString(a netip.Addr) string {
	if !a.IsValid() {
		return "(device)"
	}
	return a.String()
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
