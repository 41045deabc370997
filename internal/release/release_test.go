package release_test

import (
	"context"
	"errors"
	"io"
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
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/internal/release"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestChartsOnAnAPIServer runs against one real kube-apiserver: every object the charts
// render passes a server-side dry run, then Install, an upgrade and Uninstall of both charts
// leave the objects they should.
func TestChartsOnAnAPIServer(t *testing.T) {
	env := testenv.ControlPlanes(t, "a")
	cfg := env.Cluster("a").RESTConfig()
	c := testenv.Client(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t.Run("server-side dry run", func(t *testing.T) {
		for chart, ns := range map[string]string{charts.Hub: "octopus-hub", charts.Member: "octopus-system"} {
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			ch, err := charts.Load(chart, "v0.0.0-test")
			if err != nil {
				t.Fatal(err)
			}
			out, err := charts.Render(ch, ns, nil)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for tmpl, manifest := range out {
				for _, obj := range decode(t, manifest) {
					err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.DryRunAll, client.FieldOwner("octopus-test"), client.ForceOwnership)
					if err != nil {
						t.Errorf("%s: %s %s: %v", tmpl, obj.GetKind(), obj.GetName(), err)
					}
					n++
				}
			}
			t.Logf("%s: %d objects accepted", chart, n)
		}
		// The dry run wrote nothing.
		if err := c.Get(ctx, client.ObjectKey{Name: "clusters.octopus.io"}, &apiextensionsv1.CustomResourceDefinition{}); !apierrors.IsNotFound(err) {
			t.Errorf("after the dry run, CRD clusters.octopus.io: %v; want NotFound", err)
		}
	})

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
		if got := gw.Spec.Template.Spec.NodeSelector; len(got) != 1 || got["octopus.io/gateway"] != "true" {
			t.Errorf("gateway node selector %v; want octopus.io/gateway=true", got)
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

		for _, r := range []struct{ chart, ns string }{{charts.Member, "octopus-system"}, {charts.Hub, "octopus-hub"}} {
			if err := release.Uninstall(ctx, cfg, r.chart, r.ns, 2*time.Minute); err != nil {
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
}

func decode(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := d.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
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
