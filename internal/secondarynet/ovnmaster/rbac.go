package ovnmaster

// What the ovnmaster needs of its member cluster, for the Role that hack/generate.sh generates
// from these markers into config/rbac/ovnmaster, which the member chart installs with
// secondaryNetwork.enabled.
//
// The pods: watched, and annotated with their address or why they have none (merge patches).
// The events telling why (events.k8s.io). Its own leader election (LeaderElectionID, in the
// default --leader-election-namespace): the Lease is created unnamed (a create carries no name
// to authorize), then read and updated by name. The gateway's ConfigMap and election Lease,
// read and watched by name only (the cache lists each with a metadata.name field selector): the
// node the ConfigMap names, else the Lease's holder, is the chassis of the gateway's port.
// client-go's leader election records "became leader" and "stopped leading" as core events on
// its Lease, in that namespace. The VPCs (vpc.go): Vpcs watched, updated to add and remove
// their finalizer, their status patched; the VpcNatTunnels and VpcDnsForwards watched, since one
// naming a deleted Vpc keeps it.
//
// +kubebuilder:rbac:groups=octopus.io,resources=vpcs,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=octopus.io,resources=vpcs/status,verbs=patch
// +kubebuilder:rbac:groups=octopus.io,resources=vpcs/finalizers,verbs=update
// +kubebuilder:rbac:groups=octopus.io,resources=vpcnattunnels;vpcdnsforwards,verbs=get;list;watch
// +kubebuilder:rbac:groups=octopus.io,resources=globalingressips;globalegressips,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",namespace=octopus-system,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=octopus-system,resources=leases,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=octopus-system,resources=leases,resourceNames=octopus-ovnmaster,verbs=get;update
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=octopus-system,resources=leases,resourceNames=octopus-gateway,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=octopus-system,resources=configmaps,resourceNames=octopus-gateway,verbs=get;list;watch
