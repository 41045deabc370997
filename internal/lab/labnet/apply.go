package labnet

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
)

// Apply creates the plan's namespaces and links, or completes them after a partial run: every
// step tolerates what already exists. The result:
//
//	root namespace:  <APILink> APIAddress/32        <Uplink> UplinkAddr/28 (one per cluster)
//	(only 198.51.100.0/24)
//	                      |                              |
//	underlay ns:      api0 (no address)          <cluster>-lan ns: up0 -- br0 -- n1, n2, ...
//	                  br0 -- c<i>n1, ...                                          |
//	                          |                                   node ns: eth0 LANAddr/28
//	gateway node ns:  ul0 UnderlayAddr/24      routes: APIAddress/32 via UplinkAddr,
//	                                                   ServiceCIDR dev eth0
//
// The bridges live in namespaces of their own rather than in the root namespace so that the
// root namespace gains as little as possible (two kinds of veth ends with TEST-NET addresses)
// and the host's firewall and bridge-netfilter settings never see the lab's L2 traffic.
// Nodes reach the API servers through their cluster's uplink: the root namespace delivers
// packets for any of its own addresses whatever link they arrive on, so it needs no
// forwarding, and a node has no route to anything but its LAN, the API address and its
// service range.
func Apply(p Plan) error {
	if err := checkRootFree(p.ID); err != nil {
		return err
	}
	for _, ns := range p.Namespaces() {
		if err := EnsureNamespace(ns); err != nil {
			return err
		}
	}
	root, err := openNamespace("")
	if err != nil {
		return err
	}
	defer root.Close()
	underlay, err := openNamespace(p.Underlay)
	if err != nil {
		return err
	}
	defer underlay.Close()

	if err := underlay.ensureBridge(bridgeName); err != nil {
		return err
	}
	if err := underlay.setUp("lo", bridgeName); err != nil {
		return err
	}
	if err := rootLink(root, p.APILink, apiPeerName, underlay, netip.PrefixFrom(APIAddress, 32)); err != nil {
		return err
	}
	for _, c := range p.Clusters {
		if err := applyCluster(root, underlay, c); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
	}
	for _, h := range p.HubGateways {
		if err := applyHubGateway(root, underlay, h); err != nil {
			return fmt.Errorf("hub gateway %s: %w", h.Name, err)
		}
	}
	return nil
}

// applyHubGateway makes the hub gateway's namespace: a /31 uplink to the root namespace, over
// which it reaches APIAddress, its underlay link, and forwarding on, since it forwards between
// the clusters' tunnels.
func applyHubGateway(root, underlay *nsHandle, h HubGatewayNet) error {
	gw, err := openNamespace(h.Netns)
	if err != nil {
		return err
	}
	defer gw.Close()
	if err := gw.setUp("lo"); err != nil {
		return err
	}
	if err := rootLink(root, h.Uplink, nodeLANName, gw, h.UplinkAddr); err != nil {
		return err
	}
	if err := gw.replaceAddr(nodeLANName, h.Addr); err != nil {
		return err
	}
	if err := gw.replaceRoute(netip.PrefixFrom(APIAddress, 32), h.UplinkAddr.Addr()); err != nil {
		return err
	}
	// The API server reaches a hub gateway node's kubelet at its InternalIP, the underlay
	// address (HubGatewayNet.Node), through its uplink.
	if err := root.replaceRouteOn(h.Uplink, netip.PrefixFrom(h.UnderlayAddr.Addr(), 32), h.Addr.Addr()); err != nil {
		return err
	}
	if err := joinUnderlay(underlay, gw, h.underlayPort, h.UnderlayAddr); err != nil {
		return err
	}
	return inNamespace(h.Netns, func() error {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
			return fmt.Errorf("turning IP forwarding on: %w", err)
		}
		return nil
	})
}

// joinUnderlay puts a namespace on the underlay bridge: port is the bridge's end, the
// namespace's end is nodeUnderlayName with addr.
func joinUnderlay(underlay, ns *nsHandle, port string, addr netip.Prefix) error {
	if err := underlay.ensureVeth(port, nodeUnderlayName, ns); err != nil {
		return err
	}
	if err := underlay.setMaster(port, bridgeName); err != nil {
		return err
	}
	if err := underlay.setUp(port); err != nil {
		return err
	}
	if err := ns.replaceAddr(nodeUnderlayName, addr); err != nil {
		return err
	}
	return ns.setUp(nodeUnderlayName)
}

