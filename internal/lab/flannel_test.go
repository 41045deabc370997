package lab_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/octopus-mcs/octopus/internal/lab/cni"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/lab/realnode"
)

// checkFlannel checks, on cluster c of a lab brought up with `--cni flannel` (TestRealNodes's,
// for checkPods), that flannel, not the lab, networks the pods: each node's CNI configuration is the flannel
// plugin's, flanneld has annotated each Node with its VXLAN endpoint, and the echo pods, one
// on each node, reach each other over TCP with their own pod addresses, routed through
// flanneld's VXLAN device (the route to the peer pod and the device's packet counter say so).
func checkFlannel(ctx context.Context, t *testing.T, dir string, c labnet.ClusterNet, cs kubernetes.Interface, pods []xpod) {
	for _, n := range c.Nodes {
		b, err := os.ReadFile(filepath.Join(dir, realnode.NodesDir, n.Name, "net.d", cni.ConfigFile))
		if err != nil {
			t.Fatal(err)
		}
		var conf struct {
			Plugins []struct {
				Type string `json:"type"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal(b, &conf); err != nil || len(conf.Plugins) != 1 || conf.Plugins[0].Type != "flannel" {
			t.Errorf("CNI configuration of %s is not flannel's (%v):\n%s", n.Name, err, b)
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := node.Annotations["flannel.alpha.coreos.com/backend-type"]; got != "vxlan" {
			t.Errorf("node %s: flannel backend annotation %q, want vxlan (annotations %v)", n.Name, got, node.Annotations)
		}
	}

	before := vxlanTxPackets(t, c.Nodes[0].Netns)
	for _, pair := range [][2]int{{0, 1}, {1, 0}} {
		src, dst := pods[pair[0]], pods[pair[1]]
		if src.node == dst.node {
			t.Fatalf("pods %s and %s on one node %s", src.name, dst.name, src.node)
		}
		checkTCP(t, "pod -> pod across nodes", src, dst, 60*time.Second)
		// The source node sends the peer's pod traffic into flanneld's VXLAN device.
		out, err := exec.Command("ip", "-n", c.Nodes[pair[0]].Netns, "route", "get", dst.ip.String()).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "dev "+cni.FlannelVXLANDevice) {
			t.Errorf("route on %s to %s: %s (%v), want it through %s", src.node, dst.ip, out, err, cni.FlannelVXLANDevice)
		}
	}
	if after := vxlanTxPackets(t, c.Nodes[0].Netns); after <= before {
		t.Errorf("%s on %s sent %d packets before the pods talked and %d after", cni.FlannelVXLANDevice, c.Nodes[0].Name, before, after)
	}
}

// vxlanTxPackets reads the packets flanneld's VXLAN device in the node namespace netns sent.
func vxlanTxPackets(t *testing.T, netns string) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", netns, "cat", "/sys/class/net/"+cni.FlannelVXLANDevice+"/statistics/tx_packets").CombinedOutput()
	if err != nil {
		t.Fatalf("no %s in %s: %v: %s", cni.FlannelVXLANDevice, netns, err, out)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
