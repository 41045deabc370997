package ovnic

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/ovnic/icsbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// Leave takes the AZ named az out of the interconnection: from its NB database, every row of
// ours (the router with its ports, gateway chassis and manual routes; its ports on the subnet
// switches) and NB_Global's name and our options, so that an ovn-ic still running registers
// nothing again (it does nothing for an NB without a name); then from the IC SB database, the
// AZ's Availability_Zone row with its routes, port bindings and gateways, so that the other
// AZs' ovn-ic drop every route they learned from it. ovn-ic itself never removes an AZ: without
// this, a cluster that left stays in `ovn-ic-sbctl show` and in everyone's routes. Leaving an
// AZ that is not there does nothing. It takes at least leaveSettle; stop the AZ's ovn-ic first
// where possible.
func (c *Client) Leave(ctx context.Context, az string) error {
	// Not half: an AZ that cannot be taken out of the IC SB now stays in its NB too.
	if err := c.icsbLive(ctx); err != nil {
		return fmt.Errorf("AZ %s leaving: %w", az, err)
	}
	if err := c.leaveNB(ctx, az); err != nil {
		return fmt.Errorf("AZ %s leaving, in its NB: %w", az, err)
	}
	// The AZ's ovn-ic, if still running, may not have seen the name go yet and register the AZ
	// once more from its stale view: delete until it stays away for leaveSettle.
	for {
		if err := c.leaveICSB(ctx, az); err != nil {
			return fmt.Errorf("AZ %s leaving, in the IC SB: %w", az, err)
		}
		back, err := c.azReturns(ctx, az)
		if err != nil {
			return fmt.Errorf("AZ %s leaving, in the IC SB: %w", az, err)
		}
		if !back {
			break
		}
		c.log.V(1).Info("AZ registered again by its ovn-ic while leaving; deleting it again", "az", az)
	}
	c.log.V(1).Info("AZ left the interconnection", "az", az)
	return nil
}

// leaveSettle is how long Leave watches for the AZ coming back: ovn-ic acts on each database
// change within milliseconds, so a stale registration shows up well within it.
const leaveSettle = time.Second

// azReturns watches the IC SB cache for leaveSettle and reports whether az is there again.
func (c *Client) azReturns(ctx context.Context, az string) (bool, error) {
	deadline := time.Now().Add(leaveSettle)
	for time.Now().Before(deadline) {
		zones, err := c.zonesNamed(ctx, az)
		if err != nil {
			return false, err
		}
		if len(zones) > 0 {
			return true, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false, nil
}

func (c *Client) leaveNB(ctx context.Context, az string) error {
	obs, err := c.observe(ctx, AZ{Name: az})
	if err != nil {
		return err
	}
	var ops []ovsdb.Operation
	add := func(o []ovsdb.Operation, err error) error {
		ops = append(ops, o...)
		return err
	}
	if g := obs.global; g.UUID != "" && g.Name == az {
		opts := maps.Clone(g.Options)
		for _, k := range []string{owner.OVNInterconnectOptionAdvertise, owner.OVNInterconnectOptionLearn, owner.OVNInterconnectOptionDenylist} {
			delete(opts, k)
		}
		row := &nbdb.NBGlobal{UUID: g.UUID, Name: "", Options: opts}
		if err := add(c.nb.Where(row).Update(row, &row.Name, &row.Options)); err != nil {
			return err
		}
	}
	for _, lsp := range obs.lsps {
		sw := &nbdb.LogicalSwitch{UUID: obs.lspSwitch[lsp.UUID]}
		if err := add(c.nb.Where(sw).Mutate(sw, model.Mutation{Field: &sw.Ports, Mutator: ovsdb.MutateOperationDelete, Value: []string{lsp.UUID}})); err != nil {
			return err
		}
	}
	if obs.router != nil {
		// A root row: its ports, their gateway chassis and its routes go with it.
		if err := add(c.nb.Where(obs.router).Delete()); err != nil {
			return err
		}
	}
	if len(ops) == 0 {
		return nil
	}
	return c.run(ctx, ops)
}

// zonesNamed are IC SB's availability zones named az, read from the leader (readICSB): from a
// stale cache, Leave would find nothing to delete, or see the AZ gone when it is back.
func (c *Client) zonesNamed(ctx context.Context, az string) ([]icsbdb.AvailabilityZone, error) {
	var zones []icsbdb.AvailabilityZone
	err := c.readICSB(ctx, func(ctx context.Context) error {
		return c.icsb.WhereCache(func(z *icsbdb.AvailabilityZone) bool { return z.Name == az }).List(ctx, &zones)
	})
	if err != nil {
		return nil, fmt.Errorf("listing IC SB availability zones named %s: %w", az, err)
	}
	return zones, nil
}

func (c *Client) leaveICSB(ctx context.Context, az string) error {
	zones, err := c.zonesNamed(ctx, az)
	if err != nil {
		return err
	}
	var ops []ovsdb.Operation
	for _, z := range zones {
		// Everything that references the AZ first: the references are strong.
		for _, row := range []model.Model{
			&icsbdb.Route{AvailabilityZone: z.UUID}, &icsbdb.PortBinding{AvailabilityZone: z.UUID}, &icsbdb.Gateway{AvailabilityZone: z.UUID},
		} {
			o, err := c.icsb.WhereAll(row, azCondition(row, z.UUID)).Delete()
			if err != nil {
				return err
			}
			ops = append(ops, o...)
		}
		o, err := c.icsb.Where(&icsbdb.AvailabilityZone{UUID: z.UUID}).Delete()
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	}
	if len(ops) == 0 {
		return nil
	}
	res, err := c.icsb.Transact(ctx, ops...)
	if err != nil {
		return fmt.Errorf("IC SB transaction: %w", err)
	}
	if _, err := ovsdb.CheckOperationResults(res, ops); err != nil {
		return fmt.Errorf("IC SB transaction: %w", err)
	}
	return nil
}

// azCondition selects the rows of row's table whose availability_zone is uuid.
func azCondition(row model.Model, uuid string) model.Condition {
	var field any
	switch r := row.(type) {
	case *icsbdb.Route:
		field = &r.AvailabilityZone
	case *icsbdb.PortBinding:
		field = &r.AvailabilityZone
	case *icsbdb.Gateway:
		field = &r.AvailabilityZone
	}
	return model.Condition{Field: field, Function: ovsdb.ConditionEqual, Value: uuid}
}
