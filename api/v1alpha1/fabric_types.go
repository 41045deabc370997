package v1alpha1

import (
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

// FabricName is the name of the one Fabric of a cluster.
const FabricName = "octopus"

// OperatorNamespace is where the operator runs and, by default, where a member's broker-info
// Secret lives. It is not SystemNamespace: leaving deletes SystemNamespace, and the operator
// and the broker-info it joins with must outlive a leave.
const OperatorNamespace = "octopus-operator"

// GatewayNodeLabel marks the nodes gateways run on: the member chart's default gateway node
// selector, and what cloud preparation sets. It is under node-restriction.kubernetes.io/
// because the NodeRestriction admission plugin forbids a kubelet to set such a label on its
// own Node: a node that could label itself would attract the gateway, which holds the
// cluster's hub credential (docs/trust.md).
const GatewayNodeLabel = "node-restriction.kubernetes.io/octopus-gateway"

// LegacyGatewayNodeLabel is the gateway label before GatewayNodeLabel, which a kubelet could
// set on itself; diagnose names the nodes that still carry it.
const LegacyGatewayNodeLabel = "octopus.io/gateway"

// BrokerInfoKey is the key of a broker-info Secret that holds the file `octopus hub deploy`
// writes.
const BrokerInfoKey = "broker-info"

// Fabric condition types.
const (
	// FabricBrokerReady: the hub is deployed and broker-info is published (hubConfig).
	FabricBrokerReady = "BrokerReady"
	// FabricJoined: the cluster is registered on the hub and holds its credential (joinConfig).
	FabricJoined = "Joined"
	// FabricComponentsReady: the member chart's release is deployed with the Fabric's values.
	FabricComponentsReady = "ComponentsReady"
	// FabricGatewaysConnected: this cluster's active gateway published its Peer.
	FabricGatewaysConnected = "GatewaysConnected"
	// FabricServiceDiscoveryReady: octopus-dns is deployed and available.
	FabricServiceDiscoveryReady = "ServiceDiscoveryReady"
	// FabricCloudPrepared: the gateway nodes are prepared (cloudPrepareConfig).
	FabricCloudPrepared = "CloudPrepared"
	// FabricReady: every condition above that applies is True.
	FabricReady = "Ready"
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

// HubConfig turns the cluster the Fabric lives in into the hub (the broker).
type HubConfig struct {
	// namespace on the hub that holds shared state. Immutable: the clusters joined to the hub
	// keep their state there.
	// +optional
	// +kubebuilder:default=octopus-hub
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="hubConfig.namespace is immutable: the joined clusters keep their state there; delete and re-create the Fabric to move the hub"
	Namespace string `json:"namespace,omitempty"`
	// hubURL is the address other clusters reach this API server at, written into
	// broker-info. Optional: the address the operator reaches its API server at, which in a
	// pod is the in-cluster Service address that other clusters usually cannot reach.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() == 'https'",message="hubConfig.hubURL must be an https URL such as https://hub.example.org:6443"
	HubURL string `json:"hubURL,omitempty"`
	// globalnet is the pool of global CIDRs for clusters with overlapping addresses.
	// +optional
	Globalnet *CIDRPool `json:"globalnet,omitempty"`
	// secondary is the pool of secondary-network CIDRs.
	// +optional
	Secondary *CIDRPool `json:"secondary,omitempty"`
	// interconnect puts OVN-IC's interconnection databases (IC NB and IC SB, 3-member raft
	// clusters on TLS with client certificates) on this cluster's nodes, for members joined
	// with the ovn-ic interconnect (`octopus hub deploy --interconnect`).
	// +optional
	Interconnect *HubInterconnect `json:"interconnect,omitempty"`
}

// HubInterconnect configures the interconnection databases on the hub.
type HubInterconnect struct {
	// image holds ovsdb-server and OVN's IC schemas: the secondary network's image
	// (octopus-ovn).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`
	// transitSwitches are the transit switches made at deploy, each a DNS label; the members'
	// routers join the first. Default: ts (Kube-OVN's).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.all(s, s.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",message="hubConfig.interconnect.transitSwitches must be DNS labels (lower-case letters, digits, '-'), such as ts"
	TransitSwitches []string `json:"transitSwitches,omitempty"`
	// addresses are the hub nodes' IP addresses the members reach the databases at (their
	// ovn-ic-config's ic-db-host), written into the databases' certificate.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="self.all(a, isIP(a))",message="hubConfig.interconnect.addresses must be IP addresses of the hub's nodes, such as 192.0.2.10"
	Addresses []string `json:"addresses,omitempty"`
}

// SecretReference names a Secret in any namespace (the Fabric is cluster-scoped).
type SecretReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// namespace of the Secret.
	// +optional
	// +kubebuilder:default=octopus-operator
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
}

// HealthCheck configures the gateways' probes of the other clusters' gateways.
type HealthCheck struct {
	// interval between two ICMP probes to each remote gateway; a connection is down after
	// maxPacketLoss missed probes in a row.
	// +optional
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('1m')",message="joinConfig.healthCheck.interval must be between 100ms and 1m"
	Interval metav1.Duration `json:"interval,omitempty"`
	// maxPacketLoss is how many probes in a row may go unanswered before a connection is down
	// (the gateway's --health-max-loss). Detection takes about interval × maxPacketLoss.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 60",message="joinConfig.healthCheck.maxPacketLoss must be between 1 and 60 probes in a row"
	MaxPacketLoss int32 `json:"maxPacketLoss,omitempty"`
}

// JoinConfig joins the cluster the Fabric lives in to a hub. Every field but clusterID,
// brokerInfoSecretRef and globalEgressSize can change while the cluster is joined: the
// operator reconfigures the running components (a Helm upgrade of the member chart).
//
// +kubebuilder:validation:XValidation:rule="has(self.clusterID) == has(oldSelf.clusterID) && (!has(self.clusterID) || self.clusterID == oldSelf.clusterID)",message="joinConfig.clusterID is immutable: it is the cluster's identity on the hub; delete the Fabric (the cluster leaves) and create it again with the new clusterID"
// +kubebuilder:validation:XValidation:rule="self.brokerInfoSecretRef == oldSelf.brokerInfoSecretRef",message="joinConfig.brokerInfoSecretRef (the hub) is immutable: delete the Fabric (the cluster leaves its hub) and create it again referring to the new hub's broker-info; to rotate broker-info of the same hub, update the Secret's content instead"
// +kubebuilder:validation:XValidation:rule="!has(self.globalEgressSize) || self.addressing == 'globalnet'",message="joinConfig.globalEgressSize is only meaningful with joinConfig.addressing globalnet: remove it, or set addressing to globalnet"
// +kubebuilder:validation:XValidation:rule="has(self.globalEgressSize) == has(oldSelf.globalEgressSize) || (has(self.globalEgressSize) ? self.globalEgressSize : oldSelf.globalEgressSize) == 8",message="joinConfig.globalEgressSize cannot be added or removed while the cluster is joined (unset means 8): delete the Fabric (the cluster leaves) and create it again with the new size"
// +kubebuilder:validation:XValidation:rule="!has(self.interconnect) || self.addressing == 'secondary'",message="joinConfig.interconnect joins the clusters' OVN networks: it needs joinConfig.addressing secondary"
type JoinConfig struct {
	// clusterID is this cluster's identity in the cluster set. Optional: the value of the
	// ClusterProperty cluster.clusterset.k8s.io, else the UID of the kube-system namespace
	// (status.clusterID shows the one in use).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ClusterID string `json:"clusterID,omitempty"`
	// brokerInfoSecretRef names the Secret whose key "broker-info" holds the file written by
	// `octopus hub deploy` (or published by the hub's Fabric).
	// +required
	BrokerInfoSecretRef SecretReference `json:"brokerInfoSecretRef"`
	// podCIDRs override discovery of the cluster's pod CIDRs, at most one per address family.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.filter(c, isCIDR(c) && cidr(c).ip().family() == 4).size() <= 1 && self.filter(c, isCIDR(c) && cidr(c).ip().family() == 6).size() <= 1",message="at most one pod CIDR per address family (one IPv4 and one IPv6 for a dual-stack cluster)"
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR"
	PodCIDRs []string `json:"podCIDRs,omitempty"`
	// serviceCIDRs override discovery of the cluster's service CIDRs, at most one per address
	// family.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.filter(c, isCIDR(c) && cidr(c).ip().family() == 4).size() <= 1 && self.filter(c, isCIDR(c) && cidr(c).ip().family() == 6).size() <= 1",message="at most one service CIDR per address family (one IPv4 and one IPv6 for a dual-stack cluster)"
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
	// +kubebuilder:validation:Enum=wireguard;vxlan
	Backend Backend `json:"backend,omitempty"`
	// addressing selects how other clusters reach this one.
	// +optional
	// +kubebuilder:default=direct
	Addressing Addressing `json:"addressing,omitempty"`
	// globalEgressSize is how many addresses at the start of the cluster's global CIDR are its
	// egress range, with globalnet addressing (Cluster.spec.globalEgressSize; `octopus join
	// --global-egress-size`). Unset means 8. Fixed while the cluster is joined: the pool of
	// ingress addresses starts after it, under addresses already handed out.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65534
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="joinConfig.globalEgressSize is immutable: delete the Fabric (the cluster leaves) and create it again with the new size"
	GlobalEgressSize int32 `json:"globalEgressSize,omitempty"`
	// healthCheck configures the gateways' probes of remote gateways.
	// +optional
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
	// gatewayNodeSelector selects the nodes the gateways run on. Optional: node-restriction.kubernetes.io/octopus-gateway=true.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	GatewayNodeSelector map[string]string `json:"gatewayNodeSelector,omitempty"`
	// silentClusterTTL is how long another cluster's heartbeat may go unrenewed, beyond its
	// lease duration, before this cluster's gateways tear its tunnel down (the gateway's
	// --silent-cluster-ttl, member chart value config.OCTOPUS_SILENT_CLUSTER_TTL). Optional:
	// 5m.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('30s') && duration(self) <= duration('24h')",message="joinConfig.silentClusterTTL must be between 30s and 24h: a shorter one tears tunnels down when a heartbeat is merely late (a slow or restarting hub)"
	SilentClusterTTL *metav1.Duration `json:"silentClusterTTL,omitempty"`
	// excludedSubnets are CIDRs of this cluster not to advertise to the other clusters.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR"
	ExcludedSubnets []string `json:"excludedSubnets,omitempty"`
	// image is the repository of the components' image; its tag is the operator's version.
	// Optional: the member chart's default.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`
	// interconnect makes the cluster an OVN-IC availability zone named after its ID, joined to
	// the hub's interconnection databases (`octopus join --interconnect ovn-ic`). Secondary
	// addressing only. Its fields are Kube-OVN's ovn-ic-config keys, one to one.
	// +optional
	Interconnect *JoinInterconnect `json:"interconnect,omitempty"`
}

// JoinInterconnect is a member's OVN interconnection: each field is the ovn-ic-config key named
// in its comment (docs/secondary-network.md has the table). enable-ic is the field's presence
// and az-name the cluster ID.
type JoinInterconnect struct {
	// type of interconnection: ovn-ic.
	// +optional
	// +kubebuilder:default=ovn-ic
	// +kubebuilder:validation:Enum=ovn-ic
	Type string `json:"type,omitempty"`
	// icDBHost is ic-db-host: the hub nodes' addresses of the IC databases, without ports.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=7
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.all(h, !h.contains(':') && !h.contains('/') && !h.contains(' '))",message="joinConfig.interconnect.icDBHost must be host names or IPv4 addresses without ports (the ports are icNBPort and icSBPort)"
	ICDBHost []string `json:"icDBHost"`
	// icNBPort is ic-nb-port, the IC NB database's port.
	// +optional
	// +kubebuilder:default=6645
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ICNBPort int32 `json:"icNBPort,omitempty"`
	// icSBPort is ic-sb-port, the IC SB database's port.
	// +optional
	// +kubebuilder:default=6646
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ICSBPort int32 `json:"icSBPort,omitempty"`
	// gwNodes is gw-nodes: the nodes that carry the transit port, highest priority first
	// (active-backup). Changing it moves the chassis live.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.all(n, self.exists_one(m, m == n))",message="joinConfig.interconnect.gwNodes lists a node twice"
	GWNodes []string `json:"gwNodes,omitempty"`
	// autoRoute is auto-route: advertise this cluster's block and learn the others'; false
	// routes only what static routes say.
	// +optional
	// +kubebuilder:default=true
	AutoRoute *bool `json:"autoRoute,omitempty"`
}

// CloudProvider is where the cluster's nodes run.
// +kubebuilder:validation:Enum=generic;aws;gcp;azure
type CloudProvider string

const (
	// CloudProviderGeneric is on-premises: nodes are prepared through the Kubernetes API only.
	CloudProviderGeneric CloudProvider = "generic"
	// CloudProviderAWS has no implementation yet (no cloud API is reachable from where
	// Octopus is tested): a Fabric naming it reports CloudPrepared=False, ProviderUnavailable.
	CloudProviderAWS CloudProvider = "aws"
	// CloudProviderGCP has no implementation yet, as CloudProviderAWS.
	CloudProviderGCP CloudProvider = "gcp"
	// CloudProviderAzure has no implementation yet, as CloudProviderAWS.
	CloudProviderAzure CloudProvider = "azure"
)

// CloudPrepareConfig prepares the nodes gateways run on.
//
// +kubebuilder:validation:XValidation:rule="self.provider != 'generic' || !(has(self.gateways) && has(self.gatewayNodeSelector))",message="cloudPrepareConfig: set at most one of gateways and gatewayNodeSelector"
type CloudPrepareConfig struct {
	// provider is where the nodes run.
	// +required
	Provider CloudProvider `json:"provider"`
	// gateways is how many nodes to make gateway nodes (label node-restriction.kubernetes.io/octopus-gateway=true).
	// Optional: 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	Gateways *int32 `json:"gateways,omitempty"`
	// gatewayNodeSelector makes every node it selects a gateway node (generic only).
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	GatewayNodeSelector map[string]string `json:"gatewayNodeSelector,omitempty"`
	// credentialsSecretRef names the cloud credentials (aws, gcp, azure).
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`
	// infraID identifies the cluster's cloud infrastructure (aws, gcp, azure).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	InfraID string `json:"infraID,omitempty"`
	// region of the cluster's infrastructure (aws, gcp, azure).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`
	// instanceType of dedicated gateway instances (aws, gcp, azure).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	InstanceType string `json:"instanceType,omitempty"`
}

// FabricSpec says which role the cluster plays: exactly one of hubConfig and joinConfig.
//
// +kubebuilder:validation:XValidation:rule="has(self.hubConfig) != has(self.joinConfig)",message="set exactly one of hubConfig and joinConfig"
// +kubebuilder:validation:XValidation:rule="has(self.hubConfig) == has(oldSelf.hubConfig)",message="the Fabric's role (hubConfig or joinConfig) is immutable: delete the Fabric and create it again with the other role"
type FabricSpec struct {
	// hubConfig makes this cluster the hub.
	// +optional
	HubConfig *HubConfig `json:"hubConfig,omitempty"`
	// joinConfig joins this cluster to a hub.
	// +optional
	JoinConfig *JoinConfig `json:"joinConfig,omitempty"`
	// cloudPrepareConfig prepares the gateway nodes.
	// +optional
	CloudPrepareConfig *CloudPrepareConfig `json:"cloudPrepareConfig,omitempty"`
}

// GatewayNode is a node prepared to run a gateway.
type GatewayNode struct {
	// name of the Node.
	Name string `json:"name"`
	// endpoint is the address other clusters' gateways reach it at: its ExternalIP, else its
	// InternalIP.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
}

// FabricStatus reports how far the operator got.
type FabricStatus struct {
	// conditions of the fabric: BrokerReady (hubConfig); Joined, ComponentsReady,
	// GatewaysConnected, ServiceDiscoveryReady (joinConfig); CloudPrepared
	// (cloudPrepareConfig); Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// clusterID is the cluster's ID in use (joinConfig.clusterID or its default).
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
	// brokerInfoSecret is namespace/name of the Secret holding the published broker-info
	// (hubConfig): copy it to the clusters that join.
	// +optional
	BrokerInfoSecret string `json:"brokerInfoSecret,omitempty"`
	// appliedHash identifies the inputs last applied in full (the hubConfig; for a member the
	// broker-info, clusterID, CIDRs, topology and addressing): while they are unchanged the
	// operator only checks, and writes nothing.
	// +optional
	AppliedHash string `json:"appliedHash,omitempty"`
	// componentsRevision is the revision of the member chart's Helm release.
	// +optional
	ComponentsRevision int32 `json:"componentsRevision,omitempty"`
	// gatewayNodes are the nodes prepared as gateways (cloudPrepareConfig).
	// +optional
	// +listType=atomic
	GatewayNodes []GatewayNode `json:"gatewayNodes,omitempty"`
}

// Fabric is the operator's single entry point in a cluster: hub or member configuration. It is
// cluster-scoped and there is one, named octopus: it configures the whole cluster (its
// identity, its CoreDNS, its nodes), which no namespace owns.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=octopus
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'octopus'",message="there is one Fabric per cluster and it must be named octopus"
// +kubebuilder:printcolumn:name="Cluster ID",type=string,JSONPath=`.status.clusterID`
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.joinConfig.backend`
// +kubebuilder:printcolumn:name="Broker",type=string,JSONPath=`.status.conditions[?(@.type=="BrokerReady")].status`
// +kubebuilder:printcolumn:name="Joined",type=string,JSONPath=`.status.conditions[?(@.type=="Joined")].status`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
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
