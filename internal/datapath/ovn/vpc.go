package ovn

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/ipam/hostaddr"
)

// A VPC is an isolated network beside the cluster's secondary switch: a logical router with a
// logical switch per subnet, the router's port on each subnet at the subnet's first host (the
// pods' gateway), and the pods' ports on their subnet's switch, addressed like the cluster's
// (planSegment). Nothing joins a VPC to the cluster's switch or to another VPC, so its CIDRs
// may overlap theirs: OVN keeps every logical datapath's addresses apart.
//
// Names. Logical_Switch_Port and Logical_Router_Port names are unique in the whole NB
// database, and the cluster's rows are named "octopus-<cluster>" (its switch),
// "<cluster>_<ns>_<pod>" (two '_') and "<cluster>_gateway" (one '_'); northd puts switch and
// router port names in one namespace. Cluster IDs, VPC, subnet and namespace names are RFC
// 1123 labels and pod names DNS subdomains: none holds '_', and labels hold no '.'. So a VPC's
// router "octopus-<cluster>.<vpc>", switches and router ports "octopus-<cluster>.<vpc>.<subnet>"
// (two '.', no '_'), the switches' ports to the router "octopus-<cluster>.<vpc>.<subnet>.router"
// (three '.') and pods' ports "<cluster>_<vpc>_<ns>_<pod>" (three '_') can never take a name of
// the cluster's, nor of another VPC's or cluster's. The gateway's rows (VpcGateway) are
// "octopus-<cluster>.<vpc>.gateway.link" (its link switch and the router's port on it, three
// '.' ending in "link"), "octopus-<cluster>.<vpc>.gateway.link.router" (four '.') and
// "octopus-<cluster>.<vpc>.gateway.port" (three '.' ending in "port"): a subnet's rows have two
// '.', or three ending in "router", so a subnet named "gateway" meets none of them.

// Vpc is the desired state of one VPC of a cluster.
type Vpc struct {
	// ClusterID names the cluster (required).
	ClusterID string
	// Name is the VPC's name, an RFC 1123 label (required).
	Name string
	// Subnets are the VPC's subnets (at least one); their CIDRs may not overlap each other.
	Subnets []Subnet
	// Pods are the pods that should have a port in the VPC, each listed once.
	Pods []VpcPod
	// Gateway, when set, is the VPC's way out (optional): a link network between the VPC's
	// router and a gateway port bound to one chassis, and the router's default route to the
	// gateway, so that whatever the VPC sends outside its subnets goes to the gateway. Nil
	// means no gateway: nothing leaves the VPC.
	Gateway *VpcGateway
}

// VpcGateway is where a VPC's gateway port is bound, the way the cluster's gateway port is
// (Network.GatewayChassis): active-backup, every gateway node may have an interface bound to
// the port, and OVN binds it on the requested chassis only, so a failover is one update of
// that row.
type VpcGateway struct {
	// Chassis is the OVN chassis (Open_vSwitch external_ids:system-id, the node name by
	// convention) the gateway port is requested on (required): one name.
	Chassis string
	// ExternalIP is the VPC's external address, from the cluster's global CIDR, which the
	// gateway SNATs the VPC's traffic to (optional: the zero Addr for none, when the cluster
	// has no global CIDR). It is written on the gateway port's external_ids
	// (owner.OVNKeyExternalIP); changing it is one update of that row, as moving the chassis.
	ExternalIP netip.Addr
}

// VpcGatewayLink is the link network between every VPC's router and its gateway: the router
// at its first host, the gateway at the second. One block for every VPC, as VPCs never meet
// each other (each link is a switch of its own VPC, and OVN keeps datapaths apart, as it keeps
// identical subnets apart). A VPC's subnets could overlap it, since a Vpc's CIDRs are the
// user's: ApplyVpc refuses a gateway for a VPC whose subnet does (validate). A /30 in the top
// of the shared address space (RFC 6598, 100.64.0.0/10), which neither the cluster's nor its
// pods' networks nor the lab use, and which is not link-local (169.254.0.0/16, which hosts
// may route specially).
var VpcGatewayLink = netip.MustParsePrefix("100.127.255.252/30")

// vpcGatewayLinkAddrs are the router's and the gateway's addresses on VpcGatewayLink.
func vpcGatewayLinkAddrs() (router, gateway netip.Addr) {
	router = VpcGatewayLink.Addr().Next()
	return router, router.Next()
}

