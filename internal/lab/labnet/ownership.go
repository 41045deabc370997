// Package labnet builds the lab's networks out of Linux network namespaces, veth pairs and
// bridges: a LAN per cluster with its nodes, an underlay joining the gateway nodes of all
// clusters, and one link that lets node namespaces reach the API servers in the root
// namespace. It talks netlink directly (github.com/vishvananda/netlink) instead of running ip.
//
// Everything it creates is named from the prefixes in internal/datapath/owner plus a lab ID,
// so Teardown finds all of it again, also after a crash, and never touches anything else.
package labnet

import "net/netip"

// Limits of the names the lab gives its objects: an ownership prefix of
// internal/datapath/owner, then the lab's ID (see LabID), so that two labs on one machine, or
// a lab and anything else, never delete each other's objects.
const (
	// idLen is the number of hex digits of a lab ID; see owner.LabRootLinkPrefix for why it
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
)

// lanBits is the size of a cluster LAN; see LANRange.
const lanBits = 28
