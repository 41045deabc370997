package ovnic

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-logr/logr"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/ovnic/icsbdb"
)

// Client applies the interconnection state of one AZ to its NB database, reading the IC SB
// database to refuse overlapping prefixes.
type Client struct {
	nb, icsb client.Client
	log      logr.Logger
}

// Options configure Connect.
type Options struct {
	// NB is the AZ's NB database in OVSDB's syntax, "unix:/path" or "tcp:host:port"; a comma
	// list for a raft cluster (required).
	NB string
	// ICSB is the IC SB database, same syntax (required); the hub's serve "ssl:" only.
	ICSB string
	// NBTLS and ICSBTLS are the client's TLS configurations with its certificate, required
	// for an "ssl:" endpoint: the AZ's NB trusts the member's OVN CA, the IC SB the hub's IC
	// CA, so each connection presents its own certificate. An empty ServerName checks each
	// raft member's certificate against the address dialed.
	NBTLS, ICSBTLS *tls.Config
	// Log receives the client's messages (optional).
	Log logr.Logger
}

// conflictRetries is how often Apply re-reads and re-plans when its transaction found the
// database changed since it read it: ovn-ic writes learned routes onto our router at any time.
const conflictRetries = 5

// Connect connects to both databases and reads the tables Apply needs into the client's cache.
// The client reconnects by itself after a drop (another raft member, or the same server back).
func Connect(ctx context.Context, opts Options) (*Client, error) {
	log := opts.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	nbModel, err := model.NewClientDBModel(nbdb.Schema().Name, map[string]model.Model{
		nbdb.NBGlobalTable:                 &nbdb.NBGlobal{},
		nbdb.LogicalSwitchTable:            &nbdb.LogicalSwitch{},
		nbdb.LogicalSwitchPortTable:        &nbdb.LogicalSwitchPort{},
		nbdb.LogicalRouterTable:            &nbdb.LogicalRouter{},
		nbdb.LogicalRouterPortTable:        &nbdb.LogicalRouterPort{},
		nbdb.LogicalRouterStaticRouteTable: &nbdb.LogicalRouterStaticRoute{},
		nbdb.GatewayChassisTable:           &nbdb.GatewayChassis{},
	})
	if err != nil {
		return nil, fmt.Errorf("NB database model: %w", err)
	}
	icsbModel, err := model.NewClientDBModel(icsbdb.Schema().Name, map[string]model.Model{
		icsbdb.AvailabilityZoneTable: &icsbdb.AvailabilityZone{},
		icsbdb.RouteTable:            &icsbdb.Route{},
		icsbdb.PortBindingTable:      &icsbdb.PortBinding{},
		icsbdb.GatewayTable:          &icsbdb.Gateway{},
		// Gateway's encaps are strong references: the table is in the model so that Leave's
		// delete of a Gateway is understood, not monitored.
		icsbdb.EncapTable: &icsbdb.Encap{},
	})
	if err != nil {
		return nil, fmt.Errorf("IC SB database model: %w", err)
	}
	nb, err := connect(ctx, nbModel, opts.NB, opts.NBTLS, log, "OVN NB",
		&nbdb.NBGlobal{}, &nbdb.LogicalSwitch{}, &nbdb.LogicalSwitchPort{}, &nbdb.LogicalRouter{},
		&nbdb.LogicalRouterPort{}, &nbdb.LogicalRouterStaticRoute{}, &nbdb.GatewayChassis{})
	if err != nil {
		return nil, err
	}
	icsb, err := connect(ctx, icsbModel, opts.ICSB, opts.ICSBTLS, log, "OVN IC SB", &icsbdb.AvailabilityZone{}, &icsbdb.Route{}, &icsbdb.PortBinding{})
	if err != nil {
		nb.Close()
		return nil, err
	}
	return &Client{nb: nb, icsb: icsb, log: log}, nil
}

