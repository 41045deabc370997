package ovn

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/sbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// SBClient reads the VPC gateway ports from the southbound database, where a gateway node
// reaches them with the certificate its ovn-controller already holds, so that a gateway node
// needs no credential of its own for them. ovn-northd copies each logical switch port's addresses,
// options and external_ids into its Port_Binding, and gatewayPortRow puts everything a node
// attaches on the gateway port itself (owner.OVNKeySubnets), so one row is the whole answer.
type SBClient struct {
	sb  client.Client
	log logr.Logger
}

// ConnectSB connects to the SB database and caches the VPC gateway ports' bindings (only
// those rows, and only the columns read: a large cluster has a binding per pod).
func ConnectSB(ctx context.Context, opts Options) (*SBClient, error) {
	dbModel, err := model.NewClientDBModel(sbdb.Schema().Name, map[string]model.Model{sbdb.PortBindingTable: &sbdb.PortBinding{}})
	if err != nil {
		return nil, fmt.Errorf("SB database model: %w", err)
	}
	pb := &sbdb.PortBinding{}
	// One condition: a monitor's conditions on a table are alternatives, and both marks must
	// hold (the link switch's router port carries them too, and is filtered out by name).
	gateways := []model.Condition{{Field: &pb.ExternalIDs, Function: ovsdb.ConditionIncludes,
		Value: map[string]string{owner.OVNKeyOwner: owner.OVNOwnerVPC, owner.OVNKeyRole: owner.OVNRoleGateway}}}
	sb, log, err := dialDB(ctx, opts, "SB", dbModel,
		client.WithConditionalTable(pb, gateways, &pb.LogicalPort, &pb.MAC, &pb.ExternalIDs, &pb.Options))
	if err != nil {
		return nil, err
	}
	return &SBClient{sb: sb, log: log}, nil
}

// Close disconnects from the database.
func (c *SBClient) Close() { c.sb.Close() }

// VpcGatewaysOn is Client.VpcGatewaysOn read from the southbound bindings: the gateway ports
// of the cluster's VPCs requested on chassis, sorted by VPC, each with the subnets its port
// carries. Like the NB reader it fails while disconnected (the cache may be empty or stale),
// and a binding not as gatewayPortRow writes it fails the whole answer, naming the row.
func (c *SBClient) VpcGatewaysOn(ctx context.Context, clusterID, chassis string) ([]VpcGatewayPort, error) {
	if !c.sb.Connected() {
		return nil, errors.New("reading the VPC gateways: not connected to the OVN SB database")
	}
	var bindings []sbdb.PortBinding
	if err := c.sb.WhereCache(func(b *sbdb.PortBinding) bool {
		return requestedVpcGateway(clusterID, chassis, b.LogicalPort, b.ExternalIDs, b.Options)
	}).List(ctx, &bindings); err != nil {
		return nil, fmt.Errorf("listing the VPC gateway ports' bindings: %w", err)
	}
	return vpcGatewaysFromBindings(clusterID, chassis, bindings)
}

// vpcGatewaysFromBindings reads the gateway ports requested on chassis out of bindings.
func vpcGatewaysFromBindings(clusterID, chassis string, bindings []sbdb.PortBinding) ([]VpcGatewayPort, error) {
	var out []VpcGatewayPort
	var errs []error
	for _, b := range bindings {
		if !requestedVpcGateway(clusterID, chassis, b.LogicalPort, b.ExternalIDs, b.Options) {
			continue
		}
		subnets, err := parseSubnets(b.ExternalIDs[owner.OVNKeySubnets])
		if err != nil {
			errs = append(errs, fmt.Errorf("the gateway port %s of VPC %s has external_ids:%s %q: %w (an ovnmaster older than this node writes none; it adds them at its next reconcile)",
				b.LogicalPort, b.ExternalIDs[owner.OVNKeyVPC], owner.OVNKeySubnets, b.ExternalIDs[owner.OVNKeySubnets], err))
			continue
		}
		g, err := parseVpcGatewayPort(b.LogicalPort, b.MAC, b.ExternalIDs, subnets)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, g)
	}
	return sortedGateways(chassis, out, errs)
}

// OnVpcGatewayChange calls fn after each change of a cached binding (the cache holds only the
// VPC gateway ports'): as Client.OnVpcGatewayChange, fn must not block and is told only to
// look again.
func (c *SBClient) OnVpcGatewayChange(fn func()) {
	c.sb.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc:    func(string, model.Model) { fn() },
		UpdateFunc: func(string, model.Model, model.Model) { fn() },
		DeleteFunc: func(string, model.Model) { fn() },
	})
}
