package v1alpha1

// Names and labels shared between Octopus's components: what one component creates and another
// finds by name. They are defined here, once, because the writer and the reader are different
// programs (hub deploy, join, the controller, the gateway, the route agent), and a name that
// drifts on one side fails silently on the other.

// Namespaces.
const (
	// DefaultHubNamespace is where the hub keeps everything clusters share.
	DefaultHubNamespace = "octopus-hub"

	// SystemNamespace is where Octopus runs inside each member cluster.
	SystemNamespace = "octopus-system"
)

// Objects in a member cluster's SystemNamespace.
const (
	// CredentialSecretName is the Secret holding the cluster's own hub credential: written by
	// join, read by the controller and the gateway, deleted by leave.
	CredentialSecretName = "octopus-hub"

	// ControllerLeaseName is the leader-election Lease of the controller's replicas.
	ControllerLeaseName = "octopus-controller"

	// GatewayLeaseName is the leader-election Lease of the cluster's gateways. Its holder is
	// the active gateway's node name, which the route agents route through.
	GatewayLeaseName = "octopus-gateway"

	// GatewayConfigMapName is the ConfigMap where the active gateway mirrors the remote
	// clusters' CIDRs for the route agents.
	GatewayConfigMapName = "octopus-gateway"

	// GatewayConfigMapGatewayKey is the key of that ConfigMap naming the node of the active
	// gateway that wrote it, once its tunnels were up and its Peer published: the node that
	// forwards, so the route agents route through it and the ovnmaster puts the gateway's OVN
	// port on its chassis (a new Lease holder is not forwarding yet: make-before-break). A
	// gateway of an earlier version wrote no key; readers then fall back to the Lease holder.
	GatewayConfigMapGatewayKey = "gateway"
)

// Objects in the hub namespace.
const (
	// HubGatewayLeaseName is the Lease that elects the hub's active gateway (the hub topology).
	HubGatewayLeaseName = "octopus-hub-gateway"

	// HubGatewayServiceAccount is the identity of the hub's gateway, made by hub deploy and
	// bound to the Role of the same name.
	HubGatewayServiceAccount = "octopus-hub-gateway"

	// ClusterCredentialRole is the Role every cluster's ServiceAccount is bound to: made by hub
	// deploy, bound by join. It is deliberately coarse; the hub's ownership admission policy
	// narrows it to the cluster's own objects.
	ClusterCredentialRole = "octopus-cluster"

	// ClusterServiceAccountPrefix starts the name of every cluster's ServiceAccount. The hub's
	// admission policies derive the caller's cluster ID from it, so it is part of the security
	// boundary.
	ClusterServiceAccountPrefix = "cluster-"

	// HubPeerName is the name and clusterID of the hub gateway's Peer. Join refuses it as a
	// cluster ID, and the hub's admission policy refuses hub-role Peers from cluster
	// credentials.
	HubPeerName = "hub"
)

// ReservedClusterIDs are the names of the hub's own objects that a cluster's ID would collide
// with: HubPeerName (the hub gateway's Peer) and HubGatewayLeaseName (the hub gateway's
// election Lease and ServiceAccount; a cluster's heartbeat Lease is named after its ID). Join,
// the CRDs' CEL rules (which repeat them as literals) and the hub's join policy refuse them.
var ReservedClusterIDs = []string{HubPeerName, HubGatewayLeaseName}

// ClusterServiceAccount is the name of a cluster's ServiceAccount on the hub: its credential.
func ClusterServiceAccount(clusterID string) string { return ClusterServiceAccountPrefix + clusterID }

// HeartbeatLeaseName is the name of a cluster's heartbeat Lease in the hub namespace.
func HeartbeatLeaseName(clusterID string) string { return clusterID }

// GatewayExIpName is a GatewayExIp's name in member clusters, the prototype's
// "<gateway>-<cluster>", which a VpcNatTunnel's gatewayName and clusterId find.
func GatewayExIpName(gateway, clusterID string) string { return gateway + "-" + clusterID } //nolint:revive // the kind's name

