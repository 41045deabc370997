package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GlobalIngressTargetKind is what a global ingress address leads to.
// +kubebuilder:validation:Enum=Service;Pod
type GlobalIngressTargetKind string

const (
	// GlobalIngressTargetService is an exported ClusterSetIP Service: the address leads to its
	// ready endpoints.
	GlobalIngressTargetService GlobalIngressTargetKind = "Service"
	// GlobalIngressTargetPod is a ready pod of an exported headless Service: the address is
	// the pod's, one to one.
	GlobalIngressTargetPod GlobalIngressTargetKind = "Pod"
)

// GlobalIngressTarget names the object a global ingress address is for, in the
// GlobalIngressIP's namespace.
//
// +kubebuilder:validation:XValidation:rule="self.kind != 'Pod' || has(self.serviceName)",message="a Pod target needs serviceName, the headless Service it is exported through"
type GlobalIngressTarget struct {
	// kind is Service or Pod.
	// +required
	Kind GlobalIngressTargetKind `json:"kind"`

	// name is the Service's or the Pod's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// serviceName is, for a Pod, the exported headless Service the pod is an endpoint of.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ServiceName string `json:"serviceName,omitempty"`
}

// GlobalIngressIPSpec says what the address is for.
type GlobalIngressIPSpec struct {
	// target is the Service or Pod this address leads to. It never changes: another target
	// gets another object.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="target is immutable"
	Target GlobalIngressTarget `json:"target"`
}

// Condition types and reasons of a GlobalIngressIP.
const (
	// GlobalIngressIPConditionAllocated is True once status.ip holds the target's address.
	GlobalIngressIPConditionAllocated = "Allocated"

	// ReasonAllocated is the reason of Allocated=True.
	ReasonAllocated = "Allocated"
	// ReasonPoolExhausted is the reason of Allocated=False when the cluster's ingress pool has
	// no free address; the message names the pool.
	ReasonPoolExhausted = "PoolExhausted"
)

// GlobalIngressIPStatus is the allocation.
type GlobalIngressIPStatus struct {
	// ip is the target's address in this cluster's global CIDR. Other clusters reach the
	// target by it; it stays the same for the object's life.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	IP string `json:"ip,omitempty"`

	// conditions: Allocated.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GlobalIngressIP records the global address of an exported Service (ClusterSetIP) or of a
// ready pod of an exported headless Service, in a member cluster whose addressing is
// globalnet. Octopus creates, allocates and deletes them; they survive agent restarts, so an
// address stays with its target while the export lasts.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=octopus,shortName=gip
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.target.kind`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.target.name`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.status.ip`
// +kubebuilder:printcolumn:name="Allocated",type=string,JSONPath=`.status.conditions[?(@.type=="Allocated")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GlobalIngressIP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec GlobalIngressIPSpec `json:"spec"`
	// +optional
	Status GlobalIngressIPStatus `json:"status,omitempty"`
}

// GlobalIngressIPList is a list of GlobalIngressIPs.
//
// +kubebuilder:object:root=true
type GlobalIngressIPList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GlobalIngressIP `json:"items"`
}
