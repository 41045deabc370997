package nriplugin

// The NRI plugin's RBAC, generated into config/rbac/nri by `make generate` and installed by the
// member chart with secondaryNetwork.enabled: it watches the pods of its node, in any
// namespace, for the address the ovnmaster wrote (nodePods; a pod the watch has not seen yet
// is read with get). The API server cannot restrict a list or watch to one node's pods, but
// they tell nothing that get on every pod does not. It writes nothing: the
// reason a pod cannot start reaches it through containerd's error, in the kubelet's event.
//
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
