package realnode

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestContainerdConfig checks the settings a node's containerd cannot do without on the
// lab's machines and the paths that keep nodes apart.
func TestContainerdConfig(t *testing.T) {
	got := containerdConfig{
		Root: "/lab/nodes/n1/containerd", Cgroup: "/octopus-lab-abcd/n1/containerd",
		CNIConfDir: "/lab/nodes/n1/net.d", CNIBinDirs: []string{"/usr/lib/cni", "/cache/flannel/bin"}, Runc: "/usr/sbin/runc",
		NRIPluginDir: "/lab/nodes/n1/nri/plugins", NRIConfigDir: "/lab/nodes/n1/nri/conf",
		RegistryConfigDir: "/lab/nodes/n1/certs.d",
	}.render()
	for _, want := range []string{
		"version = 3\n",
		`root = "/lab/nodes/n1/containerd"`,
		`state = "/run/containerd"`,
		`address = "/run/containerd/containerd.sock"`,
		"[cgroup]\n  path = \"/octopus-lab-abcd/n1/containerd\"",
		"restrict_oom_score_adj = true",
		"netns_mounts_under_state_dir = true",
		`BinaryName = "/usr/sbin/runc"`,
		`bin_dirs = ["/usr/lib/cni", "/cache/flannel/bin"]`,
		`conf_dir = "/lab/nodes/n1/net.d"`,
		"[plugins.\"io.containerd.cri.v1.images\".registry]\n  # The lab's registry stands in for every registry its images name.\n  config_path = \"/lab/nodes/n1/certs.d\"",
		"[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false\n  socket_path = \"/run/containerd/nri.sock\"",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("containerd config lacks %q:\n%s", want, got)
		}
	}
}

func TestKubeletConfig(t *testing.T) {
	b, err := kubeletConfig{
		Address: netip.MustParseAddr("198.51.100.2"), ClientCAFile: "/pki/ca.crt", TLSCertFile: "/pki/k.crt", TLSKeyFile: "/pki/k.key",
		CgroupRoot: "/octopus-lab-abcd/n1", ClusterDNS: []netip.Addr{netip.MustParseAddr("10.97.0.10"), netip.MustParseAddr("2001:db8:97::a")},
	}.render()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{
		"kind":                     "KubeletConfiguration",
		"failCgroupV1":             false,
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               "/octopus-lab-abcd/n1",
		"address":                  "198.51.100.2",
		"port":                     float64(KubeletPort),
		"readOnlyPort":             float64(0),
		"tlsCertFile":              "/pki/k.crt",
		"containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
		// Both families' kube-dns addresses, the primary's first (dual-stack).
		"clusterDNS":    []any{"10.97.0.10", "2001:db8:97::a"},
		"authorization": map[string]any{"mode": "Webhook"},
		// No registry to pull a deleted image from again.
		"imageGCHighThresholdPercent": float64(100),
	} {
		if diff := cmp.Diff(want, got[key]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", key, diff)
		}
	}
	auth, _ := got["authentication"].(map[string]any)
	if x509, _ := auth["x509"].(map[string]any); x509["clientCAFile"] != "/pki/ca.crt" {
		t.Errorf("authentication = %v, want x509 with the cluster CA", auth)
	}
}

func TestNodeLabelsArg(t *testing.T) {
	if got := nodeLabelsArg(map[string]string{"b": "2", "a": "1"}); got != "a=1,b=2" {
		t.Errorf("nodeLabelsArg = %q", got)
	}
}

func TestCheckOutsideOverlays(t *testing.T) {
	for dir, ok := range map[string]bool{
		"/tmp/lab": true, "/root/.local/state/octopus/lab": true, "/var/library": true,
		"/var/lib/octopus/lab": false, "/run/lab": false, "/var/log": false,
	} {
		if err := checkOutsideOverlays(dir); (err == nil) != ok {
			t.Errorf("checkOutsideOverlays(%s) = %v", dir, err)
		}
	}
}
