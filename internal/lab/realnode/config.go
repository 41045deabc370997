package realnode

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/octopus-mcs/octopus/internal/lab/cni"
)

// Paths inside a node's mount namespace. A kubelet and containerd hard-code these (the
// kubelet's device-plugin socket, /var/log/containers; the shims' sockets and runc's root
// under /run/containerd; the CNI plugins' cache under /var/lib/cni), so every node gets its
// own directories bind-mounted there (see mounts) instead of sharing the host's.
const (
	kubeletRootPath   = "/var/lib/kubelet"
	cniStatePath      = "/var/lib/cni"
	containerdRunPath = "/run/containerd"
	containerLogsPath = "/var/log/containers"
	podLogsPath       = "/var/log/pods"
	// ovsRunPath is Open vSwitch's directory (the member chart's secondaryNetwork.node.ovsDir):
	// the OVN node pod's database and sockets, which the NRI plugin's pod uses too; a node's
	// own, as on a machine of its own.
	ovsRunPath = "/run/openvswitch"

	containerdSocket = containerdRunPath + "/containerd.sock"
	// nriSocket is containerd's NRI socket, where NRI plugins register; outside the node's
	// namespace it is NRISocket.
	nriSocket = containerdRunPath + "/nri.sock"
)

// containerdConfig is the node's containerd configuration (format version 3, containerd 2.x).
type containerdConfig struct {
	// Root holds images and snapshots (a directory of the node's).
	Root string
	// Cgroup is the cgroup (a path in every v1 hierarchy) containerd moves itself into at
	// start; the shims it starts stay there, so `lab down` finds them (see cgroup.go).
	Cgroup string
	// CNIConfDir holds the CNI network configuration (ConfigureNetwork); CNIBinDirs the
	// plugins, in the order containerd looks for them.
	CNIConfDir string
	CNIBinDirs []string
	// Runc is the runc binary.
	Runc string
	// NRIPluginDir holds NRI plugins containerd starts itself (none in the lab: plugins
	// connect to the socket).
	NRIPluginDir, NRIConfigDir string
	// RegistryConfigDir holds a hosts.toml per registry (images.HostsTOML).
	RegistryConfigDir string
}

// render returns the TOML text. Strings are quoted by strconv.Quote, whose escapes TOML
// basic strings accept for the paths the lab makes.
func (c containerdConfig) render() string {
	q := strconv.Quote
	return fmt.Sprintf(`version = 3
root = %[1]s
state = %[2]s

[grpc]
  address = %[3]s

[ttrpc]
  address = %[4]s

[cgroup]
  path = %[5]s

[plugins."io.containerd.cri.v1.runtime"]
  # The host lacks CAP_SYS_RESOURCE in the bounding set, so runc cannot lower a container's
  # oom_score_adj below containerd's own: it fails with "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  # Pod network namespaces under the node's /run/containerd, never in the host's /run/netns.
  netns_mounts_under_state_dir = true
  enable_selinux = false

  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"

    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = %[6]s
        SystemdCgroup = false

  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[7]s]
    conf_dir = %[8]s
    max_conf_num = 1

[plugins."io.containerd.cri.v1.images".registry]
  # The lab's registry stands in for every registry its images name.
  config_path = %[12]s

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = %[9]s
  plugin_path = %[10]s
  plugin_config_path = %[11]s
`, q(c.Root), q(containerdRunPath), q(containerdSocket), q(containerdSocket+".ttrpc"), q(c.Cgroup),
		q(c.Runc), quoteList(c.CNIBinDirs), q(c.CNIConfDir), q(nriSocket), q(c.NRIPluginDir), q(c.NRIConfigDir),
		q(c.RegistryConfigDir))
}

// quoteList renders a TOML array of strings.
func quoteList(items []string) string {
	quoted := make([]string, len(items))
	for i, it := range items {
		quoted[i] = strconv.Quote(it)
	}
	return strings.Join(quoted, ", ")
}

// kubeletConfig is the node's KubeletConfiguration.
type kubeletConfig struct {
	// Address is the node's InternalIP: the kubelet API listens there only.
	Address netip.Addr
	// ClientCAFile verifies the API server's client certificate (exec, logs, port-forward);
	// TLSCertFile and TLSKeyFile are the serving certificate, signed by the cluster CA.
	ClientCAFile, TLSCertFile, TLSKeyFile string
	// CgroupRoot is the node's cgroup (cgroup.go): the kubelet puts kubepods under it.
	CgroupRoot string
	// ClusterDNS are the kube-dns Service's addresses, one per family of a dual-stack cluster.
	ClusterDNS []netip.Addr
}

// render returns the KubeletConfiguration as JSON, which the kubelet reads as YAML.
func (c kubeletConfig) render() ([]byte, error) {
	cfg := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		// The machines the lab runs on have cgroup v1, which kubelet 1.35+ refuses by default.
		"failCgroupV1":      false,
		"cgroupDriver":      "cgroupfs",
		"cgroupRoot":        c.CgroupRoot,
		"cgroupsPerQOS":     true,
		"address":           c.Address.String(),
		"port":              KubeletPort,
		"readOnlyPort":      0,
		"healthzPort":       0,
		"tlsCertFile":       c.TLSCertFile,
		"tlsPrivateKeyFile": c.TLSKeyFile,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": c.ClientCAFile},
		},
		"authorization":            map[string]any{"mode": "Webhook"},
		"containerRuntimeEndpoint": "unix://" + containerdSocket,
		"clusterDNS":               addrStrings(c.ClusterDNS),
		"clusterDomain":            "cluster.local",
		"failSwapOn":               false,
		// Lab nodes share one machine's disk and memory with everything else on it: the
		// kubelet must neither evict pods nor delete images (there is no registry to pull
		// them again from) because the machine is busy.
		"evictionHard":                  map[string]string{"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
		"imageGCHighThresholdPercent":   100,
		"imageGCLowThresholdPercent":    99,
		"localStorageCapacityIsolation": false,
		// Pods start as soon as possible: the lab is measured by how fast it comes up.
		"serializeImagePulls":       false,
		"syncFrequency":             "10s",
		"fileCheckFrequency":        "10s",
		"nodeStatusUpdateFrequency": "10s",
		"maxPods":                   110,
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the kubelet configuration: %w", err)
	}
	return append(b, '\n'), nil
}

// KubeletPort is the kubelet's secure port, as on any node.
const KubeletPort = 10250

// BridgeName is the bridge of the node's pod veths with every CNI setup (cni.BridgeName).
const BridgeName = cni.BridgeName

// nodeLabelsArg renders --node-labels: sorted key=value pairs.
func nodeLabelsArg(labels map[string]string) string {
	pairs := make([]string, 0, len(labels))
	for k, v := range labels {
		pairs = append(pairs, k+"="+v)
	}
	slices.Sort(pairs)
	return strings.Join(pairs, ",")
}

// addrStrings formats addrs for the kubelet's configuration.
func addrStrings(addrs []netip.Addr) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out
}
