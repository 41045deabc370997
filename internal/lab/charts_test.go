package lab_test

import (
	"context"
	"testing"
	"time"

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
// with gateway the only node labelled as a gateway, and checks where the kubelets got its pods:
// the route agent on every node, the gateway on gateway only, both controller replicas, each
// asking for the project's image of this version; then uninstalls it and checks the pods are
// gone. That the pods run needs the project's image in the lab's catalog, which it has only
// when the agent binary's directory holds every binary (internal/lab/realnodes.go), as in
// `lab up` from bin/ but not in TestRealNodes, whose agent is built alone.
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
	image := "ghcr.io/octopus-mcs/octopus:" + version.Version
	scheduled := func(app string) map[string]int {
		pods, err := cs.CoreV1().Pods(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + app})
		if err != nil {
			t.Fatal(err)
		}
		byNode := map[string]int{}
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" {
				continue
			}
			byNode[p.Spec.NodeName]++
			if got := p.Spec.Containers[0].Image; got != image {
				t.Errorf("pod %s runs %s, want %s", p.Name, got, image)
			}
		}
		return byNode
	}
	var agents, gateways, controllers map[string]int
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		agents, gateways, controllers = scheduled("octopus-route-agent"), scheduled("octopus-gateway"), scheduled("octopus-controller")
		n := 0
		for _, c := range controllers {
			n += c
		}
		return len(agents) == len(nodes) && len(gateways) == 1 && gateways[gateway] == 1 && n == 2, nil
	})
	if err != nil {
		t.Fatalf("the member chart's pods by node: route agents %v, gateways %v, controllers %v; want a route agent on each of %v, one gateway on %s, 2 controllers",
			agents, gateways, controllers, nodes, gateway)
	}
	t.Logf("the member chart's pods were on their nodes %.1fs after install", time.Since(start).Seconds())
	if err := release.Uninstall(ctx, cfg, charts.Member, v1alpha1.SystemNamespace, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		// octopus-dns, which the lab's join deployed, stays.
		pods, err := cs.CoreV1().Pods(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name in (octopus-controller,octopus-gateway,octopus-route-agent)",
		})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("the member chart's pods are still there after uninstall: %v", err)
	}
}
