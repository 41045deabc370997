package icmaster

// What the icmaster needs of its member cluster, for the Role hack/generate.sh is to generate from
// these markers once the member chart runs `octopus-ovn ic` (not yet wired: see
// docs/secondary-network.md, Interconnection). The one ConfigMap, ovn-ic-config in kube-system,
// read and watched by name (the cache lists it with a metadata.name field selector) and
// annotated with the outcome (a merge patch); the events on it (events.k8s.io); its own leader
// election (LeaderElectionID), the Lease created unnamed, then read and updated by name, with
// client-go's core events on it.
//
// +kubebuilder:rbac:groups="",namespace=kube-system,resources=configmaps,resourceNames=ovn-ic-config,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,namespace=kube-system,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",namespace=octopus-system,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=octopus-system,resources=leases,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=octopus-system,resources=leases,resourceNames=octopus-icmaster,verbs=get;update