// rootLink creates a veth from the root namespace into peer and gives the root end addr.
func rootLink(root *nsHandle, name, peerName string, peer *nsHandle, addr netip.Prefix) error {
	if err := root.ensureVeth(name, peerName, peer); err != nil {
		return err
	}
	if err := disableIPv6(name); err != nil {
		return err
	}
	if err := root.replaceAddr(name, addr); err != nil {
		return err
	}
	if err := root.setUp(name); err != nil {
		return err
	}
	return peer.setUp(peerName)
}

func applyCluster(root, underlay *nsHandle, c ClusterNet) error {
	lan, err := openNamespace(c.LAN)
	if err != nil {
		return err
	}
	defer lan.Close()
	if err := lan.ensureBridge(bridgeName); err != nil {
		return err
	}
	if err := lan.setUp("lo", bridgeName); err != nil {
		return err
	}
	if err := rootLink(root, c.Uplink, lanUplinkName, lan, c.UplinkAddr); err != nil {
		return err
	}
	if err := lan.setMaster(lanUplinkName, bridgeName); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := applyNode(lan, underlay, c, n); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	return nil
}

func applyNode(lan, underlay *nsHandle, c ClusterNet, n NodeNet) error {
	node, err := openNamespace(n.Netns)
	if err != nil {
		return err
	}
	defer node.Close()
	// kube-proxy's health and metrics servers listen on loopback.
	if err := node.setUp("lo"); err != nil {
		return err
	}
	if err := lan.ensureVeth(n.port, nodeLANName, node); err != nil {
		return err
	}
	if err := lan.setMaster(n.port, bridgeName); err != nil {
		return err
	}
	if err := lan.setUp(n.port); err != nil {
		return err
	}
	if err := node.replaceAddr(nodeLANName, n.LANAddr); err != nil {
		return err
	}
	if n.LANAddr6.IsValid() {
		// Dual-stack: the node's IPv6 InternalIP, without duplicate address detection (nothing
		// else on the LAN has it, and a tentative address would fail the kubelet's first binds).
		if err := node.replaceAddr(nodeLANName, n.LANAddr6); err != nil {
			return err
		}
	}
	if err := node.setUp(nodeLANName); err != nil {
		return err
	}
	if c.ServiceCIDR6.IsValid() {
		// On-link like the IPv4 range, for kube-proxy's DNAT of locally generated packets.
		if err := node.replaceRoute(c.ServiceCIDR6, netip.Addr{}); err != nil {
			return err
		}
	}
	if err := node.replaceRoute(netip.PrefixFrom(APIAddress, 32), c.UplinkAddr.Addr()); err != nil {
		return err
	}
	// On-link rather than via the uplink: a packet to a ClusterIP that kube-proxy did not
	// DNAT (no such Service) then dies unanswered on the LAN instead of reaching the root
	// namespace, which might forward it off the machine.
	if err := node.replaceRoute(c.ServiceCIDR, netip.Addr{}); err != nil {
		return err
	}
	if !n.Gateway {
		return nil
	}
	return joinUnderlay(underlay, node, n.underlayPort, n.UnderlayAddr)
}

// Teardown deletes every root-namespace link and every namespace of the lab with the given
// ID, found by their ownership prefixes, and nothing else. Deleting a namespace also deletes
// the links inside it and the root ends of their veths. It is safe to run twice and after a
// crash at any point of Apply. Processes still running in a namespace keep it alive (not
// visible by name) until they exit; stop them first.
func Teardown(id string) error {
	if len(id) != idLen {
		return fmt.Errorf("tearing down the lab network: bad lab ID %q", id)
	}
	var errs []error
	root, err := openNamespace("")
	if err != nil {
		return err
	}
	defer root.Close()
	links, err := root.linksWithPrefix(RootLinkOwnerPrefix(id))
	if err != nil {
		errs = append(errs, err)
	}
	for _, l := range links {
		errs = append(errs, root.deleteLink(l))
	}
	names, err := ListNamespaces(NetnsOwnerPrefix(id))
	if err != nil {
		errs = append(errs, err)
	}
	for _, ns := range names {
		errs = append(errs, DeleteNamespace(ns))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tearing down the network of lab %s: %w", id, err)
	}
	return nil
}

