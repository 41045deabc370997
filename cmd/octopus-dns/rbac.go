package main

// What octopus-dns needs of its cluster, for the ClusterRole that hack/generate.sh generates
// from these markers into config/rbac/dns and render.DNS deploys: the crossdns plugin's
// informers (pkg/crossdns/kube.go) list and watch ServiceImports and the imported
// EndpointSlices in every namespace.
//
// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=serviceimports,verbs=list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;watch
