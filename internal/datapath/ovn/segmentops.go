package ovn

import (
	"strconv"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
)

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
