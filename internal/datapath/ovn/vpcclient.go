package ovn

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// ApplyVpc makes the VPC's router, subnet switches, pods' ports and gateway (its link switch
// and ports, the router's default route) in the NB database match v, all in one transaction, and reports what every pod got. Like Apply it may be called any
// number of times with the same v and writes nothing when the database already matches; it
// never touches the cluster's network nor another VPC's rows. The error is about the VPC as a
// whole (invalid input, database unreachable, transaction failed): then nothing was written.
func (c *Client) ApplyVpc(ctx context.Context, v Vpc) (VpcResult, error) {
	blocks, err := v.validate()
	if err != nil {
		return VpcResult{}, err
	}
	for attempt := 1; ; attempt++ {
		obs, err := c.observeVpc(ctx, v.ClusterID, v.Name)
		if err == nil {
			p := makeVpcPlan(v, blocks, obs)
			if p.empty() {
				return p.result, nil
			}
			if err = c.transactVpc(ctx, v, obs, p); err == nil {
				c.log.V(1).Info("Applied VPC", "cluster", v.ClusterID, "vpc", v.Name, "routerCreated", p.createRouter,
					"routerPortsCreated", len(p.lrpCreate), "subnetsRemoved", len(p.removeSubnets),
					"attached", len(p.result.Attached), "failed", len(p.result.Failed), "gatewayPort", p.result.Gateway.Port,
					"gatewayMoved", p.gateway != nil && p.gateway.updateGateway != nil, "gatewayRemoved", p.removeGateway != nil)
				return p.result, nil
			}
		}
		var conflict *ovsdb.TimedOut
		retry := errors.As(err, &conflict) || errors.Is(err, errCacheBehind)
		if !retry || attempt == conflictRetries {
			return VpcResult{}, fmt.Errorf("applying VPC %s of cluster %s: %w", v.Name, v.ClusterID, err)
		}
		c.log.V(1).Info("NB database changed during ApplyVpc; retrying", "cluster", v.ClusterID, "vpc", v.Name, "attempt", attempt)
		select {
		case <-ctx.Done():
			return VpcResult{}, ctx.Err()
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		}
	}
}