// GatewayExIpHubName is a GatewayExIp's name on the hub, "<cluster>.<gateway>". Not the
// members' name: with '-' in cluster IDs and gateway names, "x-a-b" could be gateway x of
// cluster a-b or gateway x-a of cluster b, and the hub's ownership policy could not tell whose
// name it is. Cluster IDs hold no '.', so the prefix before the first '.' is the owner's ID,
// and the policy admits only the caller's (docs/hub-and-trust.md).
func GatewayExIpHubName(clusterID, gateway string) string { return clusterID + "." + gateway } //nolint:revive // the kind's name

// Labels.
const (
	// ClusterLabel marks every object a cluster writes to the hub with the writer's cluster ID.
	// The hub's admission policy only lets a cluster's credential touch objects carrying its own ID.
	ClusterLabel = "octopus.io/cluster"
)

// EndpointIPAnnotation on a gateway Node names the address other clusters' gateways tunnel to
// when it is neither of the Node's addresses (a NATed or second interface): a gateway DaemonSet
// has one set of flags for every node, so a per-node endpoint comes from the Node. The
// gateway's --endpoint-ip flag wins over it.
const EndpointIPAnnotation = "octopus.io/endpoint-ip"

// Labels and annotations of exported services on the hub. The MCS labels
// multicluster.kubernetes.io/service-name and multicluster.kubernetes.io/source-cluster name the
// service and its cluster; the namespace needs a label of its own because the hub keeps every
// namespace's exports in its one namespace.
const (
	// ServiceNamespaceLabel names the namespace of an exported service.
	ServiceNamespaceLabel = "octopus.io/service-namespace"

	// ExportCreatedAnnotation holds the creation time (RFC 3339) of the ServiceExport a record
	// was published for: where exports of one service conflict, the oldest wins (KEP-1645).
	ExportCreatedAnnotation = "octopus.io/export-created"
	// ExportedLabelsAnnotation and ExportedAnnotationsAnnotation hold, as JSON objects, the
	// ServiceExport's spec.exportedLabels and spec.exportedAnnotations. They are kept out of the
	// record's own metadata so that they can never collide with the labels the hub's admission
	// policy and the importers select on.
	ExportedLabelsAnnotation      = "octopus.io/exported-labels"
	ExportedAnnotationsAnnotation = "octopus.io/exported-annotations"

	// AddressingAnnotation names the addressing behind a service's endpoints where it is
	// secondary (the only value it takes): on an exporter's record on the hub, that its slices
	// hold the pods' secondary (net1) addresses, which only clusters on the secondary network
	// can reach; on a member's ServiceImport, that the import has no virtual IP and DNS
	// answers its name with the endpoints themselves (docs/architecture.md §6s, service
	// discovery). Absent means the routed primary network (direct or globalnet).
	AddressingAnnotation = "octopus.io/addressing"
)

// A member cluster's OVN-IC client certificate (issue 32): at join the member makes its key
// and a certificate request, and publishes the request in the hub namespace in a ConfigMap
// named InterconnectCSRName(cluster ID), labelled ClusterLabel (so the admission policy holds
// it to the writer's own ID) and InterconnectCSRLabel; the hub's signer
// (octopus-ovn ic-signer) signs it for the ID of that label and writes the certificate back.
const (
	InterconnectCSRLabel = "octopus.io/interconnect-csr"
	// InterconnectCSRKey holds the PEM certificate request; InterconnectCertKey the signed
	// certificate and InterconnectCAKey the interconnection CA's certificate, the only one the
	// member's ovn-ic trusts; InterconnectErrorKey why the signer refused.
	InterconnectCSRKey   = "csr.pem"
	InterconnectCertKey  = "tls.crt"
	InterconnectCAKey    = "ca.crt"
	InterconnectErrorKey = "error"
)

// InterconnectCSRName is the ConfigMap of a cluster's OVN-IC certificate request on the hub.
func InterconnectCSRName(clusterID string) string { return "interconnect-csr-" + clusterID }
