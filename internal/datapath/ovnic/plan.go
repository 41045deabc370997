package ovnic

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// observed is what Apply read of the AZ's NB database: the rows it builds on and every row of
// ours.
type observed struct {
	global nbdb.NBGlobal
	// switches are the subnet switches and the transit switch, by name.
	switches map[string]nbdb.LogicalSwitch
	router   *nbdb.LogicalRouter // ours; nil if none
	// lrps and lsps are our router ports and switch ports, by name.
	lrps map[string]nbdb.LogicalRouterPort
	lsps map[string]nbdb.LogicalSwitchPort
	// lspSwitch is the switch (UUID) each of our switch ports (UUID) is on.
	lspSwitch map[string]string
	// gateways are the Gateway_Chassis rows our router ports reference, by UUID.
	gateways map[string]nbdb.GatewayChassis
	// routes are our manual routes on our router (not ovn-ic's learned ones).
	routes []nbdb.LogicalRouterStaticRoute
	// held are the addresses other ports hold on the subnet switches: switch name -> address
	// -> the port's name.
	held map[string]map[netip.Addr]string
}

// plan is what Apply writes: every change, made in one transaction.
type plan struct {
	global *nbdb.NBGlobal // nil: unchanged

	createRouter bool
	createLRPs   []desiredLRP
	updateLRPs   []desiredLRP // UUID set
	deleteLRPs   []string     // UUIDs
	createLSPs   []nbdb.LogicalSwitchPort
	lspSwitch    map[string]string // name of a new port -> its switch's UUID
	updateLSPs   []nbdb.LogicalSwitchPort
	deleteLSPs   []nbdb.LogicalSwitchPort // with deleteLSPSwitch
	deleteLSPSw  []string
	createRoutes []nbdb.LogicalRouterStaticRoute
	deleteRoutes []string // UUIDs
}

// desiredLRP is a router port and the gateway chassis it is to be bound to.
type desiredLRP struct {
	port     nbdb.LogicalRouterPort
	gateways []nbdb.GatewayChassis // by priority; nil for subnet ports
	// gatewaysChanged: the port's gateway_chassis are to be replaced (an update only).
	gatewaysChanged bool
}

func (p plan) empty() bool {
	return p.global == nil && !p.createRouter && len(p.createLRPs)+len(p.updateLRPs)+len(p.deleteLRPs)+
		len(p.createLSPs)+len(p.updateLSPs)+len(p.deleteLSPs)+len(p.createRoutes)+len(p.deleteRoutes) == 0
}

// errNoTransitSwitch: ovn-ic has not copied the transit switch into the AZ's NB (yet). It wraps
// ErrNotReady.
var errNoTransitSwitch = fmt.Errorf("%w: the transit switch is not in the AZ's NB database (ovn-ic copies it from the IC NB once NB_Global names the AZ)", ErrNotReady)

// ids are the external_ids of every row Apply makes.
func ids(az string) map[string]string {
	return map[string]string{owner.OVNKeyOwner: owner.OVNOwnerInterconnect, owner.OVNKeyCluster: az}
}

func isOurs(m map[string]string, az string) bool {
	return m[owner.OVNKeyOwner] == owner.OVNOwnerInterconnect && m[owner.OVNKeyCluster] == az
}

