package e2e

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestChartJourney: `hub deploy --chart` and `join --agent charts` install the embedded charts
// as Helm releases (Helm's release Secrets, the objects with the values given with --set,
// octopus-dns among them), and `leave` uninstalls the member's. The control planes have no nodes, so the components' pods
// do not run here; the lab's real nodes run them.
func TestChartJourney(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east")
	u := user{t: t, state: t.TempDir()}
	kc := func(name string) string { return env.Cluster(name).Kubeconfig }
	brokerInfo := filepath.Join(t.TempDir(), "broker-info")
	hubClient := testenv.Client(t, env.Cluster("hub").RESTConfig())
	east := testenv.Client(t, env.Cluster("east").RESTConfig())
	ctx := t.Context()

	out := u.mustOctopus("hub", "deploy", "--chart", "--kubeconfig", kc("hub"), "--broker-info", brokerInfo)
	if !strings.Contains(out, "Chart octopus-hub installed in namespace octopus-hub (revision 1") {
		t.Errorf("hub deploy --chart did not install the chart:\n%s", out)
	}
	if releases := helmReleases(t, hubClient, v1alpha1.DefaultHubNamespace); !slices.Equal(releases, []string{"sh.helm.release.v1.octopus-hub.v1"}) {
		t.Errorf("Helm releases on the hub: %v", releases)
	}

	out = u.mustOctopus("join", brokerInfo, "--cluster-id", "east", "--kubeconfig", kc("east"),
		"--pod-cidr", env.Cluster("east").PodCIDR.String(), "--agent", "charts", "--set", "gateway.backend=vxlan")
	if !strings.Contains(out, "Chart octopus-member installed in namespace octopus-system (revision 1") {
		t.Errorf("join --agent charts did not install the chart:\n%s", out)
	}
	gw := &appsv1.DaemonSet{}
	if err := east.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: "octopus-gateway"}, gw); err != nil {
		t.Fatal(err)
	}
	if args := gw.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--backend=vxlan") {
		t.Errorf("the gateway's args %v lack --set gateway.backend=vxlan", args)
	}
	if err := east.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: "octopus-controller"}, &appsv1.Deployment{}); err != nil {
		t.Errorf("the controller's Deployment: %v", err)
	}
	// octopus-dns is the release's too (join leaves it to the chart), so uninstall removes it.
	dns := &appsv1.Deployment{}
	if err := east.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: "octopus-dns"}, dns); err != nil {
		t.Errorf("the octopus-dns Deployment: %v", err)
	} else if owner := dns.Annotations["meta.helm.sh/release-name"]; owner != "octopus-member" {
		t.Errorf("the octopus-dns Deployment belongs to release %q, want octopus-member", owner)
	}

	u.mustOctopus("leave", "--kubeconfig", kc("east"))
	if err := east.Get(ctx, client.ObjectKey{Name: v1alpha1.SystemNamespace}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("after leave, namespace %s: %v; want NotFound", v1alpha1.SystemNamespace, err)
	}
	for _, role := range []string{"octopus-gateway", "octopus-dns"} {
		if err := east.Get(ctx, client.ObjectKey{Name: role}, &rbacv1.ClusterRole{}); err == nil {
			t.Errorf("after leave, ClusterRole %s is still there", role)
		}
	}
}

// helmReleases lists the names of Helm's release Secrets in namespace.
func helmReleases(t *testing.T, c client.Client, namespace string) []string {
	t.Helper()
	var secrets corev1.SecretList
	if err := c.List(t.Context(), &secrets, client.InNamespace(namespace), client.MatchingLabels{"owner": "helm"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range secrets.Items {
		names = append(names, s.Name)
	}
	return names
}
