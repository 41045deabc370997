// Package v1alpha1 holds the octopus.io/v1alpha1 API: Cluster and Peer, which clusters publish
// to the hub, Fabric, the operator's entry point in each cluster, GlobalIngressIP, a
// globalnet cluster's record of its exports' global addresses, and GlobalEgressIP, the global
// egress range of a namespace's or pod selector's pods, and InterconnectRoute, a manual route of
// the member's OVN-IC availability zone.
//
// +kubebuilder:object:generate=true
// +groupName=octopus.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "octopus.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Cluster{},
		&ClusterList{},
		&Peer{},
		&PeerList{},
		&Fabric{},
		&FabricList{},
		&GlobalIngressIP{},
		&GlobalIngressIPList{},
		&GlobalEgressIP{},
		&GlobalEgressIPList{},
		&Vpc{},
		&VpcList{},
		&VpcNatTunnel{},
		&VpcNatTunnelList{},
		&VpcDnsForward{},
		&VpcDnsForwardList{},
		&GatewayExIp{},
		&GatewayExIpList{},
		&InterconnectRoute{},
		&InterconnectRouteList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
