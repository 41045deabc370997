package operator_test

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	aboutv1alpha1 "github.com/octopus-mcs/octopus/api/about/v1alpha1"
	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/manifests/release"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
	"github.com/octopus-mcs/octopus/internal/operator"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func init() { log.SetLogger(logr.Discard()) }

// writeCounter counts the requests that can change something (every method but GET), so that
// a test proves a reconcile wrote nothing without an audit log.
type writeCounter struct {
	mu     sync.Mutex
	writes []string
}

func (w *writeCounter) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet {
				w.mu.Lock()
				w.writes = append(w.writes, req.Method+" "+req.URL.Path)
				w.mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

func (w *writeCounter) reset() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.writes
	w.writes = nil
	return out
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// side is one cluster with an operator reconciler running in-process against it.
type side struct {
	cfg    *rest.Config
	admin  client.Client
	r      *operator.Reconciler
	writes *writeCounter
	events *events.FakeRecorder
	// hubNamespace is the reconciler's HubNamespace: what the chart was installed with.
	hubNamespace string
}

// operatorUser is the identity of the operator's pods, which the operator chart binds to the
// RBAC generated from internal/operator's markers.
const operatorUser = "system:serviceaccount:" + v1alpha1.OperatorNamespace + ":octopus-operator"

// start installs the operator chart (its RBAC and the Fabric CRD; no pod runs here) and the
// other CRDs in the cluster of cfg, and returns its side, whose reconciler acts as the
// operator's ServiceAccount: every test proves the chart grants what the operator does. The
// chart's hub.enabled is hub, and the reconciler told the same (--hub-namespace).
func start(t *testing.T, cfg *rest.Config, isHub bool) *side {
	t.Helper()
	values := map[string]any{"hub": map[string]any{"enabled": isHub}}
	if _, err := release.Install(t.Context(), cfg, release.Options{Chart: charts.Operator, Namespace: v1alpha1.OperatorNamespace, AppVersion: "v0.0.0-test", Values: values}); err != nil {
		t.Fatal(err)
	}
	operatorCfg := rest.CopyConfig(cfg)
	operatorCfg.Impersonate = rest.ImpersonationConfig{UserName: operatorUser}
	s := &side{cfg: operatorCfg, hubNamespace: operator.NoHubNamespace, admin: testenv.Client(t, cfg), writes: &writeCounter{}, events: events.NewFakeRecorder(1000)}
	all, err := crd.All()
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.InstallCRDs(t.Context(), s.admin, all); err != nil {
		t.Fatal(err)
	}
	if isHub {
		s.hubNamespace = v1alpha1.DefaultHubNamespace
	}
	s.r = s.reconciler(t)
	return s
}

// reconciler is a fresh reconciler, as after an operator restart: it keeps nothing in memory.
// Every request it makes, the libraries' included, goes through the write counter.
func (s *side) reconciler(t *testing.T) *operator.Reconciler {
	counted := s.writes.wrap(s.cfg)
	c, err := client.New(counted, client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &operator.Reconciler{Client: c, Config: counted, Events: s.events, AppVersion: "v0.0.0-test",
		HubNamespace: s.hubNamespace, RetryInterval: 200 * time.Millisecond, Log: testr.New(t)}
}

var fabricKey = client.ObjectKey{Name: v1alpha1.FabricName}

// reconcileUntil reconciles until done holds for the Fabric (nil once it is gone).
func (s *side) reconcileUntil(t *testing.T, what string, done func(*v1alpha1.Fabric) bool) *v1alpha1.Fabric {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var lastErr error
	for {
		_, lastErr = s.r.Reconcile(t.Context(), reconcile.Request{NamespacedName: fabricKey})
		f := &v1alpha1.Fabric{}
		err := s.admin.Get(t.Context(), fabricKey, f)
		switch {
		case apierrors.IsNotFound(err):
			if done(nil) {
				return nil
			}
		case err != nil:
			t.Fatal(err)
		case done(f):
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached; last reconcile error: %v; status: %+v", what, lastErr, f.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// unchangedWritesNothing reconciles a settled Fabric twice and fails on any write.
func (s *side) unchangedWritesNothing(t *testing.T) {
	t.Helper()
	s.writes.reset()
	for range 2 {
		if _, err := s.r.Reconcile(t.Context(), reconcile.Request{NamespacedName: fabricKey}); err != nil {
			t.Fatal(err)
		}
	}
	if w := s.writes.reset(); len(w) > 0 {
		t.Fatalf("reconciling an unchanged Fabric wrote %d times: %v", len(w), w)
	}
}

func condition(f *v1alpha1.Fabric, typ string) metav1.Condition {
	if f == nil {
		return metav1.Condition{}
	}
	if c := meta.FindStatusCondition(f.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func isTrue(typ string) func(*v1alpha1.Fabric) bool {
	return func(f *v1alpha1.Fabric) bool { return condition(f, typ).Status == metav1.ConditionTrue }
}

// TestFabricHubAndMember drives a hub Fabric and a member Fabric on two real API servers with
// the reconciler in-process: publish, join, live change, restart, and a leave while the hub is
// down.
func TestFabricHubAndMember(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east")
	hubCfg, eastCfg := env.Cluster("hub").RESTConfig(), env.Cluster("east").RESTConfig()
	h, m := start(t, hubCfg, true), start(t, eastCfg, false)
	ctx := t.Context()

	// The hub, with the interconnection databases: BrokerReady and broker-info published as
	// a Secret; the databases applied with the operator's own RBAC.
	if err := h.admin.Create(ctx, &v1alpha1.Fabric{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.FabricName},
		Spec: v1alpha1.FabricSpec{HubConfig: &v1alpha1.HubConfig{Interconnect: &v1alpha1.HubInterconnect{Image: "octopus-ovn:test"}}}}); err != nil {
		t.Fatal(err)
	}
	hf := h.reconcileUntil(t, "hub BrokerReady", isTrue(v1alpha1.FabricBrokerReady))
	if hf.Status.BrokerInfoSecret != "octopus-hub/broker-info" || !isTrue(v1alpha1.FabricReady)(hf) {
		t.Fatalf("hub status = %+v", hf.Status)
	}
	for _, obj := range []client.Object{&appsv1.StatefulSet{}, &corev1.Secret{}} {
		name := render.ICDBName
		if _, ok := obj.(*corev1.Secret); ok {
			name = render.ICDBSecret
		}
		if err := h.admin.Get(ctx, client.ObjectKey{Namespace: "octopus-hub", Name: name}, obj); err != nil {
			t.Errorf("hubConfig.interconnect: %v", err)
		}
	}
	secret := &corev1.Secret{}
	if err := h.admin.Get(ctx, client.ObjectKey{Namespace: "octopus-hub", Name: operator.BrokerInfoSecretName}, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.DecodeBrokerInfo(bytes.NewReader(secret.Data[v1alpha1.BrokerInfoKey])); err != nil {
		t.Fatalf("published broker-info: %v", err)
	}
	t.Run("hub reconciled unchanged writes nothing", func(t *testing.T) { h.unchangedWritesNothing(t) })

	// The member before its broker-info is there: a condition says how to provide it. It
	// joins with globalnet addressing and an egress range of 4 addresses, which must reach
	// its Cluster on the hub, where the allocator and the gateway read it.
	eastPods := env.Cluster("east").PodCIDR.String()
	member := &v1alpha1.Fabric{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.FabricName},
		Spec: v1alpha1.FabricSpec{JoinConfig: &v1alpha1.JoinConfig{
			BrokerInfoSecretRef: v1alpha1.SecretReference{Name: "broker-info"}, PodCIDRs: []string{eastPods},
			Addressing: v1alpha1.AddressingGlobalnet, GlobalEgressSize: 4,
		}}}
	if err := m.admin.Create(ctx, member); err != nil {
		t.Fatal(err)
	}
	m.reconcileUntil(t, "BrokerInfoMissing", func(f *v1alpha1.Fabric) bool {
		return condition(f, v1alpha1.FabricJoined).Reason == operator.ReasonBrokerInfoMissing
	})
	copied := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "broker-info", Namespace: v1alpha1.OperatorNamespace},
		Data: map[string][]byte{v1alpha1.BrokerInfoKey: []byte("{not broker-info")}}
	if err := m.admin.Create(ctx, copied); err != nil {
		t.Fatal(err)
	}
	m.reconcileUntil(t, "BrokerInfoInvalid", func(f *v1alpha1.Fabric) bool {
		return condition(f, v1alpha1.FabricJoined).Reason == operator.ReasonBrokerInfoInvalid
	})
	if _, err := release.Current(eastCfg, charts.Member, v1alpha1.SystemNamespace); err != nil {
		t.Fatal(err)
	}
	copied.Data = secret.Data
	if err := m.admin.Update(ctx, copied); err != nil {
		t.Fatal(err)
	}
	// An operator stopped in the middle of its first reconcile, once the join has stored the
	// cluster's credential (while the rest of the join and the chart install run); a new one
	// finishes it. Not earlier: between the hub's enrolment of the cluster and the credential
	// reaching the member, an interrupted join still needs the hub's admin (`octopus hub
	// revoke`), a window internal/cluster's join does not close yet.
	stopped, stop := context.WithCancel(ctx)
	first := make(chan struct{})
	go func() {
		defer close(first)
		_, _ = m.r.Reconcile(stopped, reconcile.Request{NamespacedName: fabricKey})
	}()
	credential := client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.CredentialSecretName}
	for cut := false; !cut; {
		select {
		case <-first:
			cut = true
		case <-time.After(10 * time.Millisecond):
			cut = m.admin.Get(ctx, credential, &corev1.Secret{}) == nil
		}
	}
	stop()
	<-first
	m.r = m.reconciler(t)

	// Joined with the cluster ID defaulted from kube-system's UID, the chart installed.
	// The chart is installed, but this control plane has no node to run a pod on: the
	// Deployments never roll out, and ComponentsReady says which one it waits for.
	m.reconcileUntil(t, "Joined and the components rolling out", func(f *v1alpha1.Fabric) bool {
		c := condition(f, v1alpha1.FabricComponentsReady)
		return isTrue(v1alpha1.FabricJoined)(f) && c.Reason == operator.ReasonRollingOut &&
			strings.Contains(c.Message, "deployment octopus-controller 0/2 available") &&
			condition(f, v1alpha1.FabricReady).Status == metav1.ConditionFalse
	})
	// With nothing to run, the Deployment controller reports them rolled out (the DaemonSets
	// have no node either): the components are ready.
	scaleToZero(t, m.admin)
	mf := m.reconcileUntil(t, "Joined and ComponentsReady", func(f *v1alpha1.Fabric) bool {
		return isTrue(v1alpha1.FabricJoined)(f) && isTrue(v1alpha1.FabricComponentsReady)(f)
	})
	ks := &corev1.Namespace{}
	if err := m.admin.Get(ctx, client.ObjectKey{Name: "kube-system"}, ks); err != nil {
		t.Fatal(err)
	}
	id := string(ks.UID)
	if mf.Status.ClusterID != id {
		t.Fatalf("status.clusterID = %q, want kube-system's UID %q", mf.Status.ClusterID, id)
	}
	cl := &v1alpha1.Cluster{}
	if err := h.admin.Get(ctx, client.ObjectKey{Namespace: "octopus-hub", Name: id}, cl); err != nil {
		t.Fatalf("the member's Cluster on the hub: %v", err)
	}
	if cl.Spec.Addressing != v1alpha1.AddressingGlobalnet || cl.Spec.GlobalEgressSize != 4 {
		t.Fatalf("the member's Cluster on the hub: addressing %q, globalEgressSize %d; want globalnet and the Fabric's 4", cl.Spec.Addressing, cl.Spec.GlobalEgressSize)
	}
	if c := condition(mf, v1alpha1.FabricGatewaysConnected); c.Reason != "NoActiveGateway" || condition(mf, v1alpha1.FabricReady).Status != metav1.ConditionFalse {
		t.Fatalf("without gateways: GatewaysConnected = %+v, Ready = %+v", c, condition(mf, v1alpha1.FabricReady))
	}
	rel := current(t, eastCfg)
	if rel.Revision != 1 || backend(rel) != "wireguard" {
		t.Fatalf("release revision %d backend %q, want 1 wireguard", rel.Revision, backend(rel))
	}
	t.Run("the interrupted join left no duplicate", func(t *testing.T) {
		clusters := &v1alpha1.ClusterList{}
		if err := h.admin.List(ctx, clusters, client.InNamespace("octopus-hub")); err != nil {
			t.Fatal(err)
		}
		accounts := &corev1.ServiceAccountList{}
		if err := h.admin.List(ctx, accounts, client.InNamespace("octopus-hub")); err != nil {
			t.Fatal(err)
		}
		var clusterAccounts int
		for _, sa := range accounts.Items {
			if strings.HasPrefix(sa.Name, v1alpha1.ClusterServiceAccountPrefix) {
				clusterAccounts++
			}
		}
		claims := &corev1.ConfigMapList{}
		if err := h.admin.List(ctx, claims, client.InNamespace("octopus-hub"), client.MatchingLabels{v1alpha1.ClusterLabel: id}); err != nil {
			t.Fatal(err)
		}
		// One Cluster, one credential, one claimed block per pool (globalnet, secondary).
		if len(clusters.Items) != 1 || clusterAccounts != 1 || len(claims.Items) != 2 {
			t.Fatalf("on the hub: %d Clusters, %d cluster ServiceAccounts, %d claims; want 1, 1, 2", len(clusters.Items), clusterAccounts, len(claims.Items))
		}
	})
	t.Run("member reconciled unchanged writes nothing", func(t *testing.T) { m.unchangedWritesNothing(t) })
	t.Run("restarted operator writes nothing", func(t *testing.T) {
		m.r = m.reconciler(t)
		m.unchangedWritesNothing(t)
	})

	t.Run("live change of backend, health check, gateway selector and cloud prepare upgrades the release", func(t *testing.T) {
		testenv.AddNode(t, m.admin, "east-gw", "192.0.2.9", "")
		f := &v1alpha1.Fabric{}
		if err := m.admin.Get(ctx, fabricKey, f); err != nil {
			t.Fatal(err)
		}
		f.Spec.JoinConfig.Backend = v1alpha1.BackendVXLAN
		f.Spec.JoinConfig.HealthCheck = &v1alpha1.HealthCheck{Interval: metav1.Duration{Duration: 3 * time.Second}, MaxPacketLoss: 5}
		f.Spec.JoinConfig.GatewayNodeSelector = map[string]string{"edge": "true"}
		// generic cloud prepare has the gateways accept their tunnel port in the node's firewall.
		f.Spec.CloudPrepareConfig = &v1alpha1.CloudPrepareConfig{Provider: v1alpha1.CloudProviderGeneric}
		if err := m.admin.Update(ctx, f); err != nil {
			t.Fatal(err)
		}
		got := m.reconcileUntil(t, "upgrade", func(g *v1alpha1.Fabric) bool {
			return g.Status.ObservedGeneration == f.Generation && g.Status.ComponentsRevision == 2
		})
		rel := current(t, eastCfg)
		if backend(rel) != "vxlan" {
			t.Fatalf("release values %v, want backend vxlan", rel.Values)
		}
		cm := &corev1.ConfigMap{}
		if err := m.admin.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: "octopus-config"}, cm); err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]string{"OCTOPUS_HEALTH_INTERVAL": "3s", "OCTOPUS_HEALTH_MAX_LOSS": "5", "OCTOPUS_OPEN_HOST_FIREWALL": "true"} {
			if cm.Data[k] != want {
				t.Fatalf("octopus-config = %v, want %s=%s", cm.Data, k, want)
			}
		}
		after := &v1alpha1.Cluster{}
		if err := h.admin.Get(ctx, client.ObjectKeyFromObject(cl), after); err != nil {
			t.Fatal(err)
		}
		if after.UID != cl.UID || after.ResourceVersion != cl.ResourceVersion {
			t.Fatal("a live change re-registered the cluster on the hub")
		}
		if got.Status.ClusterID != id {
			t.Fatalf("cluster ID changed to %q", got.Status.ClusterID)
		}
		m.unchangedWritesNothing(t)
	})

	t.Run("delete while the hub is down waits, then leaves cleanly", func(t *testing.T) {
		if err := m.admin.Delete(ctx, &v1alpha1.Fabric{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.FabricName}}); err != nil {
			t.Fatal(err)
		}
		if err := env.Cluster("hub").StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		m.reconcileUntil(t, "HubUnreachable while leaving", func(f *v1alpha1.Fabric) bool {
			return f != nil && condition(f, v1alpha1.FabricJoined).Reason == operator.ReasonHubUnreachable
		})
		if err := env.Cluster("hub").StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		m.reconcileUntil(t, "Fabric deleted", func(f *v1alpha1.Fabric) bool { return f == nil })

		for _, obj := range []client.Object{
			&v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "octopus-hub", Name: id}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "octopus-hub", Name: v1alpha1.ClusterServiceAccount(id)}},
		} {
			if err := h.admin.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
				t.Errorf("on the hub, %T %s: err = %v, want gone", obj, obj.GetName(), err)
			}
		}
		obj := &aboutv1alpha1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1alpha1.ClusterIDProperty}}
		if err := m.admin.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			t.Errorf("in the member, %T %s: err = %v, want gone", obj, obj.GetName(), err)
		}
		// The member's namespace stays with the operator's Role in it, and nothing else of
		// Octopus's: the next Fabric joins with that Role.
		checkOnlyOperatorLeft(t, m.admin)
		if rel, err := release.Current(eastCfg, charts.Member, v1alpha1.SystemNamespace); err != nil || rel != nil {
			t.Errorf("member release after delete: %+v, %v", rel, err)
		}
	})

	t.Run("events on transitions", func(t *testing.T) {
		var reasons []string
		for len(m.events.Events) > 0 {
			reasons = append(reasons, <-m.events.Events)
		}
		for _, want := range []string{"Warning BrokerInfoMissing Joined=False", "Normal Registered Joined=True", "Warning HubUnreachable Joined=False"} {
			if !slices.ContainsFunc(reasons, func(e string) bool { return strings.HasPrefix(e, want) }) {
				t.Errorf("no event %q in %q", want, reasons)
			}
		}
	})

	t.Run("deleting the hub Fabric withdraws broker-info", func(t *testing.T) {
		if err := h.admin.Delete(ctx, &v1alpha1.Fabric{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.FabricName}}); err != nil {
			t.Fatal(err)
		}
		h.reconcileUntil(t, "hub Fabric deleted", func(f *v1alpha1.Fabric) bool { return f == nil })
		err := h.admin.Get(ctx, client.ObjectKey{Namespace: "octopus-hub", Name: operator.BrokerInfoSecretName}, &corev1.Secret{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("broker-info Secret after delete: err = %v, want gone", err)
		}
	})
}

