// Package gateway is the active gateway of a member cluster: elected by a Lease, it publishes
// the cluster's Peer on the hub, watches the other clusters' Peers, drives the tunnel driver
// to the desired configuration, mirrors the remote CIDRs for the route agents and reports the
// connections it sees in its Peer's status.
//
// The election (election.go, with the fast takeover of takeover.go) and the active term
// (active.go, a reconciler of the hub's Peers and Clusters) know nothing of each other; Run
// (gateway.go) wires them. Compute (desired.go) and BuildStatus (status.go) are pure.
package gateway

// Condition types of a Peer's status, written by its gateway.
const (
	// ConditionReady is True while the tunnel configuration for every accepted Peer is applied.
	ConditionReady = "Ready"
	// ConditionPeersAccepted is False while some remote Peers are refused (see the message).
	ConditionPeersAccepted = "PeersAccepted"
	// ConditionSubnetsAccepted is False while subnets of accepted Peers are left out because
	// they lie outside what the hub allocated to their cluster (the message names them).
	ConditionSubnetsAccepted = "SubnetsAccepted"
)

// Reasons of the conditions and of refused connections.
const (
	ReasonApplied            = "Applied"
	ReasonApplyFailed        = "ApplyFailed"
	ReasonAllAccepted        = "AllAccepted"
	ReasonOverlappingSubnets = "OverlappingSubnets"
	ReasonBackendMismatch    = "BackendMismatch"
	ReasonInvalidPeer        = "InvalidPeer"
	// ReasonAddressingMismatch: one of the two clusters uses secondary addressing and the
	// other does not, so their pods are on networks that cannot reach each other.
	ReasonAddressingMismatch = "AddressingMismatch"
	// ReasonNoHubGateway: the Peer is reached through the hub's gateway (one of the two
	// clusters uses the hub topology), but the hub has published no gateway Peer.
	ReasonNoHubGateway = "NoHubGateway"
	ReasonPeersRefused = "PeersRefused"
	// ReasonDuplicatePeer: a second Peer with a cluster ID, public key or vxlan endpoint
	// address that an older Peer already has.
	ReasonDuplicatePeer = "DuplicatePeer"
	// ReasonSubnetsNotAllocated: a Peer advertises subnets outside its cluster's allocation.
	ReasonSubnetsNotAllocated = "SubnetsNotAllocated"
	ReasonAllSubnetsAccepted  = "AllAccepted"
	// ReasonNotRegistered: a member Peer whose cluster has no Cluster on the hub (never
	// joined, or revoked).
	ReasonNotRegistered = "NotRegistered"
	// ReasonSilent: the Peer's cluster stopped heartbeating longer than the silent-cluster
	// TTL ago.
	ReasonSilent = "Silent"
)