// Subnet is one subnet of a VPC.
type Subnet struct {
	// Name is an RFC 1123 label, unique in the VPC.
	Name string
	// CIDR is an IPv4 prefix no longer than /30; its first host is the router's.
	CIDR netip.Prefix
}

// VpcPod is a pod that should have a port on one of the VPC's subnets.
type VpcPod struct {
	Pod
	// Subnet is the subnet's name; empty means the VPC's first subnet.
	Subnet string
}

// VpcResult is what ApplyVpc made of a Vpc.
type VpcResult struct {
	// Attached holds every pod that has its port, with the port's address; Attachment.Gateway
	// is the router's address on the pod's subnet.
	Attached map[PodKey]Attachment
	// Failed holds every pod that could not get a port, and why: an unknown subnet
	// (ErrUnknownSubnet) or an address request that cannot be met, as for Result.Failed.
	Failed map[PodKey]error
	// Gateway is the gateway's port when the VPC has one, zero otherwise: what a gateway node
	// attaches (Port as its interface's iface-id, MAC, and IP, the gateway's address on
	// VpcGatewayLink with its prefix length). Its Gateway is the VPC router's address on the
	// link, where the gateway routes the VPC's subnets back.
	Gateway Attachment
}

// ErrUnknownSubnet means a pod names a subnet its VPC does not have.
var ErrUnknownSubnet = errors.New("no such subnet")

// VpcRouterName is the name of a VPC's logical router.
func VpcRouterName(clusterID, vpc string) string {
	return owner.OVNSwitchNamePrefix + clusterID + "." + vpc
}

// VpcSubnetName is the name of a subnet's logical switch and of the router's port on it.
func VpcSubnetName(clusterID, vpc, subnet string) string {
	return VpcRouterName(clusterID, vpc) + "." + subnet
}

// VpcRouterSwitchPortName is the name of the subnet switch's port that joins the router's
// port: not the router port's own, since northd names both kinds of port in one namespace
// (the southbound Port_Binding) and drops both of a duplicate.
func VpcRouterSwitchPortName(clusterID, vpc, subnet string) string {
	return VpcSubnetName(clusterID, vpc, subnet) + ".router"
}

// VpcGatewayLinkName is the name of a VPC's gateway link switch and of the router's port on
// it: three '.', the last part "link", where a subnet's rows have two, or three ending in
// "router" (the package comment on names).
func VpcGatewayLinkName(clusterID, vpc string) string {
	return VpcRouterName(clusterID, vpc) + ".gateway.link"
}

// VpcGatewayLinkSwitchPortName is the link switch's port that joins the router's port on it.
func VpcGatewayLinkSwitchPortName(clusterID, vpc string) string {
	return VpcGatewayLinkName(clusterID, vpc) + ".router"
}

// VpcGatewayPortName is the name of a VPC's gateway port on its link switch; a gateway node
// sets it as its interface's external_ids:iface-id.
func VpcGatewayPortName(clusterID, vpc string) string {
	return VpcRouterName(clusterID, vpc) + ".gateway.port"
}

// VpcPortName is the name of a pod's logical switch port in a VPC:
// "<cluster>_<vpc>_<namespace>_<pod>". Three '_', where a pod's port on the cluster's switch
// has two: a namespace that moves into a VPC cannot meet its pods' old ports. The NRI plugin
// computes the same name to set iface-id on the pod's OVS interface.
func VpcPortName(clusterID, vpc string, pod PodKey) string {
	return clusterID + "_" + vpc + "_" + pod.Namespace + "_" + pod.Name
}

// vpcIDs are the external_ids on every row of the VPC.
func vpcIDs(clusterID, vpc string) map[string]string {
	return map[string]string{owner.OVNKeyOwner: owner.OVNOwnerVPC, owner.OVNKeyCluster: clusterID, owner.OVNKeyVPC: vpc}
}

// ownsVpc reports whether a row with these external_ids belongs to the VPC.
func ownsVpc(ids map[string]string, clusterID, vpc string) bool {
	return ids[owner.OVNKeyOwner] == owner.OVNOwnerVPC && ids[owner.OVNKeyCluster] == clusterID && ids[owner.OVNKeyVPC] == vpc
}

// validateName checks the cluster ID and the VPC's name, which name its rows.
func validateVpcName(clusterID, vpc string) error {
	if !dns1123Label.MatchString(clusterID) || len(clusterID) > 63 {
		return fmt.Errorf("cluster ID %q is not an RFC 1123 label", clusterID)
	}
	if !dns1123Label.MatchString(vpc) || len(vpc) > 63 {
		return fmt.Errorf("VPC name %q of cluster %s is not an RFC 1123 label", vpc, clusterID)
	}
	return nil
}

