package ovn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-logr/logr"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
)

// Client applies secondary networks to one OVN northbound database.
type Client struct {
	nb  client.Client
	log logr.Logger
}

// Options configure Connect and ConnectSB.
type Options struct {
	// Endpoint is the database (NB for Connect, SB for ConnectSB) in OVSDB's syntax:
	// "unix:/path", "tcp:host:port" or "ssl:host:port" (required).
	Endpoint string
	// TLS is the client's TLS configuration, required with an "ssl:" endpoint and refused
	// with any other: it must carry the client's certificate (GetClientCertificate or
	// Certificates) and the CA that signed the server's, since the databases refuse anonymous
	// clients (docs/secondary-network.md, "TLS of the OVN databases").
	TLS *tls.Config
	// Log receives the client's messages (optional).
	Log logr.Logger
}

// errCacheBehind: the cache holds a switch but not yet all of its ports.
var errCacheBehind = errors.New("the NB cache has not caught up with the database; try again")

// conflictRetries is how often Apply re-reads and re-plans when its transaction found the
// database changed since it read it (someone else's write, or its own not yet in the cache).
const conflictRetries = 3

// Connect connects to the NB database and reads the switches and ports into the client's
// cache, which Apply reads. When the connection drops, the client reconnects by itself and
// re-reads everything before it sends another transaction; until then Apply waits for the
// connection or for its context.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	dbModel, err := model.NewClientDBModel(nbdb.Schema().Name, map[string]model.Model{
		nbdb.LogicalSwitchTable:     &nbdb.LogicalSwitch{},
		nbdb.LogicalSwitchPortTable: &nbdb.LogicalSwitchPort{},
		nbdb.LogicalRouterTable:     &nbdb.LogicalRouter{}, // VPCs' (vpc.go)
		nbdb.LogicalRouterPortTable: &nbdb.LogicalRouterPort{},
		// A VPC router's default route to its gateway (vpc.go).
		nbdb.LogicalRouterStaticRouteTable: &nbdb.LogicalRouterStaticRoute{},
	})
	if err != nil {
		return nil, fmt.Errorf("NB database model: %w", err)
	}
	nb, log, err := dialDB(ctx, opts, "NB", dbModel,
		client.WithTable(&nbdb.LogicalSwitch{}),
		client.WithTable(&nbdb.LogicalSwitchPort{}),
		client.WithTable(&nbdb.LogicalRouter{}),
		client.WithTable(&nbdb.LogicalRouterPort{}),
		client.WithTable(&nbdb.LogicalRouterStaticRoute{}),
	)
	if err != nil {
		return nil, err
	}
	return &Client{nb: nb, log: log}, nil
}

// dialDB connects to one OVN database (db names it in errors: "NB", "SB") and monitors what
// tables says, with reconnection: when the connection drops, the client reconnects by itself
// and re-reads everything it monitors.
func dialDB(ctx context.Context, opts Options, db string, dbModel model.ClientDBModel, tables ...client.MonitorOption) (client.Client, logr.Logger, error) {
	log := opts.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	if err := checkTLS(opts, db); err != nil {
		return nil, log, err
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
	clientOpts := []client.Option{
		client.WithEndpoint(opts.Endpoint),
		client.WithReconnect(10*time.Second, bo),
		client.WithLogger(&log),
	}
	if opts.TLS != nil {
		clientOpts = append(clientOpts, client.WithTLSConfig(opts.TLS))
	}
	c, err := client.NewOVSDBClient(dbModel, clientOpts...)
	if err != nil {
		return nil, log, fmt.Errorf("OVN %s client for %s: %w", db, opts.Endpoint, err)
	}
	if err := c.Connect(ctx); err != nil {
		return nil, log, fmt.Errorf("connecting to the OVN %s database at %s: %w", db, opts.Endpoint, err)
	}
	if _, err := c.Monitor(ctx, c.NewMonitor(tables...)); err != nil {
		c.Close()
		return nil, log, fmt.Errorf("reading the OVN %s database at %s: %w", db, opts.Endpoint, err)
	}
	return c, log, nil
}

// checkTLS refuses an "ssl:" endpoint without a client certificate, and a TLS configuration
// that an endpoint of another kind would silently ignore.
func checkTLS(opts Options, db string) error {
	ssl := strings.HasPrefix(opts.Endpoint, "ssl:")
	switch {
	case ssl && opts.TLS == nil:
		return fmt.Errorf("OVN %s endpoint %s: ssl needs a TLS configuration with the client's certificate and the CA", db, opts.Endpoint)
	case ssl && opts.TLS.GetClientCertificate == nil && len(opts.TLS.Certificates) == 0:
		return fmt.Errorf("OVN %s endpoint %s: the TLS configuration has no client certificate, which the database requires", db, opts.Endpoint)
	case !ssl && opts.TLS != nil:
		return fmt.Errorf("OVN %s endpoint %s: a TLS configuration was given, but the endpoint is not ssl:HOST:PORT", db, opts.Endpoint)
	}
	return nil
}

// Close disconnects from the database.
func (c *Client) Close() { c.nb.Close() }

// Apply makes the cluster's switch and ports in the NB database match n, in one transaction,
// and reports what every pod and the gateway got. It may be called any number of times with the same n; it
// writes nothing when the database already matches. The error is about the network as a
// whole (invalid input, database unreachable, transaction failed): then nothing was written.
// A pod that cannot get an address is reported in Result.Failed and does not keep the others
// from their ports.
func (c *Client) Apply(ctx context.Context, n Network) (Result, error) {
	block, err := n.validate()
	if err != nil {
		return Result{}, err
	}
	for attempt := 1; ; attempt++ {
		obs, err := c.observe(ctx, n.ClusterID)
		if err == nil {
			p := makePlan(n, block, obs)
			if p.empty() {
				return p.result, nil
			}
			if err = c.transact(ctx, n.ClusterID, obs, p); err == nil {
				c.log.V(1).Info("Applied secondary network", "cluster", n.ClusterID, "gatewayChassis", n.GatewayChassis,
					"created", len(p.create), "updated", len(p.update), "gatewayUpdated", p.updateGateway != nil,
					"removed", len(p.remove), "failed", len(p.result.Failed))
				return p.result, nil
			}
		}
		var conflict *ovsdb.TimedOut
		retry := errors.As(err, &conflict) || errors.Is(err, errCacheBehind)
		if !retry || attempt == conflictRetries {
			return Result{}, fmt.Errorf("applying the secondary network of cluster %s: %w", n.ClusterID, err)
		}
		// The switch changed between our read and our write; the cache gets the change
		// before long, then the plan is made again on what is there now.
		c.log.V(1).Info("NB database changed during Apply; retrying", "cluster", n.ClusterID, "attempt", attempt)
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		}
	}
}