// makePlan compares az with what obs holds and lists the changes. The router port on the transit
// switch is bound to az.GatewayChassis with priorities 100, 99, ... in their order.
func makePlan(az AZ, obs observed) (plan, error) {
	var p plan
	if err := planGlobal(az, obs, &p); err != nil {
		return plan{}, err
	}
	if _, ok := obs.switches[az.TransitSwitch]; !ok {
		// Only NB_Global: see applyOnce.
		return plan{global: p.global}, fmt.Errorf("transit switch %s: %w", az.TransitSwitch, errNoTransitSwitch)
	}
	p.createRouter = obs.router == nil

	// The router's ports and their peers: one per subnet switch and one on the transit switch.
	type link struct {
		sw       string
		addr     netip.Prefix
		gateways []string
	}
	links := []link{{sw: az.TransitSwitch, addr: az.TransitAddress, gateways: az.GatewayChassis}}
	for _, s := range az.Subnets {
		links = append(links, link{sw: s.Switch, addr: s.Address})
	}
	wantLRP, wantLSP := map[string]bool{}, map[string]bool{}
	p.lspSwitch = map[string]string{}
	for _, l := range links {
		sw, ok := obs.switches[l.sw]
		if !ok {
			return plan{}, fmt.Errorf("logical switch %s: %w", l.sw, ErrNotReady)
		}
		if port := obs.held[l.sw][l.addr.Addr()]; port != "" {
			// Two ports answering ARP for one address on a switch split the pods' traffic
			// between them: the router never takes an address someone holds.
			return plan{}, fmt.Errorf("%w: the interconnection router's address %s on switch %s is held by port %s; "+
				"if it is the secondary network's gateway port, run the ovnmaster with --interconnect, which leaves "+
				"the block's gateway address to the router (the member chart does with interconnect ovn-ic)", ErrAddressHeld, l.addr.Addr(), l.sw, port)
		}
		lrpName, lspName := RouterPortName(az.Name, l.sw), SwitchPortName(az.Name, l.sw)
		wantLRP[lrpName], wantLSP[lspName] = true, true

		want := desiredLRP{port: nbdb.LogicalRouterPort{
			Name: lrpName, MAC: macFor(l.addr.Addr()), Networks: []string{l.addr.String()}, ExternalIDs: ids(az.Name),
		}}
		for i, c := range l.gateways {
			want.gateways = append(want.gateways, nbdb.GatewayChassis{
				Name: lrpName + "-" + c, ChassisName: c, Priority: 100 - i, ExternalIDs: ids(az.Name),
			})
		}
		if have, ok := obs.lrps[lrpName]; !ok {
			p.createLRPs = append(p.createLRPs, want)
		} else {
			want.port.UUID = have.UUID
			want.gatewaysChanged = !sameGateways(want.gateways, have.GatewayChassis, obs.gateways)
			if want.gatewaysChanged || have.MAC != want.port.MAC || !slices.Equal(have.Networks, want.port.Networks) {
				p.updateLRPs = append(p.updateLRPs, want)
			}
		}

		lsp := nbdb.LogicalSwitchPort{
			Name: lspName, Type: "router", Addresses: []string{"router"},
			Options: map[string]string{"router-port": lrpName}, ExternalIDs: ids(az.Name),
		}
		have, ok := obs.lsps[lspName]
		switch {
		case !ok:
			p.createLSPs = append(p.createLSPs, lsp)
			p.lspSwitch[lspName] = sw.UUID
		case obs.lspSwitch[have.UUID] != sw.UUID:
			// Our port, on a switch other than the one its name says: something moved it.
			// Refused rather than repaired, as it is not a state Apply ever writes.
			return plan{}, fmt.Errorf("switch port %s is on another switch than %s: remove it (ovn-nbctl lsp-del %s) and apply again", lspName, l.sw, lspName)
		case have.Type != lsp.Type || !slices.Equal(have.Addresses, lsp.Addresses) || have.Options["router-port"] != lrpName:
			// ovn-ic keeps options:requested-tnl-key on the transit switch's port: keep every
			// option but ours.
			lsp.UUID = have.UUID
			lsp.Options = maps.Clone(have.Options)
			if lsp.Options == nil {
				lsp.Options = map[string]string{}
			}
			lsp.Options["router-port"] = lrpName
			p.updateLSPs = append(p.updateLSPs, lsp)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(obs.lrps)) {
		if !wantLRP[name] {
			p.deleteLRPs = append(p.deleteLRPs, obs.lrps[name].UUID)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(obs.lsps)) {
		if !wantLSP[name] {
			lsp := obs.lsps[name]
			p.deleteLSPs = append(p.deleteLSPs, lsp)
			p.deleteLSPSw = append(p.deleteLSPSw, obs.lspSwitch[lsp.UUID])
		}
	}

	// Manual routes, matched on (prefix, next hop).
	have := map[[2]string]string{}
	for _, r := range obs.routes {
		key := [2]string{r.IPPrefix, r.Nexthop}
		if _, dup := have[key]; dup {
			p.deleteRoutes = append(p.deleteRoutes, r.UUID) // a duplicate of ours: one is enough
			continue
		}
		have[key] = r.UUID
	}
	for _, r := range az.Routes {
		key := [2]string{r.Prefix.String(), r.NextHop.String()}
		if _, ok := have[key]; ok {
			delete(have, key)
			continue
		}
		p.createRoutes = append(p.createRoutes, nbdb.LogicalRouterStaticRoute{
			IPPrefix: key[0], Nexthop: key[1], ExternalIDs: ids(az.Name),
		})
	}
	for _, key := range slices.SortedFunc(maps.Keys(have), func(a, b [2]string) int {
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		return cmp.Compare(a[1], b[1])
	}) {
		p.deleteRoutes = append(p.deleteRoutes, have[key])
	}
	return p, nil
}

// planGlobal sets p.global when NB_Global's name or our options differ from az.
func planGlobal(az AZ, obs observed, p *plan) error {
	g := obs.global
	if g.UUID == "" {
		return fmt.Errorf("NB_Global row (ovn-northd creates it): %w", ErrNotReady)
	}
	if g.Name != "" && g.Name != az.Name {
		return fmt.Errorf("the NB database is AZ %q already (NB_Global name), not %q: an AZ is never renamed, since ovn-ic registered everything under the old name", g.Name, az.Name)
	}
	opts := maps.Clone(g.Options)
	if opts == nil {
		opts = map[string]string{}
	}
	auto := strconv.FormatBool(az.AutoRoutes)
	opts[owner.OVNInterconnectOptionAdvertise] = auto
	opts[owner.OVNInterconnectOptionLearn] = auto
	if d := az.denylist(); d != "" {
		opts[owner.OVNInterconnectOptionDenylist] = d
	} else {
		delete(opts, owner.OVNInterconnectOptionDenylist)
	}
	if g.Name == az.Name && maps.Equal(opts, g.Options) {
		return nil
	}
	p.global = &nbdb.NBGlobal{UUID: g.UUID, Name: az.Name, Options: opts}
	return nil
}

// sameGateways reports whether the Gateway_Chassis rows refs point at are exactly want (chassis
// and priority; names too, so a row someone else made is replaced by ours).
func sameGateways(want []nbdb.GatewayChassis, refs []string, rows map[string]nbdb.GatewayChassis) bool {
	if len(want) != len(refs) {
		return false
	}
	have := map[string]nbdb.GatewayChassis{}
	for _, u := range refs {
		r, ok := rows[u]
		if !ok {
			return false
		}
		have[r.Name] = r
	}
	for _, w := range want {
		h, ok := have[w.Name]
		if !ok || h.ChassisName != w.ChassisName || h.Priority != w.Priority {
			return false
		}
	}
	return true
}
