package routeagent

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/route"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestRoutesOnStop runs the agent against a real API server and stops it three times: while
// its DaemonSet and namespace stand (a restart: the routes stay), after its DaemonSet was
// deleted (helm uninstall: they are withdrawn) and while its namespace is being deleted
// (octopus leave: withdrawn).
func TestRoutesOnStop(t *testing.T) {
	env := testenv.ControlPlanes(t, "member")
	cfg := env.Cluster("member").RESTConfig()
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gw"}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.2"}}
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{
		&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.GatewayLeaseName, Namespace: v1alpha1.SystemNamespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("gw")},
		},
		SubnetsConfigMap([]netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}),
		routeAgentDaemonSet(),
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	want := []route.Route{{Dst: netip.MustParsePrefix("10.2.0.0/16"), Via: netip.MustParseAddr("198.51.100.2")}}

	// runUntilApplied runs the agent until it applied want, stops it and returns what it left.
	runUntilApplied := func(t *testing.T) []route.Route {
		t.Helper()
		fake := &fakeRoutes{}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- Run(runCtx, Options{Member: cfg, NodeName: "worker", Routes: fake, ResyncInterval: time.Hour,
				Log: testr.New(t), DaemonSet: "octopus-route-agent"})
		}()
		fake.await(t, "running", want)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
		fake.mu.Lock()
		defer fake.mu.Unlock()
		return fake.applied
	}

	t.Run("restart", func(t *testing.T) {
		if got := runUntilApplied(t); len(got) != 1 {
			t.Errorf("routes after a stop with the DaemonSet in place: %v, want %v kept", got, want)
		}
	})
	t.Run("helm uninstall", func(t *testing.T) {
		if err := c.Delete(ctx, routeAgentDaemonSet()); err != nil {
			t.Fatal(err)
		}
		if got := runUntilApplied(t); len(got) != 0 {
			t.Errorf("routes after a stop with the DaemonSet deleted: %v, want none", got)
		}
	})
	t.Run("octopus leave", func(t *testing.T) {
		if err := c.Create(ctx, routeAgentDaemonSet()); err != nil {
			t.Fatal(err)
		}
		if got := runUntilApplied(t); len(got) != 1 {
			t.Fatalf("routes after a stop with the DaemonSet back: %v, want %v kept", got, want)
		}
		// `octopus leave` deletes the namespace: terminating, then gone, both say removal.
		if err := c.Delete(ctx, ns); err != nil {
			t.Fatal(err)
		}
		fake := &fakeRoutes{}
		if why := removal(ctx, c, "octopus-route-agent"); why == "" {
			t.Errorf("removal with namespace %s deleted: none, want a reason", v1alpha1.SystemNamespace)
		}
		withdrawIfRemoved(Options{Member: cfg, Routes: fake, Log: testr.New(t), DaemonSet: "octopus-route-agent"})
		if fake.calls != 1 || len(fake.applied) != 0 {
			t.Errorf("withdrawIfRemoved with the namespace deleted: %d applies of %v, want one of no routes", fake.calls, fake.applied)
		}
	})
}

// routeAgentDaemonSet is a minimal DaemonSet under the chart's name.
func routeAgentDaemonSet() *appsv1.DaemonSet {
	labels := map[string]string{"app": "route-agent"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "octopus-route-agent", Namespace: v1alpha1.SystemNamespace},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "octopus"}}},
			},
		},
	}
}

// TestRemovalWithoutAccess: an agent stopped after `helm uninstall` removed its ServiceAccount
// (401) or its RBAC (403) withdraws its routes, since a restart never takes its credential
// away; an API server it cannot reach at all says nothing.
func TestRemovalWithoutAccess(t *testing.T) {
	env := testenv.ControlPlanes(t, "member")
	cfg := env.Cluster("member").RESTConfig()
	admin, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace}}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, routeAgentDaemonSet()); err != nil {
		t.Fatal(err)
	}
	if why := removal(ctx, admin, "octopus-route-agent"); why != "" {
		t.Fatalf("removal with access and everything in place: %q, want none", why)
	}
	unauthenticated := rest.AnonymousClientConfig(cfg)
	unauthenticated.BearerToken = "a-deleted-service-accounts-token"
	forbidden := rest.CopyConfig(cfg)
	forbidden.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:octopus-system:deleted"}
	unreachable := rest.CopyConfig(cfg)
	unreachable.Host = "https://127.0.0.1:1"
	unreachable.Timeout = 2 * time.Second
	for _, tc := range []struct {
		name    string
		cfg     *rest.Config
		removed bool
	}{
		{"unauthorized", unauthenticated, true},
		{"forbidden", forbidden, true},
		{"unreachable", unreachable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(tc.cfg, client.Options{Scheme: kube.Scheme, Mapper: admin.RESTMapper()})
			if err != nil {
				t.Fatal(err)
			}
			if why := removal(ctx, c, "octopus-route-agent"); (why != "") != tc.removed {
				t.Errorf("removal = %q, want a reason: %t", why, tc.removed)
			}
		})
	}
}
