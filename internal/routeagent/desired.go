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
	// Addr is that node's InternalIP of the subnets' family; invalid when unknown.
	Addr netip.Addr
}

// Desired computes this node's routes: every remote CIDR via the active gateway. It is empty
// on the gateway node itself, whose tunnel driver routes the CIDRs into the tunnel (ours
// would only compete), and while no gateway is known. CIDRs of the other address family than
// the gateway's address are skipped: they need a next hop of their own family.
func Desired(self string, gw Gateway, remote []netip.Prefix) []route.Route {
	if gw.Node == "" || gw.Node == self || !gw.Addr.IsValid() {
		return nil
	}
	var out []route.Route
	for _, p := range ipam.SortPrefixes(remote) {
		if p.Addr().Is4() != gw.Addr.Is4() {
			continue
		}
		out = append(out, route.Route{Dst: p.Masked(), Via: gw.Addr})
	}
	return out
}
