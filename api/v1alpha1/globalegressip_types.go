package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxGlobalEgressIPs is the most addresses one GlobalEgressIP may ask for: a range, not a pool
// (the cluster's global CIDR is shared with every exported service's ingress address).
const MaxGlobalEgressIPs = 64

// GlobalEgressIPSpec says whose traffic leaves with the addresses, and how many there are.
type GlobalEgressIPSpec struct {
	// numberOfIPs is how many consecutive global addresses the selected pods' traffic to other
	// clusters is translated to (the source port spreads connections over them).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	NumberOfIPs int32 `json:"numberOfIPs,omitempty"`

	// podSelector selects the pods of this namespace the range is for; without it, every pod
	// of the namespace. A pod selected by a GlobalEgressIP with a podSelector uses that one
	// (of several, the oldest); other pods of the namespace use the namespace's GlobalEgressIP
	// without podSelector (of several, the oldest); pods with neither use the cluster's egress
	// range.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
}

// GlobalEgressIPConditionAllocated is True once status.allocatedIPs holds the range: the
// GlobalIngressIP condition's name and reasons (ReasonAllocated, ReasonPoolExhausted), with
// the same meaning for a range.
const GlobalEgressIPConditionAllocated = GlobalIngressIPConditionAllocated

// ReasonInvalidPodSelector is the reason of a GlobalEgressIP's Allocated=False when its
// podSelector does not parse (the schema cannot check label syntax): it gets no range and
// selects no pod.
const ReasonInvalidPodSelector = "InvalidPodSelector"

// GlobalEgressIPStatus is the allocation.
type GlobalEgressIPStatus struct {
	// allocatedIPs are the range's addresses in this cluster's global CIDR, in order. They stay
	// the same for the object's life unless numberOfIPs changes.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="self.all(ip, isIP(ip))",message="every entry must be an IP address"
	// +listType=atomic
	AllocatedIPs []string `json:"allocatedIPs,omitempty"`

	// conditions: Allocated (False with reason PoolExhausted, naming the pool, when the
	// cluster's global CIDR has no room for the range).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GlobalEgressIP gives the pods of its namespace, or those its podSelector selects, their own
// global egress addresses in a member cluster whose addressing is globalnet: their traffic to
// other clusters leaves with these rather than the cluster's egress range, so that a remote
// server (or its network policy) can tell them apart. Users create them; Octopus allocates the
// range from the cluster's global CIDR, keeps it across restarts and releases it on deletion.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=octopus,shortName=gep
// +kubebuilder:printcolumn:name="IPs",type=integer,JSONPath=`.spec.numberOfIPs`
// +kubebuilder:printcolumn:name="Allocated IPs",type=string,JSONPath=`.status.allocatedIPs`
// +kubebuilder:printcolumn:name="Allocated",type=string,JSONPath=`.status.conditions[?(@.type=="Allocated")].status`
// +kubebuilder:printcolumn:name="Pod Selector",type=string,JSONPath=`.spec.podSelector`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GlobalEgressIP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec GlobalEgressIPSpec `json:"spec,omitempty"`
	// +optional
	Status GlobalEgressIPStatus `json:"status,omitempty"`
}

// GlobalEgressIPList is a list of GlobalEgressIPs.
//
// +kubebuilder:object:root=true
type GlobalEgressIPList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GlobalEgressIP `json:"items"`
}
