package cni

import (
	"encoding/json"
	"fmt"
	"net/netip"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FlannelVXLANDevice is the VXLAN device flanneld makes on every node (VNI 1): pod traffic
// between nodes leaves through it.
const FlannelVXLANDevice = "flannel.1"

// FlannelGroup is the group of flanneld's client certificates, which FlannelRBAC binds.
const FlannelGroup = "octopus-lab:flannel"

// FlannelNetConf is flanneld's net-conf.json, as kube-flannel's ConfigMap has it: the
// cluster's pod range, of which the kube subnet manager takes each node's pod CIDR as the
// node's subnet, and the VXLAN backend (the lab's kernel has the vxlan module, not WireGuard).
// Its rules are nftables, like the lab's own tables in the node's namespace.
func FlannelNetConf(clusterPodCIDR netip.Prefix) ([]byte, error) {
	if !clusterPodCIDR.IsValid() || !clusterPodCIDR.Addr().Is4() {
		return nil, fmt.Errorf("flannel net-conf: want an IPv4 cluster pod CIDR, got %s", clusterPodCIDR)
	}
	b, err := json.MarshalIndent(map[string]any{
		"Network":        clusterPodCIDR.Masked().String(),
		"EnableNFTables": true,
		"Backend":        map[string]any{"Type": "vxlan"},
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding flannel's net-conf: %w", err)
	}
	return append(b, '\n'), nil
}

// FlanneldFiles are the paths flanneld is given.
type FlanneldFiles struct {
	// Kubeconfig authenticates flanneld to its cluster's API server (a client certificate
	// of FlannelGroup).
	Kubeconfig string
	// NetConf is FlannelNetConf's output.
	NetConf string
	// SubnetFile is where flanneld writes the node's subnet and MTU for the CNI plugin
	// (FlannelConfig's subnetFile).
	SubnetFile string
}

// FlanneldArgs are flanneld's arguments on a node whose cluster LAN interface is iface: the
// kube subnet manager (the node's pod CIDR from its Node, the peers' from theirs), without
// flanneld's masquerading, which the lab's own table in the node's namespace does. flanneld
// finds its Node by the NODE_NAME environment variable.
func FlanneldArgs(f FlanneldFiles, iface string) []string {
	return []string{
		"--kube-subnet-mgr",
		"--kubeconfig-file=" + f.Kubeconfig,
		"--net-config-path=" + f.NetConf,
		"--subnet-file=" + f.SubnetFile,
		"--iface=" + iface,
		"--ip-masq=false",
	}
}

// FlannelRBAC is what kube-flannel's manifest grants its ServiceAccount, granted to
// FlannelGroup instead: read the Nodes (each node's pod CIDR and flannel's annotations of its
// VXLAN endpoint) and write a Node's status (its own annotations).
func FlannelRBAC() (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	name := FlannelGroup
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: FlannelGroup}},
	}
	return role, binding
}