func connect(ctx context.Context, m model.ClientDBModel, endpoints string, tlsConfig *tls.Config, log logr.Logger, what string, tables ...model.Model) (client.Client, error) {
	if endpoints == "" {
		return nil, fmt.Errorf("%s endpoint: required", what)
	}
	if strings.Contains(endpoints, "ssl:") && tlsConfig == nil {
		return nil, fmt.Errorf("%s endpoint %s: ssl: needs the client's certificate (TLS configuration)", what, endpoints)
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 100*time.Millisecond, 2*time.Second, 0
	// Leader only: a raft follower cut off from its cluster keeps serving the rows it had, and
	// the overlap check must read what the cluster agreed on. A standalone server counts as
	// its own leader.
	opts := []client.Option{client.WithReconnect(5*time.Second, bo), client.WithLogger(&log), client.WithLeaderOnly(true)}
	if tlsConfig != nil {
		opts = append(opts, client.WithTLSConfig(tlsConfig))
	}
	for _, e := range strings.Split(endpoints, ",") {
		opts = append(opts, client.WithEndpoint(strings.TrimSpace(e)))
	}
	c, err := client.NewOVSDBClient(m, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s client for %s: %w", what, endpoints, err)
	}
	if err := c.Connect(ctx); err != nil {
		return nil, fmt.Errorf("connecting to the %s database at %s: %w", what, endpoints, err)
	}
	var mon []client.MonitorOption
	for _, t := range tables {
		mon = append(mon, client.WithTable(t))
	}
	if _, err := c.Monitor(ctx, c.NewMonitor(mon...)); err != nil {
		c.Close()
		return nil, fmt.Errorf("reading the %s database at %s: %w", what, endpoints, err)
	}
	return c, nil
}

// Close disconnects from both databases.
func (c *Client) Close() {
	c.nb.Close()
	c.icsb.Close()
}

// Apply makes the AZ's NB database match az in one transaction. It may be called any number of
// times with the same az and writes nothing when the database already matches. The errors:
// invalid input, ErrNotReady, an *OverlapError (errors.As; a prefix another AZ advertises), a
// foreign row in the way, or the database unreachable. Then nothing was written, with one
// exception: while the transit switch is missing, NB_Global's name and options are written
// alone before ErrNotReady, since ovn-ic copies the switch only once the AZ has its name.
func (c *Client) Apply(ctx context.Context, az AZ) error {
	if err := az.validate(); err != nil {
		return fmt.Errorf("interconnection of AZ %s: %w", az.Name, err)
	}
	for attempt := 1; ; attempt++ {
		err := c.applyOnce(ctx, az)
		if err == nil {
			return nil
		}
		var conflict *ovsdb.TimedOut
		var constraint *ovsdb.ConstraintViolation
		if (!errors.As(err, &conflict) && !errors.As(err, &constraint)) || attempt == conflictRetries {
			return fmt.Errorf("interconnection of AZ %s: %w", az.Name, err)
		}
		// The router or a port changed between our read and our write (ovn-ic learning a
		// route, or our own last write not yet in the cache): plan again on what is there now.
		c.log.V(1).Info("NB database changed during Apply; retrying", "az", az.Name, "attempt", attempt)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		}
	}
}

func (c *Client) applyOnce(ctx context.Context, az AZ) error {
	obs, err := c.observe(ctx, az)
	if err != nil {
		return err
	}
	p, err := makePlan(az, obs)
	if errors.Is(err, errNoTransitSwitch) && p.global != nil {
		// The AZ's name first: ovn-ic registers the AZ, and copies the transit switch into
		// its NB, only once NB_Global has it. The name and the options are complete on their
		// own (with no router they advertise and learn nothing), so this is not a half-applied
		// state; the rest follows once the switch is there.
		if err := c.transact(ctx, az, obs, p); err != nil {
			return err
		}
		c.log.V(1).Info("Registered AZ; waiting for ovn-ic to copy the transit switch", "az", az.Name, "transitSwitch", az.TransitSwitch)
	}
	if err != nil {
		return err
	}
	if err := c.checkOverlap(ctx, az); err != nil {
		return err
	}
	if p.empty() {
		return nil
	}
	if err := c.transact(ctx, az, obs, p); err != nil {
		return err
	}
	c.log.V(1).Info("Applied interconnection", "az", az.Name, "transitSwitch", az.TransitSwitch,
		"gatewayChassis", az.GatewayChassis, "autoRoutes", az.AutoRoutes, "routes", len(az.Routes))
	return nil
}

