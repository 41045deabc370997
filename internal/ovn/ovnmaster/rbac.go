package ovnmaster

// The ovnmaster's RBAC, generated into config/rbac/ovnmaster by `make generate` and installed
// by the member chart with secondaryNetwork.enabled: it watches every pod on the network and
// patches its annotations (network-status, the error), tells a pod why it has no address with
// an event in the pod's namespace, and elects one replica through its Lease, which
// controller-runtime's leader election announces with a core event in octopus-system.
//
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=octopus-system,resources=leases,verbs=create
// +kubebuilder:rbac:groups="",namespace=octopus-system,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=octopus-system,resources=leases,resourceNames=octopus-ovnmaster,verbs=get;update
