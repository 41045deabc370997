// Package labnet builds the lab's networks out of Linux network namespaces, veth pairs and
// bridges: a LAN per cluster with its nodes, an underlay joining the gateway nodes of all
// clusters, and one link that lets node namespaces reach the API servers in the root
// namespace. It talks netlink directly (github.com/vishvananda/netlink) instead of running ip.
//
// Everything it creates carries one of the markers below (a name prefix plus a lab ID, a
// route protocol, an nftables table), so Teardown finds all of it again, also after a crash,
// and never touches anything else.
package labnet

import (
	"net/netip"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// The lab's markers: how it finds its own state in the kernel again. They are the lab's
// alone; the data plane's markers are in internal/datapath/owner/ownership.go, and where the
// two share a namespace (a node runs the lab's routes next to a route agent's and a tunnel
// driver's) they must differ, which the constants after this block check at compile time.
const (
	// routeProtocol marks every route the lab adds, so that it tells its own routes from
	// the kernel's connected routes and anyone else's. 211 is unused by the kernel (0-4) and
	// by the routing daemons listed in /etc/iproute2/rt_protos (up to 192, plus 254 and 255),
	// and differs from the data plane's owner.RouteAgentProtocol and owner.TunnelRouteProtocol.
	routeProtocol = 211

	// nodeNFTTable is the table the lab owns in every node namespace (next to kube-proxy's
	// own "kube-proxy" table). It masquerades pod traffic leaving the cluster's pod range to
	// the node's address: without it a pod reaching the API servers (through
	// kubernetes.default) or the root end of its LAN's uplink would make the root namespace
	// answer a 10.x source address along its default route, that is off the machine.
	nodeNFTTable = "octopus-lab"

	// netnsPrefix starts the name of every network namespace the lab creates (files under
	// /run/netns, as `ip netns` uses), followed by the lab's ID and "-". Teardown lists
	// /run/netns and deletes only names that start with that, so two labs on one machine, or a
	// lab and anything else, never delete each other's namespaces.
	netnsPrefix = "octo-"
	// podNetnsInfix follows the lab's namespace prefix in the name under which the lab
	// mounts a pod's network namespace for tests and `octopus gather` (lab.PodNetns):
	// "octo-<id>-pod-<pod UID>". The UID, not the pod's name, because a pod deleted and
	// recreated under the same name must not inherit the old one's name; the infix tells them
	// from node, LAN and underlay namespaces.
	podNetnsInfix = "pod-"
	// rootLinkPrefix starts the name of every link the lab puts into the root namespace (the
	// API link and one uplink per cluster LAN), followed by the lab's ID and "-". Interface
	// names have at most 15 bytes, so the prefix is short: "octo-" + a 4-character ID + "-"
	// leaves 5 bytes for the role ("api", "c15"). Links inside the lab's own namespaces need
	// no prefix: they go away with the namespace.
	rootLinkPrefix = "octo-"
)

// The lab's route protocol differs from the data plane's: a constant division by zero does
// not compile, so making them equal fails the build.
const (
	_ = 1 / (routeProtocol - owner.RouteAgentProtocol)
	_ = 1 / (routeProtocol - owner.TunnelRouteProtocol)
)

// Limits of the names the lab gives its objects: an ownership prefix above, then the lab's
// ID (see LabID), so that two labs on one machine, or a lab and anything else, never delete
// each other's objects.
const (
	// idLen is the number of hex digits of a lab ID; see rootLinkPrefix for why it
	// is short.
	idLen = 4
	// maxIfNameLen is IFNAMSIZ-1, the longest interface name the kernel accepts.
	maxIfNameLen = 15
)

// Links inside lab namespaces. Fixed names keep the topology readable with `ip netns exec`.
const (
	// bridgeName is the bridge inside a LAN or the underlay namespace.
	bridgeName = "br0"
	// LANBridge is bridgeName for those who add ports to a cluster's LAN (the secondary
	// network's underlay links, internal/lab/secondary.go).
	LANBridge = bridgeName
	// lanUplinkName is the LAN namespace's end of the root-namespace uplink, a bridge port.
	lanUplinkName = "up0"
	// apiPeerName is the underlay namespace's end of the root API link. It carries no address
	// and is not bridged: it exists only so the root end has a peer and therefore a carrier.
	apiPeerName = "api0"
	// nodeLANName is a node's interface on its cluster LAN.
	nodeLANName = "eth0"
	// nodeUnderlayName is a gateway node's interface on the underlay.
	nodeUnderlayName = "ul0"
)

// Address plan. Only documentation ranges (RFC 5737) are used outside the clusters' own pod
// and service ranges, so nothing the lab routes can ever leave the machine, and the root
// namespace only gains connected routes into LANRange.
var (
	// LANRange holds one /28 per cluster LAN: .1 is the root namespace's uplink (the nodes'
	// next hop to APIAddress), nodes follow from .2. The last /28 is kept for APIAddress.
	LANRange = netip.MustParsePrefix("198.51.100.0/24")
	// APIAddress is where every API server of the lab listens (controlplane.Options.
	// BindAddress): a /32 on the root end of the API link, in the /28 of LANRange that no
	// cluster uses, so the root namespace gains no route for it beyond its local address. It
	// is not in 192.0.2.0/24 because hosts and sandboxes do use that range on real links
	// (this project's own CI machine has its default gateway at 192.0.2.1); Apply refuses to
	// run if the root namespace already has a route into LANRange.
	APIAddress = netip.MustParseAddr("198.51.100.241")
	// UnderlayRange is the "internet" between gateway nodes. It exists only inside the
	// underlay and gateway namespaces, never in the root namespace.
	UnderlayRange = netip.MustParsePrefix("203.0.113.0/24")

	// IPv6Range is the documentation prefix (RFC 3849): every IPv6 address of a dual-stack
	// lab is inside it. The three ranges below split it without overlapping; none of them
	// reaches the root namespace, whose links have IPv6 off (rootLink).
	IPv6Range = netip.MustParsePrefix("2001:db8::/32")
	// LANRange6 holds the clusters' IPv6 LANs, a /64 each (LAN6): a node has the same host
	// part in it as in its IPv4 LAN.
	LANRange6 = netip.MustParsePrefix("2001:db8::/48")
	// PodRange6 holds the clusters' IPv6 pod ranges, a /48 each (PodCIDR6).
	PodRange6 = netip.MustParsePrefix("2001:db8:100::/40")
	// ServiceRange6 holds the clusters' IPv6 service ranges, a /112 each (ServiceCIDR6).
	ServiceRange6 = netip.MustParsePrefix("2001:db8:200::/40")
)

// lanBits is the size of a cluster LAN; see LANRange.
const lanBits = 28
