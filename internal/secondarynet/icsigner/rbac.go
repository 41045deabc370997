package icsigner

// The signer reads the certificate requests and writes the certificates into them, in the hub
// namespace only (render.Interconnect binds the Role there).
//
// +kubebuilder:rbac:groups="",namespace=octopus-hub,resources=configmaps,verbs=get;list;watch;update
