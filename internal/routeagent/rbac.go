package routeagent

// What the route agent needs of its member cluster, for the Role that hack/generate.sh
// generates from these markers into config/rbac/route-agent: its cache (agent.go) lists and
// watches the gateway's Lease and ConfigMap by name, and every Node (the Lease holder's
// address). It reads nothing else and writes nothing.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=octopus-system,resources=leases,resourceNames=octopus-gateway,verbs=list;watch
// +kubebuilder:rbac:groups="",namespace=octopus-system,resources=configmaps,resourceNames=octopus-gateway,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch
