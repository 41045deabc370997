package ovn

import (
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// segment is one logical switch whose pods' ports Apply addresses from a block: the cluster's
// flat secondary switch, or one subnet of a VPC. The address management (makePlan) is the
// same for both; the segment says which rows are its own and what they are called.
type segment struct {
	clusterID string
	// vpc and subnet name a VPC's subnet; both empty for the cluster's switch.
	vpc, subnet string
}

func clusterSegment(clusterID string) segment { return segment{clusterID: clusterID} }

func (s segment) String() string {
	if s.vpc == "" {
		return "cluster " + s.clusterID
	}
	return "subnet " + s.subnet + " of VPC " + s.vpc + " of cluster " + s.clusterID
}

// ids are the external_ids that mark the segment's rows (a fresh map each time).
func (s segment) ids() map[string]string {
	if s.vpc == "" {
		return map[string]string{owner.OVNKeyOwner: owner.OVNOwnerSecondary, owner.OVNKeyCluster: s.clusterID}
	}
	return map[string]string{
		owner.OVNKeyOwner: owner.OVNOwnerVPC, owner.OVNKeyCluster: s.clusterID,
		owner.OVNKeyVPC: s.vpc, owner.OVNKeySubnet: s.subnet,
	}
}

// owns reports whether a row with these external_ids is the segment's.
func (s segment) owns(ids map[string]string) bool {
	for k, v := range s.ids() {
		if ids[k] != v {
			return false
		}
	}
	return true
}

// portName names a pod's port on the segment: PortName on the cluster's switch, VpcPortName
// on a VPC's subnet.
func (s segment) portName(k PodKey) string {
	if s.vpc == "" {
		return PortName(s.clusterID, k)
	}
	return VpcPortName(s.clusterID, s.vpc, k)
}
