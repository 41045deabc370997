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
)
