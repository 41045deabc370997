package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The VPC kinds (issue 33). VpcNatTunnel, VpcDnsForward and GatewayExIp keep the names and the
// field meanings of the prototype operator built on Kube-OVN and Submariner, so that its users
// can move their objects over by changing the API group:
//
//	prototype                       Octopus                           meaning
//	VpcNatTunnel.spec.clusterId     VpcNatTunnel.spec.clusterId       the remote cluster's ID
//	VpcNatTunnel.spec.gatewayName   VpcNatTunnel.spec.gatewayName     the remote VPC gateway's name
//	VpcNatTunnel.spec.interfaceAddr VpcNatTunnel.spec.interfaceAddr   the local tunnel interface's address (CIDR)
//	VpcNatTunnel.spec.natGwDp       VpcNatTunnel.spec.natGwDp         the local VPC gateway (in Octopus: the local Vpc's name)
//	(GRE only)                      VpcNatTunnel.spec.type            wireguard (default), vxlan or gre
//	VpcDnsForward.spec.vpc          VpcDnsForward.spec.vpc            the VPC whose DNS forwards clusterset.local
//	GatewayExIp.spec.externalip     GatewayExIp.spec.externalip       the VPC gateway's external address
//	GatewayExIp.spec.globalnetcidr  GatewayExIp.spec.globalnetcidr    the gateway's cluster's global CIDR
//
// Vpc is Octopus's own (Kube-OVN's Vpc and Subnet are two kinds; here a VPC's subnets are part
// of it, since a subnet belongs to exactly one VPC and is meaningless without it).

// VpcSubnet is one subnet of a VPC: a logical switch behind the VPC's router.
type VpcSubnet struct {
	// name names the subnet within its VPC; an RFC 1123 label.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="must be an RFC 1123 label (lower-case letters, digits and '-') such as 'default'"
	Name string `json:"name"`

	// cidr is the subnet's IPv4 block, such as 10.0.1.0/24. It may overlap other VPCs' and
	// other clusters' blocks, never another subnet of this VPC. Its first host is the VPC
	// router's address on the subnet (the pods' gateway); the pods get the rest.
	// +required
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4 && cidr(self).prefixLength() <= 30",message="must be an IPv4 CIDR no longer than /30 (a router address and at least one pod address), such as 10.0.1.0/24"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).masked() == cidr(self)",message="must be the block's network address: write the CIDR with its host bits zero, such as 10.0.1.0/24 instead of 10.0.1.5/24"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || !(cidr(self).containsIP('100.127.255.252') || cidr('100.127.255.252/30').containsIP(cidr(self).ip()))",message="must not overlap 100.127.255.252/30, the link between the VPC's router and its gateway (ovn.VpcGatewayLink); choose a block outside it"
	CIDR string `json:"cidr"`
}

// VpcSpec is the VPC's subnets and the namespaces whose pods live in it.
//
// Namespaces are bound by a field of the Vpc, not by a label on the Namespace. A Vpc is
// cluster-scoped, so only who may write Vpcs (a cluster administrator) decides which tenants
// share a network; a label on the Namespace could be set by whoever may update namespaces, and
// a tenant that can would join another tenant's VPC. It is also how Kube-OVN binds them
// (Vpc.spec.namespaces), so its users read it the same way. The price is that one object
// cannot forbid a namespace from being listed by two Vpcs: the API server checks one object at
// a time. The controller then keeps the namespace in the Vpc that listed it first (the older
// creationTimestamp, then the name) and sets NamespacesBound=False with reason
// NamespaceConflict on the other, naming the namespace and the Vpc that holds it.
//
// +kubebuilder:validation:XValidation:rule="self.subnets.all(a, self.subnets.all(b, a.name == b.name || !isCIDR(a.cidr) || !isCIDR(b.cidr) || !(cidr(a.cidr).containsIP(cidr(b.cidr).ip()) || cidr(b.cidr).containsIP(cidr(a.cidr).ip()))))",message="spec.subnets: two subnets of one VPC overlap; give each subnet a CIDR of its own (VPCs may overlap each other, subnets of one VPC may not)"
type VpcSpec struct {
	// subnets are the VPC's subnets; a pod gets its address from the first one unless it
	// names another in its octopus.io/vpc-subnet annotation.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	Subnets []VpcSubnet `json:"subnets"`

	// namespaces are the namespaces whose pods' secondary interface (net1) is on this VPC
	// instead of the cluster's secondary network.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="must be a namespace name (an RFC 1123 label)"
	Namespaces []string `json:"namespaces,omitempty"`
}

