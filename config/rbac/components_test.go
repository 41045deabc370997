package rbac_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/rbac"
	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/datapath/ingressfilter"
	"github.com/octopus-mcs/octopus/internal/datapath/route"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
	"github.com/octopus-mcs/octopus/internal/gateway"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/routeagent"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestComponentsRunWithTheirRoles runs the controller, the gateway and the route agent against a
// joined member cluster, each as a ServiceAccount bound to nothing but its generated RBAC
// (config/rbac), and checks that each does its job and that no request of theirs was refused:
// a marker missing for a request a component makes fails it.
func TestComponentsRunWithTheirRoles(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two control planes")
	}
	var logs testenv.Logs
	logf.SetLogger(logs.Logger())
	klog.SetLogger(logs.Logger()) // client-go's leader election and event broadcaster
	env := testenv.ControlPlanes(t, "hub", "east")
	hubCfg, eastCfg := env.Cluster("hub").RESTConfig(), env.Cluster("east").RESTConfig()
	info, err := hub.Deploy(t.Context(), hubCfg, hub.DeployOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Join(t.Context(), eastCfg, cluster.JoinOptions{BrokerInfo: info, ClusterID: "east",
		PodCIDRs: []string{env.Cluster("east").PodCIDR.String()}}); err != nil {
		t.Fatal(err)
	}
	hubAdmin, east := testenv.Client(t, hubCfg), testenv.Client(t, eastCfg)
	testenv.AddNode(t, east, "gw1", "192.0.2.11", "10.1.0.0/24")
	testenv.AddNode(t, east, "worker1", "192.0.2.12", "10.1.1.0/24")
	checkNothingForbidden := func(t *testing.T) {
		t.Helper()
		if lines := logs.Matching("forbidden"); len(lines) > 0 {
			t.Errorf("requests refused:\n%s", strings.Join(lines, "\n"))
		}
	}

	t.Run(rbac.RouteAgent, func(t *testing.T) {
		cfg := asComponent(t, east, eastCfg, rbac.RouteAgent)
		// What the active gateway writes, written here by the admin: the gateway's own turn
		// comes next.
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayLeaseName},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("gw1")}}
		cm := routeagent.SubnetsConfigMap([]netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")})
		for _, obj := range []client.Object{lease, cm} {
			if err := east.Create(t.Context(), obj); err != nil {
				t.Fatal(err)
			}
		}
		routes := &fakeRoutes{}
		stop := start(t, func(ctx context.Context) error {
			return routeagent.Run(ctx, routeagent.Options{Member: cfg, NodeName: "worker1", Routes: routes, Log: logs.Logger()})
		})
		want := []route.Route{{Dst: netip.MustParsePrefix("10.2.0.0/16"), Via: netip.MustParseAddr("192.0.2.11")}}
		testenv.Eventually(t, time.Minute, "the route agent routes the remote subnet via the active gateway", func() error {
			if got := routes.get(); !slices.Equal(got, want) {
				return fmt.Errorf("routes %v, want %v", got, want)
			}
			return nil
		})
		stop()
		checkNothingForbidden(t)
		for _, obj := range []client.Object{lease, cm} {
			if err := east.Delete(t.Context(), obj); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run(rbac.Gateway, func(t *testing.T) {
		cfg := asComponent(t, east, eastCfg, rbac.Gateway)
		stop := start(t, func(ctx context.Context) error {
			return gateway.Run(ctx, gateway.Options{
				Member: cfg, NodeName: "gw1", Backend: v1alpha1.BackendWireGuard, Device: "og-rbac",
				LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 300 * time.Millisecond,
				StatusInterval: 300 * time.Millisecond, LivenessPort: 4501,
				NewDriver:     func(string, tunnel.Options) (tunnel.Driver, error) { return fakeDriver{}, nil },
				AddressDevice: func(string, netip.Addr) error { return nil },
				// The filter's nftables table would land in the test host's namespace.
				NewIngressFilter: func() (gateway.IngressWriter, error) { return noFilter{}, nil },
				Log:              logs.Logger(),
			})
		})
		testenv.Eventually(t, time.Minute, "the gateway holds its Lease, publishes its Peer and mirrors the subnets", func() error {
			l := &coordinationv1.Lease{}
			if err := east.Get(t.Context(), client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayLeaseName}, l); err != nil {
				return err
			}
			if ptr.Deref(l.Spec.HolderIdentity, "") != "gw1" {
				return fmt.Errorf("Lease held by %q", ptr.Deref(l.Spec.HolderIdentity, ""))
			}
			p := &v1alpha1.Peer{}
			if err := hubAdmin.Get(t.Context(), client.ObjectKey{Namespace: info.Namespace, Name: "east"}, p); err != nil {
				return err
			}
			if p.Spec.Hostname != "gw1" || p.Status.Driver != (fakeDriver{}).Name() {
				return fmt.Errorf("Peer %+v, status %+v", p.Spec, p.Status)
			}
			return east.Get(t.Context(), client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayConfigMapName}, &corev1.ConfigMap{})
		})
		stop()
		checkNothingForbidden(t)
	})

	t.Run(rbac.Controller, func(t *testing.T) {
		cfg := asComponent(t, east, eastCfg, rbac.Controller)
		stop := start(t, func(ctx context.Context) error {
			return agent.RunController(ctx, agent.ControllerOptions{
				Member: cfg, LeaderElection: true, HeartbeatInterval: 200 * time.Millisecond, LeaseDuration: 2 * time.Second,
				HealthProbeBindAddress: "0", MetricsBindAddress: "0", PprofBindAddress: "0", Identity: "controller-0",
			})
		})
		createExport(t, east)
		testenv.Eventually(t, time.Minute, "the controller heartbeats, exports the service and imports it back", func() error {
			cl := &v1alpha1.Cluster{}
			if err := hubAdmin.Get(t.Context(), client.ObjectKey{Namespace: info.Namespace, Name: "east"}, cl); err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(cl.Status.Conditions, v1alpha1.ClusterConditionAgentConnected) {
				return fmt.Errorf("Cluster conditions %+v", cl.Status.Conditions)
			}
			export := &mcsv1beta1.ServiceExport{}
			if err := east.Get(t.Context(), client.ObjectKey{Namespace: "shop", Name: "web"}, export); err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(export.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady)) {
				return fmt.Errorf("ServiceExport conditions %+v", export.Status.Conditions)
			}
			si := &mcsv1beta1.ServiceImport{}
			if err := east.Get(t.Context(), client.ObjectKey{Namespace: "shop", Name: "web"}, si); err != nil {
				return err
			}
			if len(si.Status.Clusters) != 1 || si.Status.Clusters[0].Cluster != "east" {
				return fmt.Errorf("ServiceImport status %+v", si.Status)
			}
			return nil
		})
		stop()
		checkNothingForbidden(t)
	})
}

