package nriplugin

// The NRI plugin's RBAC, generated into config/rbac/nri by `make generate` and installed by the
// member chart with secondaryNetwork.enabled: at each sandbox's start it reads the pod, in
// any namespace, for the address the ovnmaster wrote (apiPods). It writes nothing: the
// reason a pod cannot start reaches it through containerd's error, in the kubelet's event.
//
// +kubebuilder:rbac:groups="",resources=pods,verbs=get