// Condition types and reasons of a Vpc.
const (
	// VpcConditionReady is True once the VPC's router and switches are in the OVN database.
	VpcConditionReady = "Ready"
	// VpcConditionNamespacesBound is False when a listed namespace is held by another Vpc.
	VpcConditionNamespacesBound = "NamespacesBound"
	// VpcConditionExternalIP is True while the Vpc holds its external address
	// (status.gateway.externalIP) in the cluster's global CIDR; False says why not: no global
	// CIDR (ReasonNoGlobalCIDR), the pool is full (ReasonPoolExhausted), or the Vpc can have
	// no gateway.
	VpcConditionExternalIP = "ExternalIPAllocated"

	// ReasonNamespaceConflict is the reason of NamespacesBound=False: the message names the
	// namespace and the Vpc that holds it, and says to remove it from one of them.
	ReasonNamespaceConflict = "NamespaceConflict"
	// ReasonVpcInUse is the reason of Ready=False while a deleted Vpc still has pods or a
	// VpcNatTunnel or VpcDnsForward naming it; the message lists them.
	ReasonVpcInUse = "InUse"
)

// VpcStatus is what Octopus made of the VPC.
type VpcStatus struct {
	// conditions: Ready, NamespacesBound, ExternalIPAllocated.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// gateway is what the VPC's gateway holds; absent while it holds nothing.
	// +optional
	Gateway *VpcGatewayStatus `json:"gateway,omitempty"`
}

// VpcGatewayStatus is the VPC's gateway as seen from outside the VPC.
type VpcGatewayStatus struct {
	// externalIP is the VPC's external (egress) address, from the cluster's global CIDR: the
	// gateway SNATs what the VPC sends out to it, and other clusters' VpcNatTunnels reach the
	// gateway at it (its GatewayExIp). The ovnmaster allocates it from the pool the global
	// ingress addresses and GlobalEgressIP ranges share, and keeps it for the Vpc's life, across
	// gateway failovers and restarts; it is recorded here because the status is the record.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address such as 242.1.0.9"
	ExternalIP string `json:"externalIP,omitempty"`
}

// Vpc is an isolated network inside the cluster's secondary network: an OVN logical router
// with a logical switch per subnet. Its CIDRs may overlap other VPCs' and other clusters';
// pods of two VPCs never reach each other inside the cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=octopus
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be an RFC 1123 label of at most 63 characters (it names OVN rows), such as 'red'"
// +kubebuilder:printcolumn:name="Subnets",type=string,JSONPath=`.spec.subnets[*].cidr`
// +kubebuilder:printcolumn:name="Namespaces",type=string,JSONPath=`.spec.namespaces`
// +kubebuilder:printcolumn:name="External IP",type=string,JSONPath=`.status.gateway.externalIP`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Vpc struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec VpcSpec `json:"spec"`
	// +optional
	Status VpcStatus `json:"status,omitempty"`
}

// VpcList is a list of Vpcs.
//
// +kubebuilder:object:root=true
type VpcList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Vpc `json:"items"`
}

// VpcTunnelType is how a VpcNatTunnel carries packets between the two VPC gateways.
// +kubebuilder:validation:Enum=wireguard;vxlan;gre
type VpcTunnelType string

