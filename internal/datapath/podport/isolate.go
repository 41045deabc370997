package podport

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// addrGenModeNone is IN6_ADDR_GEN_MODE_NONE (linux/if_link.h): the kernel gives the link no
// IPv6 link-local address, so it sends nothing of its own (no DAD, router solicitation or MLD).
const addrGenModeNone = 1

// keepOffNodeStack keeps the node's own IP stack off link, a veth end that is a port of the
// integration bridge. On the userspace datapath ovs-vswitchd reads such a port through a packet
// socket, which sees every frame without taking it from the kernel: the node's stack gets a copy
// of everything the pod sends and acts on it. Measured on the lab, it answered a pod's ARP for
// the gateway's address (which the node holds on GatewayLink) with the veth's own MAC: the pods
// of a gateway node then sent their cross-cluster traffic straight into the node's stack,
// around the switch and its port security, and could address the node's own services the
// same way. Without ARP on the link (IFF_NOARP: the stack drops ARP received there) and without
// an IPv6 address, nothing on the switch learns the link's MAC, and frames for other MACs are
// dropped by the stack at once; the stack sends nothing into the switch either.
//
// Idempotent; changed says whether it had to turn ARP off or remove an IPv6 address. Called
// before a new link is up (when the kernel would give it its address), it has none to remove;
// a link made up by an earlier version has one, which goes.
func keepOffNodeStack(node *handle, link netlink.Link) (changed bool, err error) {
	name := link.Attrs().Name
	if link.Attrs().RawFlags&unix.IFF_NOARP == 0 {
		if err := node.LinkSetARPOff(link); err != nil {
			return false, fmt.Errorf("turning ARP off on %s: %w", name, err)
		}
		changed = true
	}
	if err := node.LinkSetIP6AddrGenMode(link, addrGenModeNone); err != nil {
		if errors.Is(err, unix.EAFNOSUPPORT) {
			return changed, nil // the node has no IPv6: there is no address to prevent
		}
		return changed, fmt.Errorf("turning IPv6 address generation off on %s: %w", name, err)
	}
	// A link that was up before (one made by an earlier version) keeps the address it got.
	addrs, err := node.AddrList(link, netlink.FAMILY_V6)
	if err != nil {
		return changed, fmt.Errorf("listing the IPv6 addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		if err := node.AddrDel(link, &a); err != nil {
			return changed, fmt.Errorf("removing %s from %s: %w", a.IPNet, name, err)
		}
		changed = true
	}
	return changed, nil
}
