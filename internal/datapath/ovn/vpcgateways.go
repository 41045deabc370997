package ovn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/model"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/ipam"
)

// VpcGatewayPort is a VPC's gateway port as the gateway node it is requested on attaches it:
// what ApplyVpc wrote, read back from the NB database, so that the node side needs no
// Kubernetes client (the ovnmaster's Vpc controller decides the chassis).
type VpcGatewayPort struct {
	// Vpc is the VPC's name.
	Vpc string
	// Attachment is the port's name, MAC and address on VpcGatewayLink (with its prefix
	// length); its Gateway is the VPC router's address on the link.
	Attachment
	// Subnets are the VPC's subnets, which the gateway routes back through the router, sorted.
	Subnets []netip.Prefix
	// ExternalIP is the VPC's external address (owner.OVNKeyExternalIP), which the gateway
	// holds and SNATs the VPC's traffic to; the zero Addr when the cluster has none.
	ExternalIP netip.Addr
}

// VpcGatewaysOn lists the gateway ports of the cluster's VPCs requested on chassis, sorted by
// VPC. It reads the client's cache, and fails rather than answer from a cache that may be
// empty or stale while the connection is down: a caller that removes the gateways it is not
// told about must not remove them all because the database was out of reach. A gateway port
// that is not as ApplyVpc writes it fails the whole answer, naming the row, so that nothing
// is half-applied from it.
func (c *Client) VpcGatewaysOn(ctx context.Context, clusterID, chassis string) ([]VpcGatewayPort, error) {
	if !c.nb.Connected() {
		return nil, errors.New("reading the VPC gateways: not connected to the OVN NB database")
	}
	var ports []nbdb.LogicalSwitchPort
	if err := c.nb.WhereCache(func(p *nbdb.LogicalSwitchPort) bool {
		return p.ExternalIDs[owner.OVNKeyOwner] == owner.OVNOwnerVPC && p.ExternalIDs[owner.OVNKeyCluster] == clusterID &&
			p.ExternalIDs[owner.OVNKeyRole] == owner.OVNRoleGateway && p.Options["requested-chassis"] == chassis
	}).List(ctx, &ports); err != nil {
		return nil, fmt.Errorf("listing the VPC gateway ports: %w", err)
	}
	var switches []nbdb.LogicalSwitch
	if err := c.nb.WhereCache(func(ls *nbdb.LogicalSwitch) bool {
		return ls.ExternalIDs[owner.OVNKeyOwner] == owner.OVNOwnerVPC && ls.ExternalIDs[owner.OVNKeyCluster] == clusterID &&
			ls.ExternalIDs[owner.OVNKeyRole] != owner.OVNRoleGateway
	}).List(ctx, &switches); err != nil {
		return nil, fmt.Errorf("listing the VPC subnet switches: %w", err)
	}
	return vpcGatewaysOn(clusterID, chassis, ports, switches)
}

// vpcGatewaysOn picks out of the VPC rows of a cluster the gateway ports requested on chassis,
// each with its VPC's subnets.
func vpcGatewaysOn(clusterID, chassis string, ports []nbdb.LogicalSwitchPort, switches []nbdb.LogicalSwitch) ([]VpcGatewayPort, error) {
	subnets := map[string][]netip.Prefix{}
	for _, sw := range switches {
		if sw.ExternalIDs[owner.OVNKeyOwner] != owner.OVNOwnerVPC || sw.ExternalIDs[owner.OVNKeyCluster] != clusterID ||
			sw.ExternalIDs[owner.OVNKeyRole] == owner.OVNRoleGateway {
			continue
		}
		cidr, err := netip.ParsePrefix(sw.ExternalIDs[owner.OVNKeyCIDR])
		if err != nil {
			return nil, fmt.Errorf("logical switch %s (%s): external_ids:%s: %w", sw.Name, sw.UUID, owner.OVNKeyCIDR, err)
		}
		vpc := sw.ExternalIDs[owner.OVNKeyVPC]
		subnets[vpc] = append(subnets[vpc], cidr)
	}
	var out []VpcGatewayPort
	var errs []error
	for _, p := range ports {
		if !requestedVpcGateway(clusterID, chassis, p.Name, p.ExternalIDs, p.Options) {
			continue
		}
		vpc := p.ExternalIDs[owner.OVNKeyVPC]
		g, err := parseVpcGatewayPort(p.Name, p.Addresses, p.ExternalIDs, slices.Clone(subnets[vpc]))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, g)
	}
	return sortedGateways(chassis, out, errs)
}

// requestedVpcGateway says whether a port (name, external_ids, options; an NB
// Logical_Switch_Port or the SB Port_Binding ovn-northd makes of it) is a gateway port of the
// cluster's VPCs requested on chassis. The link switch's port to the router carries the same
// external_ids, but is of type router, requested nowhere and otherwise named.
func requestedVpcGateway(clusterID, chassis, name string, ids, options map[string]string) bool {
	return ids[owner.OVNKeyOwner] == owner.OVNOwnerVPC && ids[owner.OVNKeyCluster] == clusterID &&
		ids[owner.OVNKeyRole] == owner.OVNRoleGateway && options["requested-chassis"] == chassis &&
		name == VpcGatewayPortName(clusterID, ids[owner.OVNKeyVPC])
}