// scaleToZero scales the member chart's Deployments to 0 replicas.
func scaleToZero(t *testing.T, c client.Client) {
	t.Helper()
	if _, err := testenv.ScaleToZero(t.Context(), c, v1alpha1.SystemNamespace); err != nil {
		t.Fatal(err)
	}
}

func current(t *testing.T, cfg *rest.Config) *release.Deployed {
	t.Helper()
	rel, err := release.Current(cfg, charts.Member, v1alpha1.SystemNamespace)
	if err != nil || rel == nil {
		t.Fatalf("member release: %+v, %v", rel, err)
	}
	return rel
}

func backend(rel *release.Deployed) string {
	gw, _ := rel.Values["gateway"].(map[string]any)
	b, _ := gw["backend"].(string)
	return b
}

// TestCloudPrepare labels gateway nodes by count and by selector on a real API server, moves
// only its own labels, and reports an unavailable cloud provider.
func TestCloudPrepare(t *testing.T) {
	env := testenv.ControlPlanes(t, "a")
	s := start(t, env.Cluster("a").RESTConfig(), true)
	ctx := t.Context()
	for i, name := range []string{"node-a", "node-b", "node-c"} {
		testenv.AddNode(t, s.admin, name, "192.0.2."+string(rune('1'+i)), "")
	}
	f := &v1alpha1.Fabric{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.FabricName}, Spec: v1alpha1.FabricSpec{
		HubConfig:          &v1alpha1.HubConfig{},
		CloudPrepareConfig: &v1alpha1.CloudPrepareConfig{Provider: v1alpha1.CloudProviderGeneric, Gateways: ptr.To[int32](2)},
	}}
	if err := s.admin.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	gateways := func() []string {
		nodes := &corev1.NodeList{}
		if err := s.admin.List(ctx, nodes, client.MatchingLabels{v1alpha1.GatewayNodeLabel: "true"}); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range nodes.Items {
			out = append(out, n.Name)
		}
		return out
	}
	got := s.reconcileUntil(t, "CloudPrepared by count", isTrue(v1alpha1.FabricCloudPrepared))
	if g := gateways(); !slices.Equal(g, []string{"node-a", "node-b"}) {
		t.Fatalf("gateway nodes %v, want node-a node-b", g)
	}
	if len(got.Status.GatewayNodes) != 2 || got.Status.GatewayNodes[0].Endpoint != "192.0.2.1" {
		t.Fatalf("status.gatewayNodes = %+v", got.Status.GatewayNodes)
	}
	s.unchangedWritesNothing(t)

	edit := func(change func(*v1alpha1.CloudPrepareConfig)) {
		t.Helper()
		if err := s.admin.Get(ctx, fabricKey, f); err != nil {
			t.Fatal(err)
		}
		change(f.Spec.CloudPrepareConfig)
		if err := s.admin.Update(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	// A selector moves the gateways: node-a and node-b lose the label it set.
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}}
	if err := s.admin.Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"edge":"true"}}}`))); err != nil {
		t.Fatal(err)
	}
	edit(func(c *v1alpha1.CloudPrepareConfig) {
		c.Gateways = nil
		c.GatewayNodeSelector = map[string]string{"edge": "true"}
	})
	s.reconcileUntil(t, "CloudPrepared by selector", func(f *v1alpha1.Fabric) bool {
		return isTrue(v1alpha1.FabricCloudPrepared)(f) && f.Status.ObservedGeneration == f.Generation
	})
	if g := gateways(); !slices.Equal(g, []string{"node-c"}) {
		t.Fatalf("gateway nodes %v, want node-c", g)
	}

	edit(func(c *v1alpha1.CloudPrepareConfig) { c.Provider = v1alpha1.CloudProviderAWS })
	got = s.reconcileUntil(t, "aws unavailable", func(f *v1alpha1.Fabric) bool {
		return condition(f, v1alpha1.FabricCloudPrepared).Reason == operator.ReasonProviderUnavailable
	})
	if c := condition(got, v1alpha1.FabricReady); c.Status != metav1.ConditionFalse || c.Reason != operator.ReasonProviderUnavailable {
		t.Fatalf("Ready = %+v, want False ProviderUnavailable", c)
	}
	t.Log(condition(got, v1alpha1.FabricCloudPrepared).Message)

	// Deleting the Fabric removes the labels it set, none other.
	if err := s.admin.Delete(ctx, f); err != nil {
		t.Fatal(err)
	}
	s.reconcileUntil(t, "deleted", func(f *v1alpha1.Fabric) bool { return f == nil })
	if g := gateways(); len(g) != 0 {
		t.Fatalf("gateway labels after delete: %v", g)
	}
}

// checkOnlyOperatorLeft checks that the member's namespace holds nothing but the operator
// chart's objects and what the API server makes in every namespace.
func checkOnlyOperatorLeft(t *testing.T, c client.Client) {
	t.Helper()
	for _, list := range []client.ObjectList{&corev1.SecretList{}, &corev1.ConfigMapList{}, &corev1.ServiceAccountList{},
		&corev1.ServiceList{}, &appsv1.DeploymentList{}, &appsv1.DaemonSetList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{}} {
		if err := c.List(t.Context(), list, client.InNamespace(v1alpha1.SystemNamespace)); err != nil {
			t.Fatal(err)
		}
		_ = meta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			if obj.GetAnnotations()["meta.helm.sh/release-name"] != charts.Operator && obj.GetName() != "kube-root-ca.crt" && obj.GetName() != "default" {
				t.Errorf("namespace %s keeps %T %s after leave", v1alpha1.SystemNamespace, obj, obj.GetName())
			}
			return nil
		})
	}
	role := &rbacv1.Role{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: "octopus-operator"}, role); err != nil {
		t.Errorf("the operator's Role in %s after leave: %v", v1alpha1.SystemNamespace, err)
	}
}
