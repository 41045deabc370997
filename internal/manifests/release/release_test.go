package release_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/internal/manifests/release"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestChartsOnAnAPIServer runs against one real kube-apiserver: Install, an upgrade and
// Uninstall of both charts leave the objects they should, then every object the charts render,
// with their default values and with the customised ones of charts/testdata/values, passes a
// server-side dry run with every Octopus CRD installed.
func TestChartsOnAnAPIServer(t *testing.T) {
	env := testenv.ControlPlanes(t, "a")
	cfg := env.Cluster("a").RESTConfig()
	c := testenv.Client(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	t.Run("install, upgrade, uninstall", func(t *testing.T) {
		rev, err := release.Install(ctx, cfg, release.Options{Chart: charts.Hub, Namespace: "octopus-hub", AppVersion: "v0.0.0-test"})
		if err != nil || rev != 1 {
			t.Fatalf("installing the hub chart: revision %d, %v", rev, err)
		}
		mustExist(t, c, &apiextensionsv1.CustomResourceDefinition{}, "", "clusters.octopus.io")
		mustExist(t, c, &rbacv1.Role{}, "octopus-hub", "octopus-cluster")

		member := release.Options{Chart: charts.Member, Namespace: "octopus-system", AppVersion: "v0.0.0-test"}
		if rev, err := release.Install(ctx, cfg, member); err != nil || rev != 1 {
			t.Fatalf("installing the member chart: revision %d, %v", rev, err)
		}
		dep := &appsv1.Deployment{}
		mustExist(t, c, dep, "octopus-system", "octopus-controller")
		if *dep.Spec.Replicas != 2 || dep.Spec.Template.Spec.Containers[0].Image != "ghcr.io/octopus-mcs/octopus:v0.0.0-test" {
			t.Errorf("controller: %d replicas of %s; want 2 of ghcr.io/octopus-mcs/octopus:v0.0.0-test", *dep.Spec.Replicas, dep.Spec.Template.Spec.Containers[0].Image)
		}
		gw := &appsv1.DaemonSet{}
		mustExist(t, c, gw, "octopus-system", "octopus-gateway")
		if got := gw.Spec.Template.Spec.NodeSelector; len(got) != 1 || got["node-restriction.kubernetes.io/octopus-gateway"] != "true" {
			t.Errorf("gateway node selector %v; want node-restriction.kubernetes.io/octopus-gateway=true", got)
		}
		mustExist(t, c, &appsv1.DaemonSet{}, "octopus-system", "octopus-route-agent")
		for _, sa := range []string{"octopus-controller", "octopus-gateway", "octopus-route-agent"} {
			mustExist(t, c, &corev1.ServiceAccount{}, "octopus-system", sa)
		}
		mustExist(t, c, &rbacv1.ClusterRole{}, "", "octopus-gateway")

		// An upgrade with a new setting rewrites the ConfigMap every component reads.
		member.Values = map[string]any{"config": map[string]any{"OCTOPUS_HEARTBEAT_INTERVAL": "5s"}}
		if rev, err := release.Install(ctx, cfg, member); err != nil || rev != 2 {
			t.Fatalf("upgrading the member chart: revision %d, %v", rev, err)
		}
		cm := &corev1.ConfigMap{}
		mustExist(t, c, cm, "octopus-system", "octopus-config")
		if cm.Data["OCTOPUS_HEARTBEAT_INTERVAL"] != "5s" {
			t.Errorf("after the upgrade, octopus-config has %v", cm.Data)
		}
		// Upgrade to a new image keeps the values given before (--reuse-values).
		if rev, err := release.Upgrade(ctx, cfg, release.Options{Chart: charts.Member, Namespace: "octopus-system", AppVersion: "v0.0.0-test",
			Values: map[string]any{"image": map[string]any{"tag": "v0.0.0-new"}}}); err != nil || rev != 3 {
			t.Fatalf("upgrading the member chart to a new image: revision %d, %v", rev, err)
		}
		mustExist(t, c, dep, "octopus-system", "octopus-controller")
		if got := dep.Spec.Template.Spec.Containers[0].Image; got != "ghcr.io/octopus-mcs/octopus:v0.0.0-new" {
			t.Errorf("after the image upgrade the controller runs %s, want ghcr.io/octopus-mcs/octopus:v0.0.0-new", got)
		}
		mustExist(t, c, cm, "octopus-system", "octopus-config")
		if cm.Data["OCTOPUS_HEARTBEAT_INTERVAL"] != "5s" {
			t.Errorf("the image upgrade dropped the earlier values: octopus-config has %v", cm.Data)
		}
		if _, err := release.Upgrade(ctx, cfg, release.Options{Chart: charts.Member, Namespace: "octopus-absent"}); err == nil {
			t.Error("upgrading a release that is not installed succeeded")
		}

		// A generous bound: the hub chart's CRDs go only once the API server's finalizer has
		// cleaned their (no) objects up, which took over 2 min once on a loaded CI machine.
		for _, r := range []struct{ chart, ns string }{{charts.Member, "octopus-system"}, {charts.Hub, "octopus-hub"}} {
			if err := release.Uninstall(ctx, cfg, r.chart, r.ns, 5*time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		mustBeGone(t, c, &appsv1.Deployment{}, "octopus-system", "octopus-controller")
		mustBeGone(t, c, &rbacv1.ClusterRole{}, "", "octopus-gateway")
		mustBeGone(t, c, &apiextensionsv1.CustomResourceDefinition{}, "", "clusters.octopus.io")
		// Uninstalling what is not installed is no error (a second `octopus leave`).
		if err := release.Uninstall(ctx, cfg, charts.Member, "octopus-system", time.Minute); err != nil {
			t.Errorf("uninstalling again: %v", err)
		}
	})

	// After the install, which would refuse to adopt CRDs installed without Helm.
	t.Run("server-side dry run", func(t *testing.T) {
		testenv.InstallCRDs(t, cfg)
		for _, tc := range []struct{ chart, namespace, values string }{
			{chart: charts.Hub, namespace: "octopus-hub"},
			{chart: charts.Hub, namespace: "octopus-hub", values: "hub-gateway.yaml"},
			{chart: charts.Hub, namespace: "octopus-hub", values: "hub-interconnect.yaml"},
			{chart: charts.Member, namespace: "octopus-system"},
			{chart: charts.Member, namespace: "octopus-system", values: "member-custom.yaml"},
			{chart: charts.Member, namespace: "octopus-system", values: "member-secondary.yaml"},
		} {
			t.Run(strings.TrimSuffix(tc.chart+" "+tc.values, " "), func(t *testing.T) {
				dryRun(ctx, t, c, tc.chart, tc.namespace, tc.values)
			})
		}
		// The dry run wrote nothing.
		mustBeGone(t, c, &appsv1.DaemonSet{}, "octopus-hub", "octopus-hub-gateway")
		mustBeGone(t, c, &appsv1.Deployment{}, "octopus-system", "octopus-controller")
		// And it validates: an object the API server would refuse is refused.
		bad := &unstructured.Unstructured{}
		bad.SetAPIVersion("apps/v1")
		bad.SetKind("DaemonSet")
		bad.SetNamespace("octopus-system")
		bad.SetName("octopus-invalid")
		bad.Object["spec"] = map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"a": "other"}}}}
		if err := applyDryRun(ctx, c, bad); !apierrors.IsInvalid(err) {
			t.Errorf("dry run of a DaemonSet whose selector does not match its pods: %v; want Invalid", err)
		}
	})
}