// parseVpcGatewayPort reads a gateway port as gatewayPortRow writes it: "MAC IP" its one
// address, on VpcGatewayLink's gateway host, and the external address if any; subnets are the
// VPC's.
func parseVpcGatewayPort(name string, addresses []string, ids map[string]string, subnets []netip.Prefix) (VpcGatewayPort, error) {
	router, gateway := vpcGatewayLinkAddrs()
	vpc := ids[owner.OVNKeyVPC]
	var f []string
	if len(addresses) == 1 {
		f = strings.Fields(addresses[0])
	}
	var mac net.HardwareAddr
	var ip netip.Addr
	var err error
	if len(f) == 2 {
		if mac, err = net.ParseMAC(f[0]); err == nil {
			ip, err = netip.ParseAddr(f[1])
		}
	}
	if len(f) != 2 || err != nil || ip != gateway {
		return VpcGatewayPort{}, fmt.Errorf("the gateway port %s of VPC %s has addresses %q, want \"MAC %s\"", name, vpc, addresses, gateway)
	}
	var external netip.Addr
	if v, ok := ids[owner.OVNKeyExternalIP]; ok {
		if external, err = netip.ParseAddr(v); err != nil || !external.Is4() {
			return VpcGatewayPort{}, fmt.Errorf("the gateway port %s of VPC %s has external_ids:%s %q, want an IPv4 address", name, vpc, owner.OVNKeyExternalIP, v)
		}
	}
	return VpcGatewayPort{
		Vpc:        vpc,
		Attachment: Attachment{Port: name, MAC: mac, IP: netip.PrefixFrom(ip, VpcGatewayLink.Bits()), Gateway: router},
		Subnets:    ipam.SortPrefixes(subnets),
		ExternalIP: external,
	}, nil
}

// sortedGateways is the answer of a read of the gateways on chassis: all or, if any row was
// not as written, an error naming each such row.
func sortedGateways(chassis string, out []VpcGatewayPort, errs []error) ([]VpcGatewayPort, error) {
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("reading the VPC gateways on chassis %s: %w", chassis, err)
	}
	slices.SortFunc(out, func(a, b VpcGatewayPort) int { return strings.Compare(a.Vpc, b.Vpc) })
	return out, nil
}

// formatSubnets is owner.OVNKeySubnets's value: the CIDRs sorted, comma-separated.
func formatSubnets(cidrs []netip.Prefix) string {
	sorted := ipam.SortPrefixes(cidrs)
	parts := make([]string, len(sorted))
	for i, c := range sorted {
		parts[i] = c.String()
	}
	return strings.Join(parts, ",")
}

// parseSubnets reads owner.OVNKeySubnets's value; every VPC has at least one subnet.
func parseSubnets(v string) ([]netip.Prefix, error) {
	if v == "" {
		return nil, errors.New("no subnets")
	}
	var out []netip.Prefix
	for _, part := range strings.Split(v, ",") {
		p, err := netip.ParsePrefix(part)
		if err != nil || p != p.Masked() || !p.Addr().Is4() {
			return nil, fmt.Errorf("%q is no IPv4 CIDR", part)
		}
		out = append(out, p)
	}
	return out, nil
}

// OnVpcGatewayChange calls fn after each change in the client's cache that may change what
// VpcGatewaysOn answers: a VPC gateway port (or the link switch's router port, which carries
// the same marks) added, changed or removed, a VPC switch added or removed, or its CIDR changed. fn runs on the client's update
// path and must not block; it is not told what changed, only to look again. A gateway node
// checks at once instead of at its next interval, so a takeover does not wait for it.
func (c *Client) OnVpcGatewayChange(fn func()) {
	relevant := func(m model.Model) bool {
		switch r := m.(type) {
		case *nbdb.LogicalSwitchPort:
			return r.ExternalIDs[owner.OVNKeyOwner] == owner.OVNOwnerVPC && r.ExternalIDs[owner.OVNKeyRole] == owner.OVNRoleGateway
		case *nbdb.LogicalSwitch:
			return r.ExternalIDs[owner.OVNKeyOwner] == owner.OVNOwnerVPC
		}
		return false
	}
	c.nb.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc: func(_ string, m model.Model) {
			if relevant(m) {
				fn()
			}
		},
		UpdateFunc: func(_ string, old, updated model.Model) {
			// A subnet switch changes with every pod on it (its ports, the last address
			// handed out); only its CIDR is the gateways' business.
			o, okOld := old.(*nbdb.LogicalSwitch)
			u, okNew := updated.(*nbdb.LogicalSwitch)
			if okOld && okNew && o.ExternalIDs[owner.OVNKeyCIDR] == u.ExternalIDs[owner.OVNKeyCIDR] &&
				o.ExternalIDs[owner.OVNKeyOwner] == u.ExternalIDs[owner.OVNKeyOwner] && o.ExternalIDs[owner.OVNKeyVPC] == u.ExternalIDs[owner.OVNKeyVPC] {
				return
			}
			if relevant(old) || relevant(updated) {
				fn()
			}
		},
		DeleteFunc: func(_ string, m model.Model) {
			if relevant(m) {
				fn()
			}
		},
	})
}
