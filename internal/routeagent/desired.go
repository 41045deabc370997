package routeagent

import (
	"net/netip"

	"github.com/octopus-mcs/octopus/internal/datapath/route"
	"github.com/octopus-mcs/octopus/internal/ipam"
)

// Gateway is the active gateway as the route agent sees it.
type Gateway struct {
	// Node is the Lease holder's node name; empty when no gateway has ever been elected.
	Node string
	// Addrs are that node's InternalIPs, at most one per address family (InternalIPs); empty
	// when unknown. A dual-stack node has one of each: the next hop of a remote CIDR must be
	// of its family.
	Addrs []netip.Addr
}

// via returns the gateway's address of the family of p, invalid when it has none.
func (g Gateway) via(p netip.Prefix) netip.Addr {
	for _, a := range g.Addrs {
		if a.Unmap().Is4() == p.Addr().Is4() {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}

// Desired computes this node's routes: every remote CIDR via the active gateway. It is empty
// on the gateway node itself, whose tunnel driver routes the CIDRs into the tunnel (ours
// would only compete), and while no gateway is known. Each CIDR goes via the gateway's address
// of its family; CIDRs of a family the gateway node has no InternalIP of are skipped (an
// IPv4-only node in a cluster that imports IPv6 CIDRs): no next hop could carry them.
func Desired(self string, gw Gateway, remote []netip.Prefix) []route.Route {
	if gw.Node == "" || gw.Node == self {
		return nil
	}
	var out []route.Route
	for _, p := range ipam.SortPrefixes(remote) {
		if via := gw.via(p); via.IsValid() {
			out = append(out, route.Route{Dst: p.Masked(), Via: via})
		}
	}
	return out
}
