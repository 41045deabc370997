package v1alpha1

// Well-known labels and names shared by the hub, the agents and the CLI.
const (
	// ClusterLabel marks every object a cluster writes to the hub with the writer's cluster ID.
	// The hub's admission policy only lets a cluster's credential touch objects carrying its own ID.
	ClusterLabel = "octopus.io/cluster"

	// DefaultHubNamespace is where the hub keeps everything clusters share.
	DefaultHubNamespace = "octopus-hub"

	// SystemNamespace is where Octopus runs inside each member cluster.
	SystemNamespace = "octopus-system"
)