// dryRun creates, or updates where it exists (the CRDs), every object chart renders with the
// values of charts/testdata/values/<values> (none: the defaults), as a server-side dry run.
func dryRun(ctx context.Context, t *testing.T, c client.Client, chart, namespace, values string) {
	t.Helper()
	var vals map[string]any
	if values != "" {
		data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "charts", "testdata", "values", values))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &vals); err != nil {
			t.Fatal(err)
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ch, err := charts.Load(chart, "v0.0.0-test")
	if err != nil {
		t.Fatal(err)
	}
	out, err := charts.Render(ch, namespace, vals)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, tmpl := range slices.Sorted(maps.Keys(out)) {
		for _, obj := range testenv.Decode(t, out[tmpl]) {
			if err := applyDryRun(ctx, c, obj); err != nil {
				t.Errorf("%s: %s %s: %v", tmpl, obj.GetKind(), obj.GetName(), err)
			}
			kinds[obj.GetKind()]++
		}
	}
	t.Logf("accepted: %v", kinds)
}

func applyDryRun(ctx context.Context, c client.Client, obj *unstructured.Unstructured) error {
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.DryRunAll, client.FieldOwner("octopus-test"), client.ForceOwnership)
}

func mustExist(t *testing.T, c client.Client, obj client.Object, ns, name string) {
	t.Helper()
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		t.Errorf("%T %s/%s: %v", obj, ns, name, err)
	}
}

func mustBeGone(t *testing.T, c client.Client, obj client.Object, ns, name string) {
	t.Helper()
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj); !apierrors.IsNotFound(err) {
		t.Errorf("after uninstall, %T %s/%s: %v; want NotFound", obj, ns, name, err)
	}
}