// start runs a component until the returned stop is called, which waits for it to return and
// fails t if it returned an error.
func start(t *testing.T, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("the component ended with: %v", err)
		}
	}
}

// asComponent binds a new ServiceAccount of the member cluster to component's generated RBAC
// and returns a client configuration authenticated as it.
func asComponent(t *testing.T, admin client.Client, cfg *rest.Config, component string) *rest.Config {
	t.Helper()
	ctx := t.Context()
	roles, err := rbac.Load(component)
	if err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.SystemNamespace, Name: "octopus-" + component}}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}}
	objs := []client.Object{sa}
	// probe is something the last binding allows, to tell when the authorizer knows it.
	var probe authorizationv1.ResourceAttributes
	probeRule := func(namespace string, r rbacv1.PolicyRule) {
		probe = authorizationv1.ResourceAttributes{Namespace: namespace, Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: r.Resources[0]}
		if len(r.ResourceNames) > 0 {
			probe.Name = r.ResourceNames[0]
		}
	}
	if cr := roles.ClusterRole; cr != nil {
		objs = append(objs, cr, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr.Name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}, Subjects: subjects})
		probeRule("", cr.Rules[0])
	}
	for _, r := range roles.Roles {
		objs = append(objs, r, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name}, Subjects: subjects})
		probeRule(r.Namespace, r.Rules[0])
	}
	if err := kube.Apply(ctx, admin, objs...); err != nil {
		t.Fatal(err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}
	if err := admin.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	out := rest.AnonymousClientConfig(cfg)
	out.BearerToken = tr.Status.Token
	// The RBAC authorizer's cache of the new bindings may trail them by a moment.
	c := testenv.Client(t, out)
	testenv.Eventually(t, time.Minute, "the API server knows the new bindings", func() error {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &probe}}
		if err := c.Create(ctx, review); err != nil {
			return err
		}
		if !review.Status.Allowed {
			return fmt.Errorf("%+v not allowed yet: %s", probe, review.Status.Reason)
		}
		return nil
	})
	return out
}

func createExport(t *testing.T, c client.Client) {
	t.Helper()
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}},
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}},
	} {
		if err := c.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeRoutes records what the route agent applies.
type fakeRoutes struct {
	mu      sync.Mutex
	applied []route.Route
}

func (f *fakeRoutes) Apply(desired []route.Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = slices.Clone(desired)
	return nil
}

func (f *fakeRoutes) get() []route.Route {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.applied)
}

// fakeDriver is a tunnel driver that carries nothing: the test is about the Kubernetes side.
type fakeDriver struct{}

// noFilter is a gateway.IngressWriter that writes nothing.
type noFilter struct{}

func (noFilter) Apply(context.Context, ingressfilter.State) error { return nil }
func (noFilter) Delete(context.Context) error                     { return nil }

var _ tunnel.Driver = fakeDriver{}

func (fakeDriver) Name() string { return "wireguard-go" }
func (fakeDriver) PublicKey() string {
	return base64.StdEncoding.EncodeToString(make([]byte, 32))
}
func (fakeDriver) Apply(context.Context, tunnel.Config) error { return nil }
func (fakeDriver) Stats() ([]tunnel.PeerStats, error)         { return nil, nil }
func (fakeDriver) Close() error                               { return nil }
