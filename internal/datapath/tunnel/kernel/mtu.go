package kernel

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// Per-driver encapsulation overheads, worst case over IPv4/IPv6 underlays.
const (
	// WireGuardOverhead: IPv6 40 + UDP 8 + WireGuard header 16 + auth tag 16 = 80, the value
	// wg-quick uses, so an IPv4 and an IPv6 underlay get the same MTU.
	WireGuardOverhead = 80
	// VXLANOverhead: IPv6 40 + UDP 8 + VXLAN 8 + inner Ethernet 14 = 70.
	VXLANOverhead = 70
	// DefaultUnderlayMTU is assumed when no underlay link can be found.
	DefaultUnderlayMTU = 1500
	minMTU             = 1280 // IPv6 minimum: below it, IPv6 over the tunnel breaks
)

// MTU returns the tunnel device MTU: configured when non-zero, else underlay minus overhead.
func MTU(configured, underlay, overhead int) (int, error) {
	mtu := configured
	if mtu == 0 {
		mtu = underlay - overhead
	}
	if mtu < minMTU || mtu > 65535 {
		return 0, fmt.Errorf("tunnel MTU %d (configured %d, underlay %d, overhead %d) is outside %d..65535: set Config.MTU or raise the underlay MTU", mtu, configured, underlay, overhead, minMTU)
	}
	return mtu, nil
}

// UnderlayMTU is the MTU of the link that carries the tunnel: the link holding local when it
// is valid, else the link of the route towards the first endpoint, else DefaultUnderlayMTU.
func UnderlayMTU(local netip.Addr, endpoints []netip.Addr) int {
	if local.IsValid() {
		if addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL); err == nil {
			for _, a := range addrs {
				if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == local.Unmap() {
					if l, err := netlink.LinkByIndex(a.LinkIndex); err == nil {
						return l.Attrs().MTU
					}
				}
			}
		}
	}
	for _, ep := range endpoints {
		routes, err := netlink.RouteGet(net.IP(ep.AsSlice()))
		if err != nil || len(routes) == 0 {
			continue
		}
		if routes[0].MTU > 0 {
			return routes[0].MTU
		}
		if l, err := netlink.LinkByIndex(routes[0].LinkIndex); err == nil {
			return l.Attrs().MTU
		}
	}
	return DefaultUnderlayMTU
}

// UnderlayPacketSize is the largest underlay IP packet a tunnel device of the given MTU sends:
// the MTU plus the driver's overhead, which counts an IPv6 header, less the 20 bytes an IPv4
// header is shorter. (wireguard-go pads a packet to a multiple of 16 bytes only up to the MTU.)
func UnderlayPacketSize(mtu, overhead int, ipv4 bool) int {
	if ipv4 {
		return mtu + overhead - 20
	}
	return mtu + overhead
}