// validate checks the VPC and returns its subnets' blocks by name.
func (v Vpc) validate() (map[string]hostaddr.Block, error) {
	if err := validateVpcName(v.ClusterID, v.Name); err != nil {
		return nil, err
	}
	if len(v.Subnets) == 0 {
		return nil, fmt.Errorf("VPC %s of cluster %s has no subnet", v.Name, v.ClusterID)
	}
	blocks := make(map[string]hostaddr.Block, len(v.Subnets))
	var errs []error
	for i, s := range v.Subnets {
		if !dns1123Label.MatchString(s.Name) || len(s.Name) > 63 {
			errs = append(errs, fmt.Errorf("VPC %s: subnet name %q is not an RFC 1123 label", v.Name, s.Name))
			continue
		}
		if _, dup := blocks[s.Name]; dup {
			errs = append(errs, fmt.Errorf("VPC %s: subnet %s is listed twice", v.Name, s.Name))
			continue
		}
		b, err := hostaddr.NewBlock(s.CIDR)
		if err != nil {
			errs = append(errs, fmt.Errorf("VPC %s: subnet %s: %w", v.Name, s.Name, err))
			continue
		}
		for _, o := range v.Subnets[:i] {
			if o.CIDR.Overlaps(s.CIDR) {
				errs = append(errs, fmt.Errorf("VPC %s: subnets %s (%s) and %s (%s) overlap", v.Name, o.Name, o.CIDR, s.Name, s.CIDR))
			}
		}
		blocks[s.Name] = b
	}
	if v.Gateway != nil {
		if strings.ContainsAny(v.Gateway.Chassis, ", \t\n") || v.Gateway.Chassis == "" || len(v.Gateway.Chassis) > 253 {
			// As for Network.GatewayChassis: OVN reads a comma-separated requested-chassis as
			// several chassis; one is meant here.
			errs = append(errs, fmt.Errorf("VPC %s: Gateway.Chassis %q is not one chassis name: name the node the gateway port is bound to, or set no Gateway", v.Name, v.Gateway.Chassis))
		}
		if ip := v.Gateway.ExternalIP; ip.IsValid() && (!ip.Is4() || ip.IsUnspecified()) {
			// The gateway's SNAT and its /32 on the node are IPv4, like the VPC's subnets.
			errs = append(errs, fmt.Errorf("VPC %s: Gateway.ExternalIP %s is not an IPv4 unicast address: give an address of the cluster's global CIDR, or none", v.Name, ip))
		}
		for _, s := range v.Subnets {
			if s.CIDR.IsValid() && s.CIDR.Overlaps(VpcGatewayLink) {
				errs = append(errs, fmt.Errorf("VPC %s: subnet %s (%s) overlaps the gateway's link network %s, where the VPC's router reaches its Gateway: give the subnet a CIDR outside it, or set no Gateway",
					v.Name, s.Name, s.CIDR, VpcGatewayLink))
			}
		}
	}
	pods := make([]Pod, len(v.Pods))
	for i, p := range v.Pods {
		pods[i] = p.Pod
	}
	errs = append(errs, validatePods(pods))
	return blocks, errors.Join(errs...)
}

// vpcObserved is what the NB database holds for one VPC: its router (nil if none yet), the
// router's ports, and each of its subnet switches, by subnet name.
type vpcObserved struct {
	router  *nbdb.LogicalRouter
	lrps    []nbdb.LogicalRouterPort
	subnets map[string]observed
	// routes are the router's static routes, ours and anyone else's.
	routes []nbdb.LogicalRouterStaticRoute
	// gateway is the gateway's link switch and its ports (sw nil when there is none).
	gateway observed
}

// subnetPlan is one subnet's part of a vpcPlan.
type subnetPlan struct {
	name string
	obs  observed
	plan plan
}

