package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Addressing is how a cluster's pods are addressed from other clusters.
// +kubebuilder:validation:Enum=direct;globalnet;secondary
type Addressing string

const (
	// AddressingDirect routes the cluster's own pod and service CIDRs; they must not overlap others'.
	AddressingDirect Addressing = "direct"
	// AddressingGlobalnet NATs exported services and egress into the cluster's global CIDR.
	AddressingGlobalnet Addressing = "globalnet"
	// AddressingSecondary gives pods a second interface on the OVN network from the secondary CIDR.
	AddressingSecondary Addressing = "secondary"
)

// MaxGlobalEgressSize is the largest ClusterSpec.GlobalEgressSize the API accepts (its Maximum
// marker says the same): the default /16 global CIDR less the health-check address and one
// ingress address.
const MaxGlobalEgressSize = 65534

// ClusterSpec is what a cluster declares about itself when it joins.
//
// +kubebuilder:validation:XValidation:rule="self.addressing != 'globalnet' || has(self.globalCIDR)",message="globalnet addressing needs globalCIDR"
// +kubebuilder:validation:XValidation:rule="self.addressing != 'secondary' || has(self.secondaryCIDR)",message="secondary addressing needs secondaryCIDR"
// +kubebuilder:validation:XValidation:rule="!has(self.globalEgressSize) || self.addressing == 'globalnet'",message="globalEgressSize is only meaningful with globalnet addressing: remove it, or join with --addressing globalnet"
// +kubebuilder:validation:XValidation:rule="has(self.globalEgressSize) == has(oldSelf.globalEgressSize) || (has(self.globalEgressSize) ? self.globalEgressSize : oldSelf.globalEgressSize) == 8",message="globalEgressSize cannot be added or removed after join (unset means 8): the egress range and the pool after it would move under addresses already handed out; to change it, leave and join again"
type ClusterSpec struct {
	// clusterID is the cluster's identity in the cluster set (KEP-2149); it equals metadata.name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterID is immutable"
	// +kubebuilder:validation:XValidation:rule="!(self in ['hub', 'octopus-hub-gateway'])",message="clusterID hub and octopus-hub-gateway are reserved for the hub's own components (ReservedClusterIDs); pick another --cluster-id"
	ClusterID string `json:"clusterID"`

	// podCIDRs are the cluster's pod address ranges, at most one per address family: a
	// dual-stack cluster lists its IPv4 and its IPv6 range. One per family because every
	// consumer (routes, overlap checks, the advertised = allocated rule) works per family, and a
	// second range of one family is what kube-controller-manager itself refuses.
	// +required
	// +kubebuilder:validation:XValidation:rule="self.filter(c, isCIDR(c) && cidr(c).ip().family() == 4).size() <= 1 && self.filter(c, isCIDR(c) && cidr(c).ip().family() == 6).size() <= 1",message="at most one pod CIDR per address family (one IPv4 and one IPv6 for a dual-stack cluster)"
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.244.0.0/16"
	// +listType=set
	PodCIDRs []string `json:"podCIDRs"`

	// serviceCIDRs are the cluster's service ClusterIP ranges, at most one per address family
	// (kube-apiserver's --service-cluster-ip-range holds one per family as well).
	// +required
	// +kubebuilder:validation:XValidation:rule="self.filter(c, isCIDR(c) && cidr(c).ip().family() == 4).size() <= 1 && self.filter(c, isCIDR(c) && cidr(c).ip().family() == 6).size() <= 1",message="at most one service CIDR per address family (one IPv4 and one IPv6 for a dual-stack cluster)"
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.96.0.0/16"
	// +listType=set
	ServiceCIDRs []string `json:"serviceCIDRs"`

	// addressing selects how other clusters reach this one.
	// +optional
	// +kubebuilder:default=direct
	Addressing Addressing `json:"addressing,omitempty"`

	// topology selects how this cluster's gateway reaches the others: mesh (a direct tunnel to
	// every other mesh cluster) or hub (one tunnel, to the hub's gateway, which forwards; only
	// the hub needs an address the clusters can reach). Traffic between a mesh and a hub
	// cluster goes through the hub's gateway.
	// +optional
	// +kubebuilder:default=mesh
	Topology Topology `json:"topology,omitempty"`

	// globalCIDR is the block of the hub's globalnet range allocated to this cluster.
	// +optional
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 242.1.0.0/16"
	GlobalCIDR string `json:"globalCIDR,omitempty"`

	// secondaryCIDR is the block of the hub's secondary-network range allocated to this cluster.
	// +optional
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.112.0.0/16"
	SecondaryCIDR string `json:"secondaryCIDR,omitempty"`

	// globalEgressSize is how many addresses at the start of globalCIDR are the cluster's
	// egress range, the source of its pods' traffic to other clusters; the rest, but the last,
	// is the pool of ingress addresses and GlobalEgressIP ranges. Unset means 8. The
	// controller's allocator and the gateway's NAT both read it here, so they cannot disagree
	// about which addresses are egress. It is immutable: changing it would move the pool under
	// addresses already handed out. At most 65534 so that it fits the default /16 global CIDR
	// with the health-check address and one ingress address; join checks it against the
	// actual one.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65534
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="globalEgressSize is immutable: the egress range and the pool after it would move under addresses already handed out; to change it, leave and join again"
	GlobalEgressSize int32 `json:"globalEgressSize,omitempty"`
}

// Condition types and reasons of a Cluster.
const (
	// ClusterConditionAgentConnected is True while the cluster's agent reaches the hub and
	// renews its heartbeat Lease.
	ClusterConditionAgentConnected = "AgentConnected"

	// ReasonHeartbeating is the reason of AgentConnected=True.
	ReasonHeartbeating = "Heartbeating"
	// ReasonAgentStopped is set by an agent that shuts down cleanly.
	ReasonAgentStopped = "AgentStopped"
)

// ClusterStatus is what the cluster's agent reports.
type ClusterStatus struct {
	// conditions describe the cluster's state as seen by its own agent.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// agentVersion is the version of the octopus-agent that last reported.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`
}

// Cluster is one member of the cluster set, as registered on the hub.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=octopus
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.clusterID",message="metadata.name must equal spec.clusterID"
// +kubebuilder:printcolumn:name="Pod CIDRs",type=string,JSONPath=`.spec.podCIDRs`
// +kubebuilder:printcolumn:name="Service CIDRs",type=string,JSONPath=`.spec.serviceCIDRs`
// +kubebuilder:printcolumn:name="Global CIDR",type=string,JSONPath=`.spec.globalCIDR`,priority=1
// +kubebuilder:printcolumn:name="Secondary CIDR",type=string,JSONPath=`.spec.secondaryCIDR`,priority=1
// +kubebuilder:printcolumn:name="Connected",type=string,JSONPath=`.status.conditions[?(@.type=="AgentConnected")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ClusterSpec `json:"spec"`
	// +optional
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterList is a list of Clusters.
//
// +kubebuilder:object:root=true
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cluster `json:"items"`
}
