package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InterconnectRouteSpec is one manual route of the cluster's OVN-IC availability zone.
//
// +kubebuilder:validation:XValidation:rule="has(self.targetCluster) != has(self.nextHop)",message="set exactly one of targetCluster (a cluster ID) or nextHop (the remote AZ's transit port address)"
type InterconnectRouteSpec struct {
	// prefix is the destination, a CIDR such as 10.113.0.0/24 (IPv4: OVN-IC's transit network
	// is IPv4). It must not overlap the cluster's own secondary block.
	// +required
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4",message="prefix must be an IPv4 CIDR such as 10.113.0.0/24"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).masked() == cidr(self)",message="prefix must be masked: write the network address (10.113.0.0/24, not 10.113.0.5/24)"
	Prefix string `json:"prefix"`

	// targetCluster is the ID of the cluster whose AZ the prefix is routed to: its transit
	// address is looked up in the IC SB database. Exclusive with nextHop.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="targetCluster must be a cluster ID: a DNS label (lower case letters, digits and '-')"
	TargetCluster string `json:"targetCluster,omitempty"`

	// nextHop is the remote AZ's transit port address the prefix is routed to, as in Kube-OVN's
	// `lr-route-add <router> <prefix> <next hop>`. Exclusive with targetCluster.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="nextHop must be an IPv4 address, the remote AZ's transit port address such as 169.254.100.2"
	NextHop string `json:"nextHop,omitempty"`
}

// InterconnectRouteConditionReady is True once the route is a static route of the AZ's
// interconnection router.
const InterconnectRouteConditionReady = "Ready"

// Reasons of an InterconnectRoute's Ready condition.
const (
	// ReasonRouteApplied: the route is on the router.
	ReasonRouteApplied = "Applied"
	// ReasonAutomaticRoutes: ovn-config's auto-route is true, so OVN-IC learns routes itself
	// and manual ones are ignored (Kube-OVN's rule).
	ReasonAutomaticRoutes = "AutomaticRoutes"
	// ReasonUnknownCluster: targetCluster names no AZ on the transit switch.
	ReasonUnknownCluster = "UnknownCluster"
	// ReasonOverlapsOwnBlock: the prefix overlaps the cluster's own secondary block.
	ReasonOverlapsOwnBlock = "OverlapsOwnBlock"
	// ReasonInvalidNextHop: the next hop is not another AZ's address on the transit network.
	ReasonInvalidNextHop = "InvalidNextHop"
	// ReasonDuplicatePrefix: an older InterconnectRoute already routes the prefix.
	ReasonDuplicatePrefix = "DuplicatePrefix"
	// ReasonNotInterconnected: the cluster is not an AZ (no ovn-ic-config, or enable-ic off).
	ReasonNotInterconnected = "NotInterconnected"
	// ReasonRouteNotApplied: the AZ as a whole could not be applied; the message says why.
	ReasonRouteNotApplied = "NotApplied"
)

// InterconnectRouteStatus is what the icmaster made of the route.
type InterconnectRouteStatus struct {
	// nextHop is the address the route goes through: spec.nextHop, or targetCluster's transit
	// address as found in the IC SB database.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	NextHop string `json:"nextHop,omitempty"`

	// conditions: Ready (False with a reason naming the problem and its fix).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// InterconnectRoute is a manual route of the member's OVN-IC availability zone (issue 32): with
// ovn-ic-config's auto-route false, each becomes a static route of the AZ's interconnection
// router, Kube-OVN's `lr-route-add <router> <prefix> <remote transit address>`. One route that
// cannot be applied is reported on itself and never holds the others back.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=octopus,shortName=icr
// +kubebuilder:printcolumn:name="Prefix",type=string,JSONPath=`.spec.prefix`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetCluster`
// +kubebuilder:printcolumn:name="Next Hop",type=string,JSONPath=`.status.nextHop`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type InterconnectRoute struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec InterconnectRouteSpec `json:"spec"`
	// +optional
	Status InterconnectRouteStatus `json:"status,omitempty"`
}

// InterconnectRouteList is a list of InterconnectRoutes.
//
// +kubebuilder:object:root=true
type InterconnectRouteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InterconnectRoute `json:"items"`
}