// checkOverlap reads IC SB's availability zones and routes and refuses what overlaps (the pure
// checkOverlap); it refuses to decide, with ErrICSBUnavailable, while IC SB's leader is not
// there to read from.
func (c *Client) checkOverlap(ctx context.Context, az AZ) error {
	var zones []icsbdb.AvailabilityZone
	var routes []icsbdb.Route
	err := c.readICSB(ctx, func(ctx context.Context) error {
		if err := c.icsb.List(ctx, &zones); err != nil {
			return fmt.Errorf("listing IC SB availability zones: %w", err)
		}
		if err := c.icsb.List(ctx, &routes); err != nil {
			return fmt.Errorf("listing IC SB routes: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("checking AZ %s's prefixes against the other AZs': %w", az.Name, err)
	}
	names := make(map[string]string, len(zones))
	for _, z := range zones {
		names[z.UUID] = z.Name
	}
	return checkOverlap(az, names, routes)
}

// observe reads from the cache the rows Apply builds on and every row of ours.
func (c *Client) observe(ctx context.Context, az AZ) (observed, error) {
	obs := observed{
		switches:  map[string]nbdb.LogicalSwitch{},
		lrps:      map[string]nbdb.LogicalRouterPort{},
		lsps:      map[string]nbdb.LogicalSwitchPort{},
		lspSwitch: map[string]string{},
		gateways:  map[string]nbdb.GatewayChassis{},
	}
	var globals []nbdb.NBGlobal
	if err := c.nb.List(ctx, &globals); err != nil {
		return observed{}, fmt.Errorf("reading NB_Global: %w", err)
	}
	if len(globals) > 0 {
		obs.global = globals[0]
	}

	var routers []nbdb.LogicalRouter
	name := RouterName(az.Name)
	if err := c.nb.WhereCache(func(r *nbdb.LogicalRouter) bool {
		return r.Name == name || isOurs(r.ExternalIDs, az.Name)
	}).List(ctx, &routers); err != nil {
		return observed{}, fmt.Errorf("listing logical routers: %w", err)
	}
	for i := range routers {
		r := &routers[i]
		switch {
		case !isOurs(r.ExternalIDs, az.Name):
			return observed{}, fmt.Errorf("logical router %s (%s) exists but was not made by Octopus for AZ %s (external_ids %v): remove or rename it", r.Name, r.UUID, az.Name, r.ExternalIDs)
		case obs.router != nil:
			return observed{}, fmt.Errorf("AZ %s has two interconnection routers, %s and %s: remove one", az.Name, obs.router.UUID, r.UUID)
		}
		obs.router = r
	}

	wanted := map[string]bool{az.TransitSwitch: true}
	for _, s := range az.Subnets {
		wanted[s.Switch] = true
	}
	var switches []nbdb.LogicalSwitch
	if err := c.nb.WhereCache(func(ls *nbdb.LogicalSwitch) bool { return true }).List(ctx, &switches); err != nil {
		return observed{}, fmt.Errorf("listing logical switches: %w", err)
	}
	for _, ls := range switches {
		if wanted[ls.Name] {
			if ls.Name == az.TransitSwitch && ls.OtherConfig["interconn-ts"] != az.TransitSwitch {
				continue // a switch of that name, but not ovn-ic's copy of the transit switch
			}
			if _, dup := obs.switches[ls.Name]; dup {
				return observed{}, fmt.Errorf("two logical switches are named %s: the AZ's switch names must be unique", ls.Name)
			}
			obs.switches[ls.Name] = ls
		}
		for _, u := range ls.Ports {
			obs.lspSwitch[u] = ls.UUID
		}
	}
	var lsps []nbdb.LogicalSwitchPort
	prefix := RouterPortName(az.Name, "")
	if err := c.nb.WhereCache(func(p *nbdb.LogicalSwitchPort) bool {
		return isOurs(p.ExternalIDs, az.Name) || strings.HasPrefix(p.Name, prefix)
	}).List(ctx, &lsps); err != nil {
		return observed{}, fmt.Errorf("listing logical switch ports: %w", err)
	}
	for _, p := range lsps {
		if !isOurs(p.ExternalIDs, az.Name) {
			if p.Type == "remote" {
				continue // ovn-ic's copy of another AZ's transit port; names differ by AZ
			}
			return observed{}, fmt.Errorf("logical switch port %s exists but was not made by Octopus for AZ %s: remove or rename it", p.Name, az.Name)
		}
		if _, on := obs.lspSwitch[p.UUID]; !on {
			continue // on no switch: garbage the database collects
		}
		obs.lsps[p.Name] = p
	}

	if err := c.observeHeld(ctx, az, &obs); err != nil {
		return observed{}, err
	}

	var lrps []nbdb.LogicalRouterPort
	if err := c.nb.WhereCache(func(p *nbdb.LogicalRouterPort) bool {
		return isOurs(p.ExternalIDs, az.Name) || strings.HasPrefix(p.Name, prefix)
	}).List(ctx, &lrps); err != nil {
		return observed{}, fmt.Errorf("listing logical router ports: %w", err)
	}
	onRouter := map[string]bool{}
	if obs.router != nil {
		for _, u := range obs.router.Ports {
			onRouter[u] = true
		}
	}
	for _, p := range lrps {
		switch {
		case !isOurs(p.ExternalIDs, az.Name):
			return observed{}, fmt.Errorf("logical router port %s exists but was not made by Octopus for AZ %s: remove or rename it", p.Name, az.Name)
		case onRouter[p.UUID]:
			obs.lrps[p.Name] = p
		}
	}

	var gws []nbdb.GatewayChassis
	if err := c.nb.List(ctx, &gws); err != nil {
		return observed{}, fmt.Errorf("listing gateway chassis: %w", err)
	}
	for _, g := range gws {
		obs.gateways[g.UUID] = g
	}

	if obs.router != nil {
		onRouter := map[string]bool{}
		for _, u := range obs.router.StaticRoutes {
			onRouter[u] = true
		}
		if err := c.nb.WhereCache(func(r *nbdb.LogicalRouterStaticRoute) bool {
			return onRouter[r.UUID] && isOurs(r.ExternalIDs, az.Name)
		}).List(ctx, &obs.routes); err != nil {
			return observed{}, fmt.Errorf("listing static routes: %w", err)
		}
	}
	return obs, nil
}

// transact writes p in one transaction, guarded so that it aborts (*ovsdb.TimedOut) if the
// router's ports or routes changed since obs was read, or, for a new router, if one of its name
// appeared: two writers planning on the same state never make two routers or two copies of a
// route.
func (c *Client) transact(ctx context.Context, az AZ, obs observed, p plan) error {
	var ops []ovsdb.Operation
	add := func(o []ovsdb.Operation, err error) error {
		ops = append(ops, o...)
		return err
	}
	if g := p.global; g != nil {
		if err := add(c.nb.Where(g).Update(g, &g.Name, &g.Options)); err != nil {
			return err
		}
	}

	// New switch ports, each added to its switch.
	for i := range p.createLSPs {
		lsp := &p.createLSPs[i]
		lsp.UUID = fmt.Sprintf("lsp%d", i)
		if err := add(c.nb.Create(lsp)); err != nil {
			return err
		}
		sw := &nbdb.LogicalSwitch{UUID: p.lspSwitch[lsp.Name]}
		if err := add(c.nb.Where(sw).Mutate(sw, model.Mutation{Field: &sw.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{lsp.UUID}})); err != nil {
			return err
		}
	}
	for i := range p.updateLSPs {
		lsp := &p.updateLSPs[i]
		if err := add(c.nb.Where(lsp).Update(lsp, &lsp.Type, &lsp.Addresses, &lsp.Options)); err != nil {
			return err
		}
	}
	for i, lsp := range p.deleteLSPs {
		// Off its switch; the database then removes the row (ports are not root rows).
		sw := &nbdb.LogicalSwitch{UUID: p.deleteLSPSw[i]}
		if err := add(c.nb.Where(sw).Mutate(sw, model.Mutation{Field: &sw.Ports, Mutator: ovsdb.MutateOperationDelete, Value: []string{lsp.UUID}})); err != nil {
			return err
		}
	}

	// Gateway chassis rows, new each time a port's binding changes; the replaced ones go with
	// the last reference to them.
	gatewayRefs := func(prefix string, gs []nbdb.GatewayChassis) ([]string, error) {
		refs := make([]string, len(gs))
		for i := range gs {
			gs[i].UUID = fmt.Sprintf("%sgw%d", prefix, i)
			refs[i] = gs[i].UUID
			if err := add(c.nb.Create(&gs[i])); err != nil {
				return nil, err
			}
		}
		return refs, nil
	}
	var newLRPs []string
	for i := range p.createLRPs {
		d := &p.createLRPs[i]
		refs, err := gatewayRefs(fmt.Sprintf("new%d", i), d.gateways)
		if err != nil {
			return err
		}
		d.port.UUID, d.port.GatewayChassis = fmt.Sprintf("lrp%d", i), refs
		newLRPs = append(newLRPs, d.port.UUID)
		if err := add(c.nb.Create(&d.port)); err != nil {
			return err
		}
	}
	for i := range p.updateLRPs {
		d := &p.updateLRPs[i]
		fields := []any{&d.port.MAC, &d.port.Networks}
		if d.gatewaysChanged {
			refs, err := gatewayRefs(fmt.Sprintf("upd%d", i), d.gateways)
			if err != nil {
				return err
			}
			d.port.GatewayChassis = refs
			fields = append(fields, &d.port.GatewayChassis)
		}
		if err := add(c.nb.Where(&d.port).Update(&d.port, fields...)); err != nil {
			return err
		}
	}

	var newRoutes []string
	for i := range p.createRoutes {
		r := &p.createRoutes[i]
		r.UUID = fmt.Sprintf("route%d", i)
		newRoutes = append(newRoutes, r.UUID)
		if err := add(c.nb.Create(r)); err != nil {
			return err
		}
	}

	zero := 0
	if p.createRouter {
		name := RouterName(az.Name)
		guard := &nbdb.LogicalRouter{Name: name}
		// "No router of this name": OVSDB's wait cannot compare with an empty row set, so it
		// waits for the routers of this name, projected to their name, to differ from exactly
		// one; that fails only if one exists.
		if err := add(c.nb.WhereAll(guard, model.Condition{Field: &guard.Name, Function: ovsdb.ConditionEqual, Value: name}).
			Wait(ovsdb.WaitConditionNotEqual, &zero, guard, &guard.Name)); err != nil {
			return err
		}
		lr := &nbdb.LogicalRouter{UUID: "router", Name: name, ExternalIDs: ids(az.Name), Ports: newLRPs, StaticRoutes: newRoutes}
		if err := add(c.nb.Create(lr)); err != nil {
			return err
		}
		return c.run(ctx, ops)
	}

	lr := obs.router
	if lr == nil {
		return c.run(ctx, ops) // no router and none to make: NB_Global alone (see applyOnce)
	}
	guard := &nbdb.LogicalRouter{UUID: lr.UUID, Ports: lr.Ports, StaticRoutes: lr.StaticRoutes}
	if err := add(c.nb.Where(guard).Wait(ovsdb.WaitConditionEqual, &zero, guard, &guard.Ports, &guard.StaticRoutes)); err != nil {
		return err
	}
	mutate := func(field any, mutator ovsdb.Mutator, uuids []string) error {
		if len(uuids) == 0 {
			return nil
		}
		return add(c.nb.Where(lr).Mutate(lr, model.Mutation{Field: field, Mutator: mutator, Value: uuids}))
	}
	if err := mutate(&lr.Ports, ovsdb.MutateOperationInsert, newLRPs); err != nil {
		return err
	}
	if err := mutate(&lr.Ports, ovsdb.MutateOperationDelete, p.deleteLRPs); err != nil {
		return err
	}
	if err := mutate(&lr.StaticRoutes, ovsdb.MutateOperationInsert, newRoutes); err != nil {
		return err
	}
	if err := mutate(&lr.StaticRoutes, ovsdb.MutateOperationDelete, p.deleteRoutes); err != nil {
		return err
	}
	return c.run(ctx, ops)
}

// run sends one transaction and turns OVSDB's per-operation results into one error; a failed
// guard comes back as *ovsdb.TimedOut, a name taken meanwhile as *ovsdb.ConstraintViolation.
func (c *Client) run(ctx context.Context, ops []ovsdb.Operation) error {
	res, err := c.nb.Transact(ctx, ops...)
	if err != nil {
		return fmt.Errorf("OVN NB transaction: %w", err)
	}
	opErrs, err := ovsdb.CheckOperationResults(res, ops)
	if err == nil {
		return nil
	}
	errs := make([]error, 0, len(opErrs)+1)
	for _, e := range opErrs {
		errs = append(errs, e)
	}
	if len(opErrs) == 0 {
		errs = append(errs, err) // the commit itself failed
	}
	return fmt.Errorf("OVN NB transaction: %w", errors.Join(errs...))
}

// observeHeld reads the addresses other ports hold on the subnet switches (static ones and
// those OVN handed out dynamically), which the router must not take.
func (c *Client) observeHeld(ctx context.Context, az AZ, obs *observed) error {
	onSubnet := map[string]string{} // port UUID -> switch name
	for _, s := range az.Subnets {
		if sw, ok := obs.switches[s.Switch]; ok {
			for _, u := range sw.Ports {
				onSubnet[u] = s.Switch
			}
		}
	}
	var ports []nbdb.LogicalSwitchPort
	if err := c.nb.WhereCache(func(p *nbdb.LogicalSwitchPort) bool {
		return onSubnet[p.UUID] != "" && !isOurs(p.ExternalIDs, az.Name)
	}).List(ctx, &ports); err != nil {
		return fmt.Errorf("listing the subnet switches' ports: %w", err)
	}
	obs.held = map[string]map[netip.Addr]string{}
	for _, p := range ports {
		sw := onSubnet[p.UUID]
		if obs.held[sw] == nil {
			obs.held[sw] = map[netip.Addr]string{}
		}
		for _, a := range heldAddresses(p) {
			obs.held[sw][a] = p.Name
		}
	}
	return nil
}

// heldAddresses are the IP addresses of a port's addresses column ("MAC IP…" entries) and of
// its dynamic_addresses; "router", "unknown" and "dynamic" hold none by themselves.
func heldAddresses(p nbdb.LogicalSwitchPort) []netip.Addr {
	entries := slices.Clone(p.Addresses)
	if p.DynamicAddresses != nil {
		entries = append(entries, *p.DynamicAddresses)
	}
	var out []netip.Addr
	for _, e := range entries {
		for _, f := range strings.Fields(e) {
			if a, err := netip.ParseAddr(f); err == nil {
				out = append(out, a)
			}
		}
	}
	return out
}
