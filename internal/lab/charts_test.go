package lab_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/internal/release"
	"github.com/octopus-mcs/octopus/internal/version"
)

// checkMemberChart installs the member chart (charts/octopus-member) on a cluster of real nodes
// with gateway the only node labelled as a gateway, and checks that its pods run from the lab's
// Octopus image: the route agent on every node, the gateway on gateway only, both controller
// replicas; then uninstalls it and checks the pods are gone.
func checkMemberChart(ctx context.Context, t *testing.T, cs kubernetes.Interface, kubeconfig string, nodes []string, gateway string) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	label := []byte(`{"metadata":{"labels":{"octopus.io/gateway":"true"}}}`)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, gateway, types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := release.Install(ctx, cfg, release.Options{Chart: charts.Member, Namespace: v1alpha1.SystemNamespace, AppVersion: version.Version}); err != nil {
		t.Fatal(err)
	}
	running := func(app string) map[string]int {
		pods, err := cs.CoreV1().Pods(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + app})
		if err != nil {
			t.Fatal(err)
		}
		byNode := map[string]int{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				byNode[p.Spec.NodeName]++
			}
		}
		return byNode
	}
	var agents, gateways, controllers map[string]int
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		agents, gateways, controllers = running("octopus-route-agent"), running("octopus-gateway"), running("octopus-controller")
		n := 0
		for _, c := range controllers {
			n += c
		}
		return len(agents) == len(nodes) && len(gateways) == 1 && gateways[gateway] == 1 && n == 2, nil
	})
	if err != nil {
		t.Fatalf("the member chart's pods running by node: route agents %v, gateways %v, controllers %v; want a route agent on each of %v, one gateway on %s, 2 controllers",
			agents, gateways, controllers, nodes, gateway)
	}
	t.Logf("the member chart's pods ran %.1fs after install", time.Since(start).Seconds())
	if err := release.Uninstall(ctx, cfg, charts.Member, v1alpha1.SystemNamespace, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("the member chart's pods are still there after uninstall: %v", err)
	}
}
