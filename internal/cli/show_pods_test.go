package cli

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

// TestShowPodsSecondaryAddress: a pod on the secondary network shows its net1 address and MAC,
// one the ovnmaster refused shows why, one off the network "-"; other attachments in the
// network-status annotation (Multus's) are not taken for ours.
func TestShowPodsSecondaryAddress(t *testing.T) {
	status, err := podnet.Set(`[{"name":"default/macvlan","interface":"net2","ips":["192.168.1.5"]}]`,
		&podnet.Status{Name: podnet.NetworkName, Interface: "net1", IPs: []string{"10.112.0.5"}, MAC: "0a:58:0a:70:00:05"})
	if err != nil {
		t.Fatal(err)
	}
	pod := func(name string, annotations map[string]string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Annotations: annotations},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.7"}}
	}
	rows := podRows([]corev1.Pod{
		pod("web", map[string]string{podnet.NetworkStatusAnnotation: status}),
		pod("refused", map[string]string{podnet.ErrorAnnotation: "10.9.9.9 is not in 10.112.0.0/16"}),
		pod("multus-only", map[string]string{podnet.NetworkStatusAnnotation: `[{"name":"default/macvlan","ips":["192.168.1.6"]}]`}),
	})
	var b strings.Builder
	if err := renderPods(&b, rows); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"web":         {"10.112.0.5", "0a:58:0a:70:00:05"},
		"refused":     {"error: 10.9.9.9 is not in 10.112.0.0/16", "-"},
		"multus-only": {"-", "-"},
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "NET1 IP") {
		t.Fatalf("output:\n%s", b.String())
	}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		w, ok := want[f[1]]
		if !ok {
			t.Fatalf("unexpected row %q", line)
		}
		if !strings.Contains(line, w[0]) || !strings.HasSuffix(line, w[1]) {
			t.Errorf("row %q, want net1 %q and MAC %q", line, w[0], w[1])
		}
	}
}
