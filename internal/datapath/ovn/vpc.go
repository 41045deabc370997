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
// the cluster's, nor of another VPC's or cluster's.

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
	result        VpcResult
}

func (p *vpcPlan) empty() bool {
	if p.createRouter || len(p.lrpCreate)+len(p.lrpUpdate)+len(p.lrpRemove)+len(p.removeSubnets) > 0 {
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

		want := routerPort(seg, block)
		old, ok := oldLRPs[name]
		delete(oldLRPs, name)
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
