package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Topology is the shape of the tunnel graph.
// +kubebuilder:validation:Enum=hub;mesh
type Topology string

const (
	// TopologyHub tunnels every cluster to the hub's gateway, which forwards between them.
	TopologyHub Topology = "hub"
	// TopologyMesh tunnels every pair of clusters directly.
	TopologyMesh Topology = "mesh"
)

// CIDRPool is a range from which the hub hands each cluster one block.
type CIDRPool struct {
	// cidr is the whole range.
	// +required
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 242.0.0.0/8"
	CIDR string `json:"cidr"`
	// clusterPrefixLength is the prefix length of each cluster's block.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	ClusterPrefixLength int32 `json:"clusterPrefixLength"`
}

// HubConfig turns the cluster the Fabric lives in into the hub.
type HubConfig struct {
	// namespace on the hub that holds shared state.
	// +optional
	// +kubebuilder:default=octopus-hub
	Namespace string `json:"namespace,omitempty"`
	// globalnet is the pool of global CIDRs for clusters with overlapping addresses.
	// +optional
	Globalnet *CIDRPool `json:"globalnet,omitempty"`
	// secondary is the pool of secondary-network CIDRs.
	// +optional
	Secondary *CIDRPool `json:"secondary,omitempty"`
}

// JoinConfig joins the cluster the Fabric lives in to a hub.
type JoinConfig struct {
	// clusterID is this cluster's identity in the cluster set.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ClusterID string `json:"clusterID"`
	// brokerInfoSecretRef names a Secret in octopus-system whose key "broker-info" holds the
	// file written by `octopus hub deploy`.
	// +required
	BrokerInfoSecretRef corev1.LocalObjectReference `json:"brokerInfoSecretRef"`
	// podCIDRs override discovery of the cluster's pod CIDRs.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR"
	PodCIDRs []string `json:"podCIDRs,omitempty"`
	// serviceCIDRs override discovery of the cluster's service CIDRs.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR"
	ServiceCIDRs []string `json:"serviceCIDRs,omitempty"`
	// topology of the tunnels (Cluster.spec.topology).
	// +optional
	// +kubebuilder:default=mesh
	Topology Topology `json:"topology,omitempty"`
	// backend is the tunnel driver.
	// +optional
	// +kubebuilder:default=wireguard
	Backend Backend `json:"backend,omitempty"`
	// addressing selects how other clusters reach this one.
	// +optional
	// +kubebuilder:default=direct
	Addressing Addressing `json:"addressing,omitempty"`
}

// FabricSpec says which role the cluster plays: exactly one of hubConfig and joinConfig.
//
// +kubebuilder:validation:XValidation:rule="has(self.hubConfig) != has(self.joinConfig)",message="set exactly one of hubConfig and joinConfig"
type FabricSpec struct {
	// hubConfig makes this cluster the hub.
	// +optional
	HubConfig *HubConfig `json:"hubConfig,omitempty"`
	// joinConfig joins this cluster to a hub.
	// +optional
	JoinConfig *JoinConfig `json:"joinConfig,omitempty"`
}

// FabricStatus reports how far the operator got.
type FabricStatus struct {
	// conditions of the fabric (Ready, HubDeployed, Joined).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Fabric is the operator's single entry point in a cluster: hub or member configuration.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=octopus
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'octopus'",message="there is one Fabric per cluster and it must be named octopus"
// +kubebuilder:printcolumn:name="Cluster ID",type=string,JSONPath=`.spec.joinConfig.clusterID`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Fabric struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec FabricSpec `json:"spec"`
	// +optional
	Status FabricStatus `json:"status,omitempty"`
}

// FabricList is a list of Fabrics.
//
// +kubebuilder:object:root=true
type FabricList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Fabric `json:"items"`
}
