package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Backend is the tunnel driver a gateway uses.
// +kubebuilder:validation:Enum=wireguard;vxlan
type Backend string

const (
	// BackendWireGuard encrypts traffic between gateways (kernel WireGuard or wireguard-go).
	BackendWireGuard Backend = "wireguard"
	// BackendVXLAN carries traffic unencrypted, for trusted underlays.
	BackendVXLAN Backend = "vxlan"
)

// PeerRole tells a member cluster's gateway from the hub's.
// +kubebuilder:validation:Enum=member;hub
type PeerRole string

const (
	// PeerRoleMember is a member cluster's active gateway.
	PeerRoleMember PeerRole = "member"
	// PeerRoleHub is the hub's gateway: it advertises no cluster of its own and forwards
	// between the clusters that reach each other through it (the hub topology).
	PeerRoleHub PeerRole = "hub"
)

// PeerEndpoint is where a gateway's tunnel can be reached.
type PeerEndpoint struct {
	// publicIP is the address other clusters use when they are not on the gateway's own network.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	PublicIP string `json:"publicIP,omitempty"`

	// privateIP is the gateway's address on its own network.
	// +required
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	PrivateIP string `json:"privateIP"`

	// port is the UDP port of the tunnel.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// PeerSpec is what a cluster's active gateway publishes so that others can tunnel to it.
type PeerSpec struct {
	// clusterID is the cluster this gateway belongs to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self != 'octopus-hub-gateway'",message="clusterID octopus-hub-gateway is reserved for the hub's own components (ReservedClusterIDs)"
	ClusterID string `json:"clusterID"`

	// hostname is the node the gateway runs on.
	// +required
	// +kubebuilder:validation:MinLength=1
	Hostname string `json:"hostname"`

	// role is member for a cluster's gateway and hub for the hub's gateway.
	// +optional
	// +kubebuilder:default=member
	Role PeerRole `json:"role,omitempty"`

	// topology is how this gateway wants to be reached, copied from its Cluster: mesh gateways
	// tunnel directly to each other; everything else goes through the hub's gateway.
	// +optional
	// +kubebuilder:default=mesh
	Topology Topology `json:"topology,omitempty"`

	// backend is the tunnel driver.
	// +optional
	// +kubebuilder:default=wireguard
	Backend Backend `json:"backend,omitempty"`

	// publicKey is the gateway's WireGuard public key (base64, 32 bytes). The private key never
	// leaves the gateway's node.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw480]=$`
	PublicKey string `json:"publicKey,omitempty"`

	// endpoint is where the tunnel is reached.
	// +required
	Endpoint PeerEndpoint `json:"endpoint"`

	// subnets are the CIDRs reachable through this gateway.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR"
	Subnets []string `json:"subnets,omitempty"`

	// healthCheckIP is the address other gateways probe to measure the connection.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	HealthCheckIP string `json:"healthCheckIP,omitempty"`
}

// ConnectionState is the state of a tunnel to another cluster.
// +kubebuilder:validation:Enum=Connecting;Connected;Error
type ConnectionState string

// Connection states.
const (
	ConnectionConnecting ConnectionState = "Connecting"
	ConnectionConnected  ConnectionState = "Connected"
	ConnectionError      ConnectionState = "Error"
)

// LatencyStats summarises round-trip times of health probes.
type LatencyStats struct {
	// last is the most recent round-trip time.
	// +optional
	Last metav1.Duration `json:"last,omitempty"`
	// min is the smallest round-trip time seen.
	// +optional
	Min metav1.Duration `json:"min,omitempty"`
	// avg is the mean round-trip time.
	// +optional
	Avg metav1.Duration `json:"avg,omitempty"`
	// max is the largest round-trip time seen.
	// +optional
	Max metav1.Duration `json:"max,omitempty"`
}

// PeerConnection is this gateway's view of its tunnel to one other cluster.
type PeerConnection struct {
	// clusterID is the remote cluster.
	// +required
	ClusterID string `json:"clusterID"`
	// state of the tunnel.
	// +required
	State ConnectionState `json:"state"`
	// message explains the state when it is not Connected.
	// +optional
	Message string `json:"message,omitempty"`
	// via is the Peer whose tunnel carries this connection (the hub's gateway) when there is
	// no direct tunnel. Such a connection has no counters or handshake of its own: they are
	// the carrying tunnel's, reported under its Peer.
	// +optional
	Via string `json:"via,omitempty"`
	// ipFamilies are the address families (IPv4, IPv6) whose traffic this connection carries:
	// those both clusters advertise subnets of. Empty on the hub gateway's connections, which
	// forward whatever the members send.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:Enum=IPv4;IPv6
	IPFamilies []string `json:"ipFamilies,omitempty"`
	// familyMessage says why a family one of the two clusters advertises is not carried: the
	// other advertises no subnet of it.
	// +optional
	FamilyMessage string `json:"familyMessage,omitempty"`
	// rtt is the measured round-trip time.
	// +optional
	RTT LatencyStats `json:"rtt,omitempty"`
	// lossPercent is the share of recent probes that got no answer, 0 to 100.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	LossPercent int32 `json:"lossPercent,omitempty"`
	// rxBytes and txBytes count the tunnel's traffic with the remote cluster since the gateway
	// started.
	// +optional
	RxBytes int64 `json:"rxBytes,omitempty"`
	// +optional
	TxBytes int64 `json:"txBytes,omitempty"`
	// lastHandshake is when the WireGuard handshake with the remote gateway last completed.
	// +optional
	LastHandshake *metav1.Time `json:"lastHandshake,omitempty"`
	// underlay is what this gateway last measured of the underlay path to the remote gateway's
	// tunnel endpoint, outside the tunnel: whether UDP to the tunnel port is answered and the
	// largest packet that passes unfragmented. Absent until the first measurement, and for a
	// connection carried by another Peer's tunnel (via).
	// +optional
	Underlay *UnderlayProbe `json:"underlay,omitempty"`
}

// UnderlayProbe is one measurement of the underlay path from this gateway to a remote
// gateway's tunnel endpoint, made with UDP probes sent to the tunnel port.
type UnderlayProbe struct {
	// time is when the measurement finished.
	// +required
	Time metav1.Time `json:"time"`
	// portReachable is true when the remote gateway answered a probe sent to its tunnel port.
	// +required
	PortReachable bool `json:"portReachable"`
	// message says why the port counts as unreachable: no answer, or refused.
	// +optional
	Message string `json:"message,omitempty"`
	// pathMTU is the largest IP packet, in bytes, that reached the remote tunnel port with the
	// Don't Fragment bit set; 0 when the port is unreachable.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PathMTU int32 `json:"pathMTU,omitempty"`
	// requiredMTU is the largest IP packet the tunnel sends on the underlay: the tunnel device's
	// MTU plus the encapsulation. A pathMTU below it drops the tunnel's largest packets.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RequiredMTU int32 `json:"requiredMTU,omitempty"`
	// tunnelMTU is the tunnel device's MTU at the time; requiredMTU minus tunnelMTU is the
	// encapsulation overhead.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TunnelMTU int32 `json:"tunnelMTU,omitempty"`
}

// PeerStatus is what the gateway observes.
type PeerStatus struct {
	// driver is what carries the tunnels: wireguard (kernel), wireguard-go (userspace) or vxlan.
	// +optional
	Driver string `json:"driver,omitempty"`

	// conditions describe the gateway's own state.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// connections are the tunnels to the other clusters.
	// +optional
	// +listType=map
	// +listMapKey=clusterID
	Connections []PeerConnection `json:"connections,omitempty"`
}

// Peer is a cluster's active gateway as published on the hub.
//
// Its name is its cluster ID, so that the API server keeps one Peer per cluster and no
// cluster can squat another's name; the ID hub is the hub gateway's, and only it.
//
// +kubebuilder:object:root=true
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.clusterID",message="metadata.name must equal spec.clusterID: one Peer per cluster, named after it"
// +kubebuilder:validation:XValidation:rule="(self.spec.clusterID == 'hub') == (has(self.spec.role) && self.spec.role == 'hub')",message="the cluster ID hub is the hub gateway's: a Peer has role hub if and only if its clusterID is hub"
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=octopus
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterID`
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.spec.role`
// +kubebuilder:printcolumn:name="Topology",type=string,JSONPath=`.spec.topology`
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.backend`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.endpoint.privateIP`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.spec.endpoint.port`
// +kubebuilder:printcolumn:name="Host",type=string,JSONPath=`.spec.hostname`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Peer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec PeerSpec `json:"spec"`
	// +optional
	Status PeerStatus `json:"status,omitempty"`
}

// PeerList is a list of Peers.
//
// +kubebuilder:object:root=true
type PeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Peer `json:"items"`
}