const (
	// VpcTunnelWireGuard is an encrypted WireGuard tunnel (the default).
	VpcTunnelWireGuard VpcTunnelType = "wireguard"
	// VpcTunnelVXLAN is a VXLAN tunnel, unencrypted.
	VpcTunnelVXLAN VpcTunnelType = "vxlan"
	// VpcTunnelGRE is a GRE tunnel, as the prototype made; only where the kernel has ip_gre.
	VpcTunnelGRE VpcTunnelType = "gre"
)

// VpcNatTunnelSpec joins a local VPC's gateway to a VPC gateway of another cluster.
type VpcNatTunnelSpec struct {
	// clusterId is the remote cluster's ID.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="must be a cluster ID (an RFC 1123 label) such as 'cluster2'"
	ClusterID string `json:"clusterId"`

	// gatewayName is the remote VPC gateway's name: with clusterId it finds the remote
	// GatewayExIp, <gatewayName>-<clusterId>.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="must be a gateway name (an RFC 1123 label)"
	GatewayName string `json:"gatewayName"`

	// interfaceAddr is the local end's address on the tunnel interface, with its prefix
	// length, such as 10.100.0.1/24.
	// +required
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4",message="must be an IPv4 address with its prefix length, such as 10.100.0.1/24"
	InterfaceAddr string `json:"interfaceAddr"`

	// natGwDp is the local VPC gateway the tunnel leaves from. A VPC's gateway is named after
	// its Vpc, so this is the local Vpc's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="must be the local Vpc's name (an RFC 1123 label)"
	NatGwDp string `json:"natGwDp"`

	// type is the tunnel's encapsulation: wireguard (default), vxlan, or gre where the
	// kernel has it (TunnelTypeSupported=False, reason GREUnavailable, says so where it
	// does not).
	// +optional
	// +kubebuilder:default=wireguard
	Type VpcTunnelType `json:"type,omitempty"`
}

// Condition types and reasons of a VpcNatTunnel.
const (
	// VpcNatTunnelConditionReady is True once the tunnel, its route and its SNAT are in place;
	// while anything below is False, or the data plane is not built, it is False with that
	// condition's reason.
	VpcNatTunnelConditionReady = "Ready"
	// VpcNatTunnelConditionRemoteGatewayFound is True once the GatewayExIp
	// <gatewayName>-<clusterId> has been copied from the hub into octopus-system.
	VpcNatTunnelConditionRemoteGatewayFound = "RemoteGatewayFound"
	// VpcNatTunnelConditionVpcFound is True when spec.natGwDp names an existing local Vpc.
	VpcNatTunnelConditionVpcFound = "VpcFound"
	// VpcNatTunnelConditionTunnelTypeSupported is False when the kernel lacks spec.type's
	// encapsulation (gre where there is no ip_gre).
	VpcNatTunnelConditionTunnelTypeSupported = "TunnelTypeSupported"

	// ReasonRemoteGatewayNotFound: no GatewayExIp <gatewayName>-<clusterId> yet; the tunnel
	// comes up when it appears.
	ReasonRemoteGatewayNotFound = "RemoteGatewayNotFound"
	// ReasonVpcNotFound: spec.natGwDp names no local Vpc.
	ReasonVpcNotFound = "VpcNotFound"
	// ReasonGREUnavailable: spec.type is gre and the kernel has no GRE; nothing is made.
	ReasonGREUnavailable = "GREUnavailable"
	// ReasonNoGlobalCIDR: this cluster has no global CIDR to SNAT the VPC's traffic into.
	ReasonNoGlobalCIDR = "NoGlobalCIDR"
	// ReasonDataPlanePending: everything the tunnel needs was found, and the tunnel itself is
	// not built yet (issue 33's data plane half).
	ReasonDataPlanePending = "DataPlanePending"
)