// DeleteVpc removes every row of the VPC: its router, router ports and default route, its
// subnet switches and gateway link switch and every port of ours on them. A port someone else put on a subnet switch or on the router
// is left, and then so is that switch or router. Nothing of the cluster's network or of another VPC is touched.
func (c *Client) DeleteVpc(ctx context.Context, clusterID, vpc string) error {
	if err := validateVpcName(clusterID, vpc); err != nil {
		return err
	}
	obs, err := c.observeVpc(ctx, clusterID, vpc)
	if err != nil {
		return fmt.Errorf("deleting VPC %s of cluster %s: %w", vpc, clusterID, err)
	}
	var ops []ovsdb.Operation
	if obs.router != nil {
		var ours []string
		for _, lrp := range obs.lrps {
			if ownsVpc(lrp.ExternalIDs, clusterID, vpc) {
				ours = append(ours, lrp.UUID)
			}
		}
		var ourRoutes []string
		for _, r := range obs.routes {
			if ownsVpc(r.ExternalIDs, clusterID, vpc) {
				ourRoutes = append(ourRoutes, r.UUID)
			}
		}
		if len(ours) == len(obs.lrps) {
			if ops, err = c.nb.Where(obs.router).Delete(); err != nil {
				return err
			}
			// Our routes explicitly, like the router ports; anyone else's goes with the router
			// by reference (a static route is not a root row).
			for _, u := range ourRoutes {
				del, err := c.nb.Where(&nbdb.LogicalRouterStaticRoute{UUID: u}).Delete()
				if err != nil {
					return err
				}
				ops = append(ops, del...)
			}
		} else {
			// A port someone else put on the router keeps it (deleting the router would take
			// that port with it: router ports live only while a router holds them), and our
			// default route must go from it: it would point at a gateway that is gone.
			lr := obs.router
			if len(ours) > 0 {
				if ops, err = c.nb.Where(lr).Mutate(lr, model.Mutation{Field: &lr.Ports, Mutator: ovsdb.MutateOperationDelete, Value: ours}); err != nil {
					return err
				}
			}
			o, err := c.routeOps(lr, nil, ourRoutes)
			if err != nil {
				return err
			}
			ops = append(ops, o...)
		}
		for _, u := range ours {
			del, err := c.nb.Where(&nbdb.LogicalRouterPort{UUID: u}).Delete()
			if err != nil {
				return err
			}
			ops = append(ops, del...)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(obs.subnets)) {
		o, err := c.removeSubnetOps(obs.subnets[name])
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	}
	if obs.gateway.sw != nil {
		o, err := c.removeSubnetOps(obs.gateway)
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	}
	if len(ops) == 0 {
		return nil
	}
	if err := c.run(ctx, ops); err != nil {
		return fmt.Errorf("deleting VPC %s of cluster %s: %w", vpc, clusterID, err)
	}
	return nil
}

// removeSubnetOps delete a subnet's switch with its ports, or, when it holds a port Octopus did
// not make, only Octopus's ports.
func (c *Client) removeSubnetOps(o observed) ([]ovsdb.Operation, error) {
	var ours []string
	for _, p := range o.ports {
		if ownsVpc(p.ExternalIDs, o.sw.ExternalIDs[owner.OVNKeyCluster], o.sw.ExternalIDs[owner.OVNKeyVPC]) {
			ours = append(ours, p.UUID)
		}
	}
	if len(ours) < len(o.ports) {
		return c.removePorts(o.sw, ours)
	}
	ops, err := c.nb.Where(o.sw).Delete()
	if err != nil {
		return nil, err
	}
	for _, u := range ours {
		del, err := c.nb.Where(&nbdb.LogicalSwitchPort{UUID: u}).Delete()
		if err != nil {
			return nil, err
		}
		ops = append(ops, del...)
	}
	return ops, nil
}

// observeVpc reads the VPC's rows from the cache. A router or switch that has a VPC row's
// name but is not Octopus's is an error: Apply would otherwise make a second of that name.
func (c *Client) observeVpc(ctx context.Context, clusterID, vpc string) (vpcObserved, error) {
	routerName := VpcRouterName(clusterID, vpc)
	var routers []nbdb.LogicalRouter
	if err := c.nb.WhereCache(func(r *nbdb.LogicalRouter) bool {
		return ownsVpc(r.ExternalIDs, clusterID, vpc) || r.Name == routerName
	}).List(ctx, &routers); err != nil {
		return vpcObserved{}, fmt.Errorf("listing logical routers: %w", err)
	}
	obs := vpcObserved{subnets: map[string]observed{}}
	for i := range routers {
		r := &routers[i]
		switch {
		case !ownsVpc(r.ExternalIDs, clusterID, vpc):
			return vpcObserved{}, fmt.Errorf("logical router %s (%s) exists but was not made by Octopus for VPC %s of cluster %s (external_ids %v): remove or rename it", r.Name, r.UUID, vpc, clusterID, r.ExternalIDs)
		case obs.router != nil:
			return vpcObserved{}, fmt.Errorf("VPC %s of cluster %s has two logical routers, %s and %s: remove one", vpc, clusterID, obs.router.UUID, r.UUID)
		}
		obs.router = r
	}
	if obs.router != nil {
		onRouter := make(map[string]bool, len(obs.router.Ports))
		for _, u := range obs.router.Ports {
			onRouter[u] = true
		}
		if err := c.nb.WhereCache(func(p *nbdb.LogicalRouterPort) bool { return onRouter[p.UUID] }).List(ctx, &obs.lrps); err != nil {
			return vpcObserved{}, fmt.Errorf("listing the ports of logical router %s: %w", obs.router.Name, err)
		}
		if len(obs.lrps) != len(onRouter) {
			return vpcObserved{}, errCacheBehind
		}
		routes := make(map[string]bool, len(obs.router.StaticRoutes))
		for _, u := range obs.router.StaticRoutes {
			routes[u] = true
		}
		if err := c.nb.WhereCache(func(r *nbdb.LogicalRouterStaticRoute) bool { return routes[r.UUID] }).List(ctx, &obs.routes); err != nil {
			return vpcObserved{}, fmt.Errorf("listing the static routes of logical router %s: %w", obs.router.Name, err)
		}
		if len(obs.routes) != len(routes) {
			return vpcObserved{}, errCacheBehind
		}
	}

	var switches []nbdb.LogicalSwitch
	if err := c.nb.WhereCache(func(ls *nbdb.LogicalSwitch) bool {
		return ownsVpc(ls.ExternalIDs, clusterID, vpc) || strings.HasPrefix(ls.Name, routerName+".")
	}).List(ctx, &switches); err != nil {
		return vpcObserved{}, fmt.Errorf("listing logical switches: %w", err)
	}
	for i := range switches {
		sw := &switches[i]
		subnet := sw.ExternalIDs[owner.OVNKeySubnet]
		isGateway := sw.ExternalIDs[owner.OVNKeyRole] == owner.OVNRoleGateway
		switch {
		case !ownsVpc(sw.ExternalIDs, clusterID, vpc):
			return vpcObserved{}, fmt.Errorf("logical switch %s (%s) exists but was not made by Octopus for VPC %s of cluster %s (external_ids %v): remove or rename it", sw.Name, sw.UUID, vpc, clusterID, sw.ExternalIDs)
		case isGateway && obs.gateway.sw != nil:
			return vpcObserved{}, fmt.Errorf("VPC %s of cluster %s has two gateway link switches, %s and %s: remove one", vpc, clusterID, obs.gateway.sw.UUID, sw.UUID)
		case !isGateway && obs.subnets[subnet].sw != nil:
			return vpcObserved{}, fmt.Errorf("subnet %s of VPC %s of cluster %s has two logical switches, %s and %s: remove the one whose ports no pod uses", subnet, vpc, clusterID, obs.subnets[subnet].sw.UUID, sw.UUID)
		}
		o := observed{sw: sw}
		onSwitch := make(map[string]bool, len(sw.Ports))
		for _, u := range sw.Ports {
			onSwitch[u] = true
		}
		if err := c.nb.WhereCache(func(p *nbdb.LogicalSwitchPort) bool { return onSwitch[p.UUID] }).List(ctx, &o.ports); err != nil {
			return vpcObserved{}, fmt.Errorf("listing the ports of logical switch %s: %w", sw.Name, err)
		}
		if len(o.ports) != len(onSwitch) {
			return vpcObserved{}, errCacheBehind
		}
		if isGateway {
			obs.gateway = o
			continue
		}
		obs.subnets[subnet] = o
	}
	return obs, nil
}

// transactVpc writes p in one transaction: the router and its ports, guarded like the
// switches (segmentOps) so that two writers planning on the same state abort rather than
// both write, and every subnet's switch and ports.
func (c *Client) transactVpc(ctx context.Context, v Vpc, obs vpcObserved, p vpcPlan) error {
	var ops []ovsdb.Operation
	add := func(o []ovsdb.Operation, err error) error {
		ops = append(ops, o...)
		return err
	}
	newLRPs := make([]string, len(p.lrpCreate))
	for i := range p.lrpCreate {
		newLRPs[i] = "lrp" + strconv.Itoa(i)
		p.lrpCreate[i].UUID = newLRPs[i]
		if err := add(c.nb.Create(&p.lrpCreate[i])); err != nil {
			return err
		}
	}
	newRoutes := make([]string, len(p.routeCreate))
	for i := range p.routeCreate {
		newRoutes[i] = "route" + strconv.Itoa(i)
		p.routeCreate[i].UUID = newRoutes[i]
		if err := add(c.nb.Create(&p.routeCreate[i])); err != nil {
			return err
		}
	}
	zero := 0
	if p.createRouter {
		// No router of this name, as segmentOps' guard for a new switch.
		name := VpcRouterName(v.ClusterID, v.Name)
		guard := &nbdb.LogicalRouter{Name: name}
		if err := add(c.nb.WhereAll(guard, model.Condition{Field: &guard.Name, Function: ovsdb.ConditionEqual, Value: name}).
			Wait(ovsdb.WaitConditionNotEqual, &zero, guard, &guard.Name)); err != nil {
			return err
		}
		lr := &nbdb.LogicalRouter{UUID: "router", Name: name, Ports: newLRPs, StaticRoutes: newRoutes, ExternalIDs: vpcIDs(v.ClusterID, v.Name)}
		if err := add(c.nb.Create(lr)); err != nil {
			return err
		}
	} else {
		lr := obs.router
		// The routes too: the plan kept, or added, our one default route on what it read.
		guard := &nbdb.LogicalRouter{UUID: lr.UUID, Ports: lr.Ports, StaticRoutes: lr.StaticRoutes}
		if err := add(c.nb.Where(guard).Wait(ovsdb.WaitConditionEqual, &zero, guard, &guard.Ports, &guard.StaticRoutes)); err != nil {
			return err
		}
		if err := add(c.routeOps(lr, newRoutes, p.routeRemove)); err != nil {
			return err
		}
		for i := range p.routeUpdate {
			u := &p.routeUpdate[i]
			if err := add(c.nb.Where(u).Update(u, &u.IPPrefix, &u.Nexthop, &u.OutputPort, &u.ExternalIDs)); err != nil {
				return err
			}
		}
		if len(newLRPs) > 0 {
			if err := add(c.nb.Where(lr).Mutate(lr, model.Mutation{Field: &lr.Ports, Mutator: ovsdb.MutateOperationInsert, Value: newLRPs})); err != nil {
				return err
			}
		}
		if len(p.lrpRemove) > 0 {
			if err := add(c.nb.Where(lr).Mutate(lr, model.Mutation{Field: &lr.Ports, Mutator: ovsdb.MutateOperationDelete, Value: slices.Clone(p.lrpRemove)})); err != nil {
				return err
			}
			for _, u := range p.lrpRemove {
				if err := add(c.nb.Where(&nbdb.LogicalRouterPort{UUID: u}).Delete()); err != nil {
					return err
				}
			}
		}
		for i := range p.lrpUpdate {
			u := &p.lrpUpdate[i]
			if err := add(c.nb.Where(u).Update(u, &u.MAC, &u.Networks, &u.ExternalIDs)); err != nil {
				return err
			}
		}
	}
	for i, s := range p.subnets {
		if s.plan.empty() {
			continue
		}
		if err := add(c.segmentOps("s"+strconv.Itoa(i), s.name, s.obs, s.plan)); err != nil {
			return err
		}
	}
	for _, o := range p.removeSubnets {
		if err := add(c.removeSubnetOps(o)); err != nil {
			return err
		}
	}
	if p.gateway != nil && !p.gateway.empty() {
		if err := add(c.segmentOps("gw", VpcGatewayLinkName(v.ClusterID, v.Name), obs.gateway, *p.gateway)); err != nil {
			return err
		}
	}
	if p.removeGateway != nil {
		if err := add(c.removeSubnetOps(*p.removeGateway)); err != nil {
			return err
		}
	}
	return c.run(ctx, ops)
}

// routeOps insert the new static routes (named UUIDs) into the router's and take the removed
// ones off it and delete their rows.
func (c *Client) routeOps(lr *nbdb.LogicalRouter, add, remove []string) ([]ovsdb.Operation, error) {
	var ops []ovsdb.Operation
	if len(add) > 0 {
		o, err := c.nb.Where(lr).Mutate(lr, model.Mutation{Field: &lr.StaticRoutes, Mutator: ovsdb.MutateOperationInsert, Value: add})
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	}
	if len(remove) == 0 {
		return ops, nil
	}
	o, err := c.nb.Where(lr).Mutate(lr, model.Mutation{Field: &lr.StaticRoutes, Mutator: ovsdb.MutateOperationDelete, Value: slices.Clone(remove)})
	if err != nil {
		return nil, err
	}
	ops = append(ops, o...)
	for _, u := range remove {
		del, err := c.nb.Where(&nbdb.LogicalRouterStaticRoute{UUID: u}).Delete()
		if err != nil {
			return nil, err
		}
		ops = append(ops, del...)
	}
	return ops, nil
}
