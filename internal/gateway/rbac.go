package gateway

// What a member cluster's gateway needs of its own cluster, for the Role that
// hack/generate.sh generates from these markers into config/rbac/gateway. (The hub's gateway
// runs against the hub with the Role render.Hub makes; its hub access is not listed here.)
// The hub credential's Secret is hubaccess's marker.
//
// The election (client-go's leader election and the fast takeover, takeover.go): the Lease is
// created unnamed (a create carries no name to authorize), then read, watched by name and
// updated. The node of this gateway and of the Lease holder (their addresses, the pod CIDR).
// The ConfigMap mirroring the remote subnets for the route agents, written by server-side
// apply: a patch by name, and a create for the first apply, which makes it.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=octopus-system,resources=leases,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=octopus-system,resources=leases,resourceNames=octopus-gateway,verbs=get;list;watch;update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:groups="",namespace=octopus-system,resources=configmaps,verbs=create
// +kubebuilder:rbac:groups="",namespace=octopus-system,resources=configmaps,resourceNames=octopus-gateway,verbs=patch