// VpcNatTunnelStatus reports what the prototype's status did.
type VpcNatTunnelStatus struct {
	// remoteIp is the remote gateway's external address, from its GatewayExIp.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	RemoteIP string `json:"remoteIp,omitempty"`
	// localGlobalnetCidr is this cluster's global CIDR.
	// +optional
	// +kubebuilder:validation:MaxLength=43
	LocalGlobalnetCIDR string `json:"localGlobalnetCidr,omitempty"`
	// remoteGlobalnetCidr is the remote cluster's global CIDR, routed through the tunnel.
	// +optional
	// +kubebuilder:validation:MaxLength=43
	RemoteGlobalnetCIDR string `json:"remoteGlobalnetCidr,omitempty"`
	// globalEgressIps are the addresses the VPC's traffic is SNATed to.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=45
	GlobalEgressIPs []string `json:"globalEgressIps,omitempty"`
	// conditions: Ready, RemoteGatewayFound, VpcFound, TunnelTypeSupported.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VpcNatTunnel is a tunnel from a local VPC's gateway to a VPC gateway in another cluster,
// with a route to the remote cluster's global CIDR through it and SNAT of the VPC's traffic to
// the local cluster's global egress addresses. Deleting it removes all of that.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=octopus
// +kubebuilder:printcolumn:name="Vpc",type=string,JSONPath=`.spec.natGwDp`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterId`
// +kubebuilder:printcolumn:name="Gateway",type=string,JSONPath=`.spec.gatewayName`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Remote IP",type=string,JSONPath=`.status.remoteIp`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VpcNatTunnel struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec VpcNatTunnelSpec `json:"spec"`
	// +optional
	Status VpcNatTunnelStatus `json:"status,omitempty"`
}

// VpcNatTunnelList is a list of VpcNatTunnels.
//
// +kubebuilder:object:root=true
type VpcNatTunnelList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VpcNatTunnel `json:"items"`
}

// VpcDNSForwardSpec names the VPC whose DNS forwards clusterset.local.
type VpcDNSForwardSpec struct {
	// vpc is the Vpc's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="must be a Vpc's name (an RFC 1123 label)"
	Vpc string `json:"vpc"`
}

// VpcDNSForwardStatus is whether the forward is in place.
type VpcDNSForwardStatus struct {
	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VpcDnsForward makes the VPC's DNS forward clusterset.local to the cluster's DNS, so pods in
// the VPC resolve multi-cluster services; deleting it restores the VPC's DNS as it was.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=octopus
// +kubebuilder:printcolumn:name="Vpc",type=string,JSONPath=`.spec.vpc`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VpcDnsForward struct { //nolint:revive // the prototype's name, kept for its users
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec VpcDNSForwardSpec `json:"spec"`
	// +optional
	Status VpcDNSForwardStatus `json:"status,omitempty"`
}

// VpcDnsForwardList is a list of VpcDnsForwards.
//
// +kubebuilder:object:root=true
type VpcDnsForwardList struct { //nolint:revive // the prototype's name, kept for its users
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VpcDnsForward `json:"items"`
}

// GatewayExIPSpec is what another cluster needs to reach a VPC gateway.
type GatewayExIPSpec struct {
	// externalip is the VPC gateway's external address, where tunnels from other clusters end.
	// +required
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address such as 192.0.2.10"
	ExternalIP string `json:"externalip"`

	// globalnetcidr is the gateway's cluster's global CIDR.
	// +required
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 242.1.0.0/16"
	GlobalnetCIDR string `json:"globalnetcidr"`
}

// GatewayExIp publishes a VPC gateway's external address and its cluster's global CIDR. Octopus
// makes one for every local VPC gateway, named <gateway>-<cluster> so that names never collide
// across clusters, and syncs it through the hub to every cluster; it is never written by hand.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=octopus
// +kubebuilder:printcolumn:name="External IP",type=string,JSONPath=`.spec.externalip`
// +kubebuilder:printcolumn:name="Global CIDR",type=string,JSONPath=`.spec.globalnetcidr`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GatewayExIp struct { //nolint:revive // the prototype's name, kept for its users
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec GatewayExIPSpec `json:"spec"`
}

// GatewayExIpList is a list of GatewayExIps.
//
// +kubebuilder:object:root=true
type GatewayExIpList struct { //nolint:revive // the prototype's name, kept for its users
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GatewayExIp `json:"items"`
}
