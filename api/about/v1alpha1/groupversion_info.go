// Package v1alpha1 defines ClusterProperty of about.k8s.io (KEP-2149). The upstream module
// sigs.k8s.io/about-api is not served by the Go module proxy, so this small type is defined here,
// matching the KEP's schema.
//
// +kubebuilder:object:generate=true
// +groupName=about.k8s.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is about.k8s.io/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: "about.k8s.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&ClusterProperty{},
		&ClusterPropertyList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
