package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterIDProperty is the well-known property whose value is the cluster's ID in its cluster set.
const ClusterIDProperty = "cluster.clusterset.k8s.io"

// ClusterSetProperty is the well-known property naming the cluster set the cluster belongs to.
const ClusterSetProperty = "clusterset.k8s.io"

// ClusterPropertySpec holds the property's value.
type ClusterPropertySpec struct {
	// value of the property.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128000
	Value string `json:"value"`
}

// ClusterProperty is a named property of the cluster it lives in (KEP-2149).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// about.k8s.io is a protected group: its CRD carries the approval of the KEP that defines it.
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes/enhancements/pull/3084"
// +kubebuilder:printcolumn:name="Value",type=string,JSONPath=`.spec.value`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterProperty struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ClusterPropertySpec `json:"spec"`
}

// ClusterPropertyList is a list of ClusterProperties.
//
// +kubebuilder:object:root=true
type ClusterPropertyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterProperty `json:"items"`
}