// Leftovers lists what Teardown would delete: namespaces and root-namespace links of the lab
// with the given ID. Tests and `lab status` use it.
func Leftovers(id string) (namespaces, links []string, err error) {
	namespaces, err = ListNamespaces(NetnsOwnerPrefix(id))
	if err != nil {
		return nil, nil, err
	}
	root, err := openNamespace("")
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	links, err = root.linksWithPrefix(RootLinkOwnerPrefix(id))
	sort.Strings(links)
	return namespaces, links, err
}

// RootRoutes lists the routes of every table of the root namespace (IPv4 and IPv6), for
// checking that the lab adds none outside its ranges.
func RootRoutes() ([]netlink.Route, error) {
	root, err := openNamespace("")
	if err != nil {
		return nil, err
	}
	defer root.Close()
	routes, err := root.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: 0}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("listing routes of the root namespace: %w", err)
	}
	return routes, nil
}

// NewRoutesOutsideLab returns the routes of after (see RootRoutes) that before lacked and whose
// destination is not inside the lab's documentation ranges: what the lab must never add.
func NewRoutesOutsideLab(before, after []netlink.Route) []netlink.Route {
	key := func(r netlink.Route) string {
		return fmt.Sprintf("%d %d %v %v %d", r.Table, r.Type, r.Dst, r.Gw, r.LinkIndex)
	}
	old := map[string]bool{}
	for _, r := range before {
		old[key(r)] = true
	}
	// The LANs' range, and the underlay's for the host routes to the hub gateway nodes
	// (applyHubGateway); both are documentation ranges the lab owns.
	allowed := []netip.Prefix{LANRange, UnderlayRange}
	var bad []netlink.Route
	for _, r := range after {
		if old[key(r)] {
			continue
		}
		ok := false
		if r.Dst != nil {
			if p, err := netip.ParsePrefix(r.Dst.String()); err == nil {
				for _, a := range allowed {
					ok = ok || (a.Contains(p.Addr()) && p.Bits() >= a.Bits())
				}
			}
		}
		if !ok {
			bad = append(bad, r)
		}
	}
	return bad
}

// OtherLabs returns the IDs of other labs whose links are in the root namespace. Two labs
// cannot run at once: both would put APIAddress and the same LAN addresses on root links.
func OtherLabs(id string) ([]string, error) {
	root, err := openNamespace("")
	if err != nil {
		return nil, err
	}
	defer root.Close()
	links, err := root.linksWithPrefix(rootLinkPrefix)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var ids []string
	for _, l := range links {
		rest := l[len(rootLinkPrefix):]
		if len(rest) <= idLen || rest[idLen] != '-' || rest[:idLen] == id || seen[rest[:idLen]] {
			continue
		}
		seen[rest[:idLen]] = true
		ids = append(ids, rest[:idLen])
	}
	sort.Strings(ids)
	return ids, nil
}

// checkRootFree fails if the root namespace has a route into LANRange on a link that is not
// this lab's: the host uses those addresses, and putting them on lab links would break it.
func checkRootFree(id string) error {
	root, err := openNamespace("")
	if err != nil {
		return err
	}
	defer root.Close()
	routes, err := root.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 0}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("listing routes of the root namespace: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		dst, err := netip.ParsePrefix(r.Dst.String())
		if err != nil || dst.Bits() == 0 || !dst.Overlaps(LANRange) { // a default route is no claim on the range
			continue
		}
		if l, err := root.LinkByIndex(r.LinkIndex); err == nil && strings.HasPrefix(l.Attrs().Name, RootLinkOwnerPrefix(id)) {
			continue
		}
		return fmt.Errorf("the root namespace already routes %s (link index %d), inside the lab's range %s: the lab would break that network, so it does not start", dst, r.LinkIndex, LANRange)
	}
	return nil
}
