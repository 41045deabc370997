package diagnose

import (
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Names and one helper that other packages keep unexported today. They are collected here,
// and only here, so that each can be replaced by the owner's export in one edit:
//
//   - hubGatewayLeaseName: internal/gateway's HubLeaseName (the CLI must not link the gateway
//     and its tunnel drivers for one constant); v1alpha1.HubGatewayLeaseName once names live in
//     the API package.
//   - coreDNSConfigMap, corefileKey: internal/dnsconfig's coreDNSConfigMap and corefileKey.
//   - kubeProxyConfigMap, kubeProxyConfigKey, flagValue: what internal/cluster/discover.go
//     reads to discover the pod CIDR.
//
// TODO(lead): export these from their owners and delete this file.

const hubGatewayLeaseName = "octopus-hub-gateway"

var coreDNSConfigMap = client.ObjectKey{Namespace: "kube-system", Name: "coredns"}

const corefileKey = "Corefile"

var kubeProxyConfigMap = client.ObjectKey{Namespace: "kube-system", Name: "kube-proxy"}

const kubeProxyConfigKey = "config.conf"

// flagValue returns the value of the command-line flag name in args ("--name=v" or "--name v").
func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, found := strings.CutPrefix(a, name+"="); found {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