// vpcPlan is the difference between a Vpc and what the database holds.
type vpcPlan struct {
	createRouter bool
	// lrpCreate, lrpUpdate (UUID set) and lrpRemove (UUIDs) are the router ports' changes.
	lrpCreate, lrpUpdate []nbdb.LogicalRouterPort
	lrpRemove            []string
	subnets              []subnetPlan
	// removeSubnets are the switches of subnets the VPC no longer has.
	removeSubnets []observed
	// gateway is the plan of the gateway's link switch and its two ports (the router's and
	// the gateway's), nil when the VPC has no gateway; a chassis change is its one
	// updateGateway. removeGateway is the link switch to remove when the gateway goes.
	gateway       *plan
	removeGateway *observed
	// routeCreate, routeUpdate (UUID set) and routeRemove (UUIDs) are the changes of the
	// router's static routes: the default route to the gateway is the only one we write.
	routeCreate, routeUpdate []nbdb.LogicalRouterStaticRoute
	routeRemove              []string
	result                   VpcResult
}

func (p *vpcPlan) empty() bool {
	if p.createRouter || len(p.lrpCreate)+len(p.lrpUpdate)+len(p.lrpRemove)+len(p.removeSubnets) > 0 {
		return false
	}
	if (p.gateway != nil && !p.gateway.empty()) || p.removeGateway != nil || len(p.routeCreate)+len(p.routeUpdate)+len(p.routeRemove) > 0 {
		return false
	}
	for _, s := range p.subnets {
		if !s.plan.empty() {
			return false
		}
	}
	return true
}

// makeVpcPlan computes the plan for v against obs. Pure, like makePlan, whose rules hold for
// every subnet: each subnet is a segment whose one port without a pod is the router's.
func makeVpcPlan(v Vpc, blocks map[string]hostaddr.Block, obs vpcObserved) vpcPlan {
	p := vpcPlan{createRouter: obs.router == nil, result: VpcResult{Attached: map[PodKey]Attachment{}, Failed: map[PodKey]error{}}}
	bySubnet := map[string][]Pod{}
	for _, pod := range v.Pods {
		name := cmp.Or(pod.Subnet, v.Subnets[0].Name)
		if _, ok := blocks[name]; !ok {
			p.result.Failed[pod.Key()] = fmt.Errorf("%w: pod %s asks for subnet %q, and VPC %s has %s", ErrUnknownSubnet, pod.Key(), name, v.Name, subnetNames(v.Subnets))
			continue
		}
		bySubnet[name] = append(bySubnet[name], pod.Pod)
	}

	oldLRPs := map[string]nbdb.LogicalRouterPort{}
	for _, lrp := range obs.lrps {
		if _, dup := oldLRPs[lrp.Name]; dup || !ownsVpc(lrp.ExternalIDs, v.ClusterID, v.Name) {
			continue // a foreign port on our router is left; a duplicate name cannot exist
		}
		oldLRPs[lrp.Name] = lrp
	}
	var wantLRPs []nbdb.LogicalRouterPort
	for _, s := range v.Subnets {
		seg := segment{clusterID: v.ClusterID, vpc: v.Name, subnet: s.Name}
		block := blocks[s.Name]
		name := VpcSubnetName(v.ClusterID, v.Name, s.Name)
		sp := subnetPlan{name: name, obs: obs.subnets[s.Name]}
		lsp := routerSwitchPort(seg)
		sp.plan = planSegment(seg, bySubnet[s.Name], &lsp, block, sp.obs)
		maps.Copy(p.result.Attached, sp.plan.result.Attached)
		maps.Copy(p.result.Failed, sp.plan.result.Failed)
		p.subnets = append(p.subnets, sp)
		wantLRPs = append(wantLRPs, routerPort(seg, block))
	}
	if v.Gateway != nil {
		wantLRPs = append(wantLRPs, gatewayRouterPort(v.ClusterID, v.Name))
	}
	p.planGatewayRoute(v, obs.routes)
	switch {
	case v.Gateway != nil:
		gp := planGatewayLink(v, obs.gateway)
		p.gateway, p.result.Gateway = &gp, gp.result.Gateway
	case obs.gateway.sw != nil:
		p.removeGateway = &obs.gateway
	}
	for _, want := range wantLRPs {
		old, ok := oldLRPs[want.Name]
		delete(oldLRPs, want.Name)
		switch {
		case !ok:
			p.lrpCreate = append(p.lrpCreate, want)
		case old.MAC != want.MAC || !slices.Equal(old.Networks, want.Networks) || !maps.Equal(old.ExternalIDs, want.ExternalIDs):
			want.UUID = old.UUID
			p.lrpUpdate = append(p.lrpUpdate, want)
		}
	}
	for _, gone := range oldLRPs {
		p.lrpRemove = append(p.lrpRemove, gone.UUID)
	}
	slices.Sort(p.lrpRemove)
	for _, name := range slices.Sorted(maps.Keys(obs.subnets)) {
		if _, ok := blocks[name]; !ok {
			p.removeSubnets = append(p.removeSubnets, obs.subnets[name])
		}
	}
	return p
}