// Delete removes the cluster's switch and every port on it that Octopus made; foreign
// ports on it are left, and then so is the switch.
func (c *Client) Delete(ctx context.Context, clusterID string) error {
	obs, err := c.observe(ctx, clusterID)
	if err != nil || obs.sw == nil {
		return err
	}
	var ops []ovsdb.Operation
	var ourUUIDs []string
	for _, p := range obs.ports {
		if isOurs(p.ExternalIDs, clusterID) {
			ourUUIDs = append(ourUUIDs, p.UUID)
		}
	}
	if len(ourUUIDs) == len(obs.ports) {
		ops, err = c.nb.Where(obs.sw).Delete()
	} else {
		ops, err = c.removePorts(obs.sw, ourUUIDs)
	}
	if err != nil {
		return fmt.Errorf("deleting the secondary network of cluster %s: %w", clusterID, err)
	}
	if err := c.run(ctx, ops); err != nil {
		return fmt.Errorf("deleting the secondary network of cluster %s: %w", clusterID, err)
	}
	return nil
}

// observe reads the cluster's switch and its ports from the cache.
func (c *Client) observe(ctx context.Context, clusterID string) (observed, error) {
	var switches []nbdb.LogicalSwitch
	err := c.nb.WhereCache(func(ls *nbdb.LogicalSwitch) bool {
		return isOurs(ls.ExternalIDs, clusterID) || ls.Name == SwitchName(clusterID)
	}).List(ctx, &switches)
	if err != nil {
		return observed{}, fmt.Errorf("listing logical switches: %w", err)
	}
	var obs observed
	for i := range switches {
		sw := &switches[i]
		switch {
		case !isOurs(sw.ExternalIDs, clusterID):
			return observed{}, fmt.Errorf("logical switch %s (%s) exists but was not made by Octopus for cluster %s (external_ids %v): remove or rename it", sw.Name, sw.UUID, clusterID, sw.ExternalIDs)
		case obs.sw != nil:
			return observed{}, fmt.Errorf("cluster %s has two logical switches, %s and %s: remove the one whose ports no pod uses", clusterID, obs.sw.UUID, sw.UUID)
		}
		obs.sw = sw
	}
	if obs.sw == nil {
		return obs, nil
	}
	onSwitch := make(map[string]bool, len(obs.sw.Ports))
	for _, u := range obs.sw.Ports {
		onSwitch[u] = true
	}
	err = c.nb.WhereCache(func(p *nbdb.LogicalSwitchPort) bool { return onSwitch[p.UUID] }).List(ctx, &obs.ports)
	if err != nil {
		return observed{}, fmt.Errorf("listing the ports of logical switch %s: %w", obs.sw.Name, err)
	}
	if len(obs.ports) != len(onSwitch) {
		// The switch arrived in the cache before some of its ports: planning without them
		// could hand out their addresses, so Apply reads again.
		return observed{}, errCacheBehind
	}
	return obs, nil
}

