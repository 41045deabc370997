// Package kernel holds what both tunnel drivers do to the kernel besides the tunnel itself:
// routes to peer subnets, the MTU, and the TCP MSS clamp. Every marker that lets a driver find
// its own state again is in this file.
package kernel

const (
	// RouteProtocol is the rtm_protocol of the routes to peer subnets (`ip route show proto
	// 213`). It is unused by the kernel and /etc/iproute2/rt_protos, and differs from the lab's
	// 211 and the route agent's 212, so none of us ever deletes another's routes. A driver
	// deletes only routes that carry it AND leave through its own device.
	RouteProtocol = 213
	// RouteTableMain is where peer subnets are routed, at metric 0, so on the gateway
	// node they win over the route agent's (metric 212) routes towards the gateway itself.
	RouteTableMain = 254
	// NFTTablePrefix + device name is the one inet nftables table a driver owns (the MSS clamp
	// and, for vxlan, the byte counters). One table per device, because devices are unique
	// per machine and Close must remove exactly its own.
	NFTTablePrefix = "octopus-tunnel-"
	// LinkAlias is set on every link a driver creates (`ip link show` prints it), so an
	// existing link of that name left by a crashed process is recognised as ours and replaced,
	// while a foreign link is refused rather than deleted.
	LinkAlias = "octopus-tunnel"
)

const (
	// VXLANVNI is the fixed VNI of the vxlan driver: one device per gateway carries all peers,
	// told apart by the outer address, so a single VNI suffices. Any fixed value works as long
	// as every cluster uses the same one; 7473 is arbitrary but easy to spot in a capture.
	VXLANVNI = 7473
	// VXLANMACPrefix starts every tunnel MAC address the vxlan driver derives (locally
	// administered, unicast), so its FDB and neighbour entries are recognisable.
	VXLANMACPrefix = "\x02\x6f"
)