func subnetNames(subnets []Subnet) string {
	names := make([]string, len(subnets))
	for i, s := range subnets {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// routerPort is the VPC router's port on a subnet: the subnet's first host, with the MAC
// derived from it as the pods' are.
func routerPort(seg segment, block hostaddr.Block) nbdb.LogicalRouterPort {
	ids := seg.ids()
	ids[owner.OVNKeyRole] = owner.OVNRoleRouter
	return nbdb.LogicalRouterPort{
		Name:        VpcSubnetName(seg.clusterID, seg.vpc, seg.subnet),
		MAC:         MACFor(block.Gateway()).String(),
		Networks:    []string{netip.PrefixFrom(block.Gateway(), block.Prefix().Bits()).String()},
		ExternalIDs: ids,
	}
}

// routerSwitchPort is the subnet switch's port that joins the router's port: "router"
// addresses, so OVN answers for the router's MAC and address itself.
func routerSwitchPort(seg segment) nbdb.LogicalSwitchPort {
	ids := seg.ids()
	ids[owner.OVNKeyRole] = owner.OVNRoleRouter
	return nbdb.LogicalSwitchPort{
		Name: VpcRouterSwitchPortName(seg.clusterID, seg.vpc, seg.subnet), Type: "router", Addresses: []string{"router"},
		Options: map[string]string{"router-port": VpcSubnetName(seg.clusterID, seg.vpc, seg.subnet)}, ExternalIDs: ids,
	}
}

// vpcGatewayIDs are the external_ids of the rows of a VPC's gateway: the VPC's, and the
// gateway role, which tells its link switch from the subnets' switches.
func vpcGatewayIDs(clusterID, vpc string) map[string]string {
	ids := vpcIDs(clusterID, vpc)
	ids[owner.OVNKeyRole] = owner.OVNRoleGateway
	return ids
}

// gatewayRouterPort is the VPC router's port on the gateway's link network, at its first host.
func gatewayRouterPort(clusterID, vpc string) nbdb.LogicalRouterPort {
	router, _ := vpcGatewayLinkAddrs()
	return nbdb.LogicalRouterPort{
		Name:        VpcGatewayLinkName(clusterID, vpc),
		MAC:         MACFor(router).String(),
		Networks:    []string{netip.PrefixFrom(router, VpcGatewayLink.Bits()).String()},
		ExternalIDs: vpcGatewayIDs(clusterID, vpc),
	}
}

// gatewayPortRow is the gateway's port on the link switch, requested on its chassis: the
// cluster gateway's row (gatewayRow) on the VPC's link, for the same reasons: port security
// on the MAC only, since the gateway forwards packets whose addresses are not its own (the
// outside's answers to the VPC's pods), and one chassis binding it.
func gatewayPortRow(clusterID, vpc string, subnets []Subnet, gw VpcGateway) nbdb.LogicalSwitchPort {
	_, ip := vpcGatewayLinkAddrs()
	mac := MACFor(ip).String()
	ids := vpcGatewayIDs(clusterID, vpc)
	if gw.ExternalIP.IsValid() {
		ids[owner.OVNKeyExternalIP] = gw.ExternalIP.String()
	}
	cidrs := make([]netip.Prefix, 0, len(subnets))
	for _, s := range subnets {
		cidrs = append(cidrs, s.CIDR)
	}
	ids[owner.OVNKeySubnets] = formatSubnets(cidrs)
	return nbdb.LogicalSwitchPort{
		Name:         VpcGatewayPortName(clusterID, vpc),
		Addresses:    []string{mac + " " + ip.String()},
		PortSecurity: []string{mac},
		Options:      map[string]string{"requested-chassis": gw.Chassis},
		ExternalIDs:  ids,
	}
}

// gatewayLinkRouterSwitchPort is the link switch's port joining the router's port on it.
func gatewayLinkRouterSwitchPort(clusterID, vpc string) nbdb.LogicalSwitchPort {
	return nbdb.LogicalSwitchPort{
		Name: VpcGatewayLinkSwitchPortName(clusterID, vpc), Type: "router", Addresses: []string{"router"},
		Options: map[string]string{"router-port": VpcGatewayLinkName(clusterID, vpc)}, ExternalIDs: vpcGatewayIDs(clusterID, vpc),
	}
}

// gatewayRoute is the VPC router's default route: whatever is for no subnet of the VPC (the
// subnets' connected routes are longer) goes to the gateway.
func gatewayRoute(clusterID, vpc string) nbdb.LogicalRouterStaticRoute {
	_, gw := vpcGatewayLinkAddrs()
	out := VpcGatewayLinkName(clusterID, vpc)
	return nbdb.LogicalRouterStaticRoute{
		IPPrefix: "0.0.0.0/0", Nexthop: gw.String(), OutputPort: &out, ExternalIDs: vpcGatewayIDs(clusterID, vpc),
	}
}

func sameRoute(a, b nbdb.LogicalRouterStaticRoute) bool {
	return a.IPPrefix == b.IPPrefix && a.Nexthop == b.Nexthop && (a.OutputPort == nil) == (b.OutputPort == nil) &&
		(a.OutputPort == nil || *a.OutputPort == *b.OutputPort) && a.Policy == nil && b.Policy == nil &&
		a.RouteTable == b.RouteTable && maps.Equal(a.ExternalIDs, b.ExternalIDs)
}

// planGatewayRoute plans the router's static routes: our default route while the VPC has a
// gateway (repaired in place if edited), none without; every other route of ours goes, and
// routes someone else added stay.
func (p *vpcPlan) planGatewayRoute(v Vpc, routes []nbdb.LogicalRouterStaticRoute) {
	want := gatewayRoute(v.ClusterID, v.Name)
	kept := false
	for _, r := range routes {
		switch {
		case !ownsVpc(r.ExternalIDs, v.ClusterID, v.Name):
			continue
		case v.Gateway == nil || kept:
			p.routeRemove = append(p.routeRemove, r.UUID)
		case !sameRoute(r, want):
			u := want
			u.UUID = r.UUID
			p.routeUpdate = append(p.routeUpdate, u)
		}
		kept = kept || v.Gateway != nil
	}
	if v.Gateway != nil && !kept {
		p.routeCreate = append(p.routeCreate, want)
	}
	slices.Sort(p.routeRemove)
}

// planGatewayLink plans the gateway's link switch as a segment without pods: its two ports,
// the router's (repaired by replacing it) and the gateway's (updated in place, so that moving
// it to another chassis is one update of options:requested-chassis and nothing is re-created);
// any other port of ours on it goes, and a foreign one stays.
func planGatewayLink(v Vpc, obs observed) plan {
	routerLSP := gatewayLinkRouterSwitchPort(v.ClusterID, v.Name)
	gwLSP := gatewayPortRow(v.ClusterID, v.Name, v.Subnets, *v.Gateway)
	var p plan
	var haveRouter, haveGW *nbdb.LogicalSwitchPort
	for i := range obs.ports {
		port := &obs.ports[i]
		switch {
		case !ownsVpc(port.ExternalIDs, v.ClusterID, v.Name):
		case port.Name == routerLSP.Name && haveRouter == nil:
			haveRouter = port
		case port.Name == gwLSP.Name && haveGW == nil:
			haveGW = port
		default:
			p.remove = append(p.remove, port.UUID)
		}
	}
	same := func(a, b nbdb.LogicalSwitchPort) bool {
		return samePort(a, b) && a.Type == b.Type && maps.Equal(a.Options, b.Options)
	}
	switch {
	case haveRouter == nil:
		p.create = append(p.create, routerLSP)
	case !same(*haveRouter, routerLSP):
		p.remove = append(p.remove, haveRouter.UUID)
		p.create = append(p.create, routerLSP)
	}
	switch {
	case haveGW == nil:
		p.create = append(p.create, gwLSP)
	case !same(*haveGW, gwLSP):
		u := gwLSP
		u.UUID = haveGW.UUID
		p.updateGateway = &u
	}
	slices.Sort(p.remove)
	p.switchIDs = vpcGatewayIDs(v.ClusterID, v.Name)
	p.switchIDs[owner.OVNKeyCIDR] = VpcGatewayLink.String()
	p.createSwitch = obs.sw == nil
	p.switchIDsChanged = p.createSwitch || !maps.Equal(obs.sw.ExternalIDs, p.switchIDs)
	router, ip := vpcGatewayLinkAddrs()
	p.result.Gateway = Attachment{Port: gwLSP.Name, MAC: MACFor(ip), IP: netip.PrefixFrom(ip, VpcGatewayLink.Bits()), Gateway: router}
	return p
}
