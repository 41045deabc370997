package routeagent

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/route"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// fakeRoutes records what the agent applies.
type fakeRoutes struct {
	mu      sync.Mutex
	applied []route.Route
	calls   int
}

var _ Routes = (*fakeRoutes)(nil)

func (f *fakeRoutes) Apply(desired []route.Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = slices.Clone(desired)
	f.calls++
	return nil
}

func (f *fakeRoutes) await(t *testing.T, what string, want []route.Route) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		f.mu.Lock()
		got, calls := slices.Clone(f.applied), f.calls
		f.mu.Unlock()
		if calls > 0 && slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: routes = %v after %d applies, want %v", what, got, calls, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRunFollowsGatewayAndSubnets(t *testing.T) {
	env := testenv.ControlPlanes(t, "member")
	cfg := env.Cluster("member").RESTConfig()
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// node2 is dual-stack, its IPv6 address listed first: IPv6 CIDRs go via that one.
	addrs := map[string][]string{"node1": {"198.51.100.2"}, "node2": {"2001:db8:ff::3", "198.51.100.3"}, "node3": {"198.51.100.4"}}
	for name, ips := range addrs {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		// The node controller updates new Nodes too: retry on conflicts.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(n), n); err != nil {
				return err
			}
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}}
			for _, ip := range ips {
				n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
			}
			return c.Status().Update(ctx, n)
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	fake := &fakeRoutes{}
	done := make(chan error, 1)
	metricsListener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	healthListener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		done <- Run(ctx, Options{Member: cfg, NodeName: "node3", Routes: fake, ResyncInterval: time.Hour,
			Log: testr.New(t), MetricsListener: metricsListener, HealthListener: healthListener})
	}()
	// Not joined yet: no namespace, no Lease, no ConfigMap.
	fake.await(t, "before join", nil)

	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace}}); err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.GatewayLeaseName, Namespace: v1alpha1.SystemNamespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node1")},
	}
	if err := c.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	cm := SubnetsConfigMap([]netip.Prefix{netip.MustParsePrefix("10.2.0.0/16"), netip.MustParsePrefix("10.98.0.0/16")})
	cm.TypeMeta = metav1.TypeMeta{}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	via := func(ip string, cidrs ...string) []route.Route {
		var out []route.Route
		for _, s := range cidrs {
			out = append(out, route.Route{Dst: netip.MustParsePrefix(s), Via: netip.MustParseAddr(ip)})
		}
		return out
	}
	fake.await(t, "gateway node1 elected", via("198.51.100.2", "10.2.0.0/16", "10.98.0.0/16"))

	lease.Spec.HolderIdentity = ptr.To("node2")
	if err := c.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	fake.await(t, "failover to node2", via("198.51.100.3", "10.2.0.0/16", "10.98.0.0/16"))

	cm.Data[SubnetsKey] = "10.2.0.0/16\n10.3.0.0/16\n10.98.0.0/16\n2001:db8:3::/56"
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	fake.await(t, "a dual-stack cluster joined", append(via("198.51.100.3", "10.2.0.0/16", "10.3.0.0/16", "10.98.0.0/16"), via("2001:db8:ff::3", "2001:db8:3::/56")...))

	lease.Spec.HolderIdentity = ptr.To("node3")
	if err := c.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	fake.await(t, "this node became the gateway", nil)

	lease.Spec.HolderIdentity = ptr.To("node1")
	if err := c.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	// node1 has no IPv6 address: the IPv6 CIDR has no next hop there.
	fake.await(t, "back to the IPv4-only node1", via("198.51.100.2", "10.2.0.0/16", "10.3.0.0/16", "10.98.0.0/16"))
	// The kubelet's readiness probe finds the routes applied.
	if resp, err := http.Get("http://" + healthListener.Addr().String() + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /readyz with the routes applied: %v %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	// The metrics endpoint serves the route agent's metrics and its controller's.
	metrics := scrape(t, metricsListener.Addr().String())
	for _, want := range []string{"octopus_routeagent_routes 3\n", `controller_runtime_reconcile_total{controller="route-agent",result="requeue_after"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("GET /metrics: no %q in\n%s", want, metrics)
		}
	}

	if err := c.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	fake.await(t, "the cluster left (subnets gone)", nil)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// scrape GETs http://addr/metrics.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	body, err := testenv.Metrics(addr)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// failingRoutes fails every Apply.
type failingRoutes struct{}

func (failingRoutes) Apply([]route.Route) error {
	return errors.New("netlink: operation not permitted")
}

// TestReconcileCountsApplyFailures: a failed Apply, which the reconciler retries itself
// rather than returning to controller-runtime, is counted and makes the agent unready (its
// /readyz says why); a successful one sets the routes and makes it ready.
func TestReconcileCountsApplyFailures(t *testing.T) {
	c := fakeclient.NewClientBuilder().WithScheme(kube.Scheme).Build()
	read := func(m prometheus.Metric) float64 {
		d := &dto.Metric{}
		if err := m.Write(d); err != nil {
			t.Fatal(err)
		}
		if d.GetCounter() != nil {
			return d.GetCounter().GetValue()
		}
		return d.GetGauge().GetValue()
	}
	before := read(applyFailures)
	routesApplied.Set(7)
	h := newHealth()
	probe := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := probe("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not applied yet") {
		t.Errorf("/readyz before the first Apply: %d %q, want 503 saying the routes were not applied yet", code, body)
	}
	r := &reconciler{o: Options{NodeName: "node1", Routes: failingRoutes{}, Log: testr.New(t)}, cache: c, health: h}
	for range 2 {
		if res, err := r.Reconcile(t.Context(), routesRequest); err != nil || res.RequeueAfter != retryInterval {
			t.Fatalf("Reconcile = %+v, %v; want a retry after %s", res, err, retryInterval)
		}
	}
	if got := read(applyFailures) - before; got != 2 {
		t.Errorf("apply failures counted: %v, want 2", got)
	}
	if got := read(routesApplied); got != 7 {
		t.Errorf("routes after failures: %v, want 7 (the last applied)", got)
	}
	if code, body := probe("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "operation not permitted") {
		t.Errorf("/readyz after failed Applies: %d %q, want 503 with Apply's error", code, body)
	}
	if code, _ := probe("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after failed Applies: %d, want 200 (the process serves)", code)
	}
	r.o.Routes = &fakeRoutes{}
	if _, err := r.Reconcile(t.Context(), routesRequest); err != nil {
		t.Fatal(err)
	}
	if got := read(routesApplied); got != 0 {
		t.Errorf("routes after applying none (not joined): %v, want 0", got)
	}
	if code, body := probe("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after a successful Apply: %d %q, want 200", code, body)
	}
}

func TestRunValidates(t *testing.T) {
	for _, o := range []Options{{}, {NodeName: "n"}, {NodeName: "n", Routes: &fakeRoutes{}}} {
		if err := Run(context.Background(), o); err == nil {
			t.Errorf("Run(%+v) succeeded, want an error", o)
		}
	}
}

// TestDesiredFollowsNamedGateway: the routes go to the gateway the ConfigMap names (it wrote
// itself there once its tunnels were up), not to a newer Lease holder still starting, nor away
// while the Lease is released during a handover; a ConfigMap without the name (a gateway of an
// earlier version) leaves the choice to the Lease.
func TestDesiredFollowsNamedGateway(t *testing.T) {
	nodes := []client.Object{}
	for name, ip := range map[string]string{"gw1": "198.51.100.2", "gw2": "198.51.100.3"} {
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}})
	}
	remote := []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}
	via := func(ip string) []route.Route {
		return []route.Route{{Dst: remote[0], Via: netip.MustParseAddr(ip)}}
	}
	for _, tc := range []struct {
		name, holder, named string
		want                []route.Route
	}{
		{name: "holder named", holder: "gw1", named: "gw1", want: via("198.51.100.2")},
		{name: "new holder not yet forwarding", holder: "gw2", named: "gw1", want: via("198.51.100.2")},
		{name: "Lease released during a handover", holder: "", named: "gw1", want: via("198.51.100.2")},
		{name: "new holder forwarding", holder: "gw2", named: "gw2", want: via("198.51.100.3")},
		{name: "earlier gateway version: the Lease decides", holder: "gw2", named: "", want: via("198.51.100.3")},
		{name: "nobody elected, nobody named", holder: "", named: "", want: nil},
		{name: "this node is the named gateway", holder: "gw1", named: "self", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.GatewayLeaseName, Namespace: v1alpha1.SystemNamespace}}
			if tc.holder != "" {
				lease.Spec.HolderIdentity = ptr.To(tc.holder)
			}
			cm := SubnetsConfigMap(remote)
			if tc.named != "" {
				cm = GatewayConfigMap(tc.named, remote)
			}
			c := fakeclient.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(append(slices.Clone(nodes), lease, cm)...).Build()
			got, err := desiredFromCache(t.Context(), c, "self")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("routes %v, want %v", got, tc.want)
			}
		})
	}
}
