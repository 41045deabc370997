package podport

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A VPC gateway with an external address (VpcGateway.ExternalIP) has a second veth, its way
// out: VpcGatewayOutsideInterface in the gateway's namespace holds the address as a /32, and
// the other end (VpcGatewayOutsideNodeLink) is a plain interface of the node's namespace, not
// a bridge port, where the node routes the address to it (a /32 route through the link), so
// that whatever the node can reach, the gateway can, with the node's routing. The gateway's
// default route goes to VpcGatewayOutsideNextHop, a link-local address nobody holds, whose
// neighbour entry is fixed to the node end's MAC: the node's kernel takes every frame for its
// own MAC and routes it, so the node end needs no address (each VPC would need its own, or
// the node would hold one address on many links) and no proxy ARP (which answers only for
// destinations routed elsewhere, so not in a bare node namespace).
const (
	// VpcGatewayOutsideInterface is the gateway's outside interface, in its namespace.
	VpcGatewayOutsideInterface = "ext"
	// vpcOutsideLinkPrefix starts the name of the outside veth's node end: "oct" + "x" is
	// neither a pod's node end ("oct" + hex digits), "octv" (the VPC link's) nor "octgw".
	vpcOutsideLinkPrefix = "octx"
)

// VpcGatewayOutsideNodeLinkPattern names every outside veth's node end as an nftables
// interface-name wildcard: the node fences them all off its own services (podfence).
const VpcGatewayOutsideNodeLinkPattern = vpcOutsideLinkPrefix + "*"

// VpcGatewayOutsideNextHop is the gateway's default next hop on its outside veth: link-local
// (never routed, never anybody's address), resolved by a permanent neighbour entry to the node
// end's MAC.
var VpcGatewayOutsideNextHop = netip.MustParseAddr("169.254.0.1")

// VpcGatewayOutsideNodeLink is the name of the node end of the VPC gateway's outside veth:
// "octx" and the first 11 hex digits of the VPC name's SHA-256, as VpcGatewayNodeLink.
func VpcGatewayOutsideNodeLink(vpc string) string {
	sum := sha256.Sum256([]byte(vpc))
	return vpcOutsideLinkPrefix + hex.EncodeToString(sum[:])[:15-len(vpcOutsideLinkPrefix)]
}

// ensureVpcOutside makes the gateway's outside veth as g.ExternalIP says: without one, it
// removes both ends (the node's route to the address goes with its link); with one, the
// veth, the /32 as the inner end's only address, both ends up, the neighbour entry and the
// default route in the gateway's namespace, and the node's route to the address.
func ensureVpcOutside(node, gw *handle, g VpcGateway, c *changes) error {
	hostName := VpcGatewayOutsideNodeLink(g.Vpc)
	inner, err := gw.LinkByName(VpcGatewayOutsideInterface)
	if err != nil && !errors.As(err, new(netlink.LinkNotFoundError)) {
		return fmt.Errorf("finding %s: %w", VpcGatewayOutsideInterface, err)
	}
	host, err := node.LinkByName(hostName)
	if err != nil && !errors.As(err, new(netlink.LinkNotFoundError)) {
		return fmt.Errorf("finding %s: %w", hostName, err)
	}
	if !g.ExternalIP.IsValid() {
		if inner == nil && host == nil {
			return nil
		}
		if err := errors.Join(removeLink(gw, VpcGatewayOutsideInterface), removeLink(node, hostName)); err != nil {
			return err
		}
		c.add("removed the outside veth %s/%s: the VPC has no external address", hostName, VpcGatewayOutsideInterface)
		return nil
	}
	_, vethIn := inner.(*netlink.Veth)
	_, vethOut := host.(*netlink.Veth)
	if inner == nil || host == nil || !vethIn || !vethOut || inner.Attrs().ParentIndex != host.Attrs().Index {
		if inner != nil || host != nil {
			if err := errors.Join(removeLink(gw, VpcGatewayOutsideInterface), removeLink(node, hostName)); err != nil {
				return err
			}
			c.add("removed the malformed outside veth %s/%s", hostName, VpcGatewayOutsideInterface)
		}
		veth := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: hostName, MTU: g.MTU}, PeerName: VpcGatewayOutsideInterface,
			PeerMTU:       uint32(g.MTU), //nolint:gosec // validate bounds MTU
			PeerNamespace: netlink.NsFd(gw.ns),
		}
		if err := node.LinkAdd(veth); err != nil {
			return fmt.Errorf("creating the outside veth %s/%s: %w", hostName, VpcGatewayOutsideInterface, err)
		}
		c.add("created the outside veth %s/%s into %s", hostName, VpcGatewayOutsideInterface, g.NetnsPath())
		if inner, err = gw.LinkByName(VpcGatewayOutsideInterface); err != nil {
			return fmt.Errorf("finding %s: %w", VpcGatewayOutsideInterface, err)
		}
		if host, err = node.LinkByName(hostName); err != nil {
			return fmt.Errorf("finding %s: %w", hostName, err)
		}
	}
	if err := ensureOnlyAddr(gw, inner, netip.PrefixFrom(g.ExternalIP, 32), c); err != nil {
		return err
	}
	if err := errors.Join(ensureUp(gw, VpcGatewayOutsideInterface, c), ensureUp(node, hostName, c)); err != nil {
		return err
	}
	if err := ensureOutsideNeighbour(gw, inner.Attrs().Index, host.Attrs().HardwareAddr, c); err != nil {
		return err
	}
	if err := ensureRoute(gw, &netlink.Route{LinkIndex: inner.Attrs().Index, Dst: ipNet(netip.MustParsePrefix("0.0.0.0/0")),
		Gw: net.IP(VpcGatewayOutsideNextHop.AsSlice()), Flags: int(netlink.FLAG_ONLINK)}, "the gateway's default route", c); err != nil {
		return err
	}
	external := netip.PrefixFrom(g.ExternalIP, 32)
	if err := ensureRoute(node, &netlink.Route{LinkIndex: host.Attrs().Index, Dst: ipNet(external),
		Scope: netlink.SCOPE_LINK}, "the node's route to "+g.ExternalIP.String(), c); err != nil {
		return err
	}
	return removeOtherRoutes(node, host.Attrs().Index, hostName, external, c)
}