// transact writes the cluster's plan p in one transaction, guarded (segmentOps).
func (c *Client) transact(ctx context.Context, clusterID string, obs observed, p plan) error {
	ops, err := c.segmentOps("", SwitchName(clusterID), obs, p)
	if err != nil {
		return err
	}
	return c.run(ctx, ops)
}

// segmentOps are the operations that write one segment's plan p, for a transaction that may
// hold other segments' too: prefix keeps the named UUIDs of its new rows apart from theirs.
// They are guarded so that the transaction aborts if the switch's ports changed since obs was
// read (or, for a new switch, if a switch named switchName appeared): two writers planning on
// the same state can never hand out one address twice.
func (c *Client) segmentOps(prefix, switchName string, obs observed, p plan) ([]ovsdb.Operation, error) {
	var ops []ovsdb.Operation
	add := func(o []ovsdb.Operation, err error) error {
		ops = append(ops, o...)
		return err
	}
	newPorts := make([]string, len(p.create))
	for i := range p.create {
		newPorts[i] = prefix + "port" + strconv.Itoa(i)
		p.create[i].UUID = newPorts[i]
		if err := add(c.nb.Create(&p.create[i])); err != nil {
			return nil, err
		}
	}
	zero := 0
	if p.createSwitch {
		// "No switch of this name": OVSDB's wait cannot compare with an empty row set, so
		// it waits for the switches of this name, projected to their name, to differ from
		// exactly one; that fails only if one exists.
		guard := &nbdb.LogicalSwitch{Name: switchName}
		if err := add(c.nb.WhereAll(guard, model.Condition{Field: &guard.Name, Function: ovsdb.ConditionEqual, Value: switchName}).
			Wait(ovsdb.WaitConditionNotEqual, &zero, guard, &guard.Name)); err != nil {
			return nil, err
		}
		sw := &nbdb.LogicalSwitch{UUID: prefix + "switch", Name: switchName, Ports: newPorts, ExternalIDs: p.switchIDs}
		if err := add(c.nb.Create(sw)); err != nil {
			return nil, err
		}
		return ops, nil
	}

	guard := &nbdb.LogicalSwitch{UUID: obs.sw.UUID, Ports: obs.sw.Ports}
	if err := add(c.nb.Where(guard).Wait(ovsdb.WaitConditionEqual, &zero, guard, &guard.Ports)); err != nil {
		return nil, err
	}
	if len(newPorts) > 0 {
		if err := add(c.nb.Where(obs.sw).Mutate(obs.sw, model.Mutation{Field: &obs.sw.Ports, Mutator: ovsdb.MutateOperationInsert, Value: newPorts})); err != nil {
			return nil, err
		}
	}
	if err := add(c.removePorts(obs.sw, p.remove)); err != nil {
		return nil, err
	}
	for i := range p.update {
		u := &p.update[i]
		if err := add(c.nb.Where(u).Update(u, &u.Addresses, &u.PortSecurity, &u.ExternalIDs)); err != nil {
			return nil, err
		}
	}
	if u := p.updateGateway; u != nil {
		if err := add(c.nb.Where(u).Update(u, &u.Addresses, &u.PortSecurity, &u.ExternalIDs, &u.Options, &u.Type)); err != nil {
			return nil, err
		}
	}
	if p.switchIDsChanged {
		sw := &nbdb.LogicalSwitch{UUID: obs.sw.UUID, ExternalIDs: p.switchIDs}
		if err := add(c.nb.Where(sw).Update(sw, &sw.ExternalIDs)); err != nil {
			return nil, err
		}
	}
	return ops, nil
}

// removePorts takes the ports off the switch and deletes their rows.
func (c *Client) removePorts(sw *nbdb.LogicalSwitch, uuids []string) ([]ovsdb.Operation, error) {
	if len(uuids) == 0 {
		return nil, nil
	}
	ops, err := c.nb.Where(sw).Mutate(sw, model.Mutation{Field: &sw.Ports, Mutator: ovsdb.MutateOperationDelete, Value: slices.Clone(uuids)})
	if err != nil {
		return nil, err
	}
	for _, u := range uuids {
		del, err := c.nb.Where(&nbdb.LogicalSwitchPort{UUID: u}).Delete()
		if err != nil {
			return nil, err
		}
		ops = append(ops, del...)
	}
	return ops, nil
}

// run sends one transaction and turns OVSDB's per-operation results into one error; a
// failed guard comes back as *ovsdb.TimedOut.
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