// removeOtherRoutes removes the node's routes through the outside veth's node end (index,
// name) to anything but keep: those of an earlier external address, which another VPC's gateway
// (on this node or another) may hold now.
func removeOtherRoutes(node *handle, index int, name string, keep netip.Prefix, c *changes) error {
	routes, err := node.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: index, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("listing the routes through %s: %w", name, err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue // a default route is never ours here; leave it to whoever made it
		}
		if dst, ok := netip.AddrFromSlice(r.Dst.IP.To4()); ok {
			ones, _ := r.Dst.Mask.Size()
			if netip.PrefixFrom(dst, ones) == keep {
				continue
			}
		}
		if err := node.RouteDel(&r); err != nil {
			return fmt.Errorf("removing the route to %s through %s: %w", r.Dst, name, err)
		}
		c.add("removed the node's route to %s through %s", r.Dst, name)
	}
	return nil
}

// ensureOutsideNeighbour fixes VpcGatewayOutsideNextHop's neighbour entry on the outside
// interface to mac, the node end's.
func ensureOutsideNeighbour(gw *handle, index int, mac net.HardwareAddr, c *changes) error {
	neighs, err := gw.NeighList(index, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("listing the neighbours on %s: %w", VpcGatewayOutsideInterface, err)
	}
	for _, n := range neighs {
		if a, ok := netip.AddrFromSlice(n.IP.To4()); ok && a == VpcGatewayOutsideNextHop && n.State == netlink.NUD_PERMANENT && bytes.Equal(n.HardwareAddr, mac) {
			return nil
		}
	}
	if err := gw.NeighSet(&netlink.Neigh{LinkIndex: index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: net.IP(VpcGatewayOutsideNextHop.AsSlice()), HardwareAddr: mac}); err != nil {
		return fmt.Errorf("fixing the neighbour %s on %s to %s: %w", VpcGatewayOutsideNextHop, VpcGatewayOutsideInterface, mac, err)
	}
	c.add("fixed the neighbour %s on %s to %s", VpcGatewayOutsideNextHop, VpcGatewayOutsideInterface, mac)
	return nil
}

// ensureRoute makes want the main table's route to its destination, if the one there differs
// in link, next hop or scope.
func ensureRoute(h *handle, want *netlink.Route, what string, c *changes) error {
	routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: want.Dst, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("listing the routes to %s: %w", want.Dst, err)
	}
	for _, r := range routes {
		if r.LinkIndex == want.LinkIndex && r.Gw.Equal(want.Gw) && (want.Gw != nil || r.Scope == want.Scope) {
			return nil
		}
	}
	if err := h.RouteReplace(want); err != nil {
		return fmt.Errorf("setting %s (%s): %w", what, want.Dst, err)
	}
	c.add("set %s", what)
	return nil
}
