package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

const (
	hbNamespace = v1alpha1.DefaultHubNamespace
	hbClusterID = "east"
)

func TestHeartbeatAge(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		lease   *coordinationv1.Lease
		wantAge time.Duration
		wantOK  bool
	}{
		{name: "no lease", lease: nil},
		{name: "never renewed", lease: hbLease(nil, 30)},
		{name: "renewed 5s ago", lease: hbLease(new(now.Add(-5*time.Second)), 30), wantAge: 5 * time.Second, wantOK: true},
		{name: "renewed just now", lease: hbLease(new(now), 30), wantAge: 0, wantOK: true},
		{name: "renewTime in the future (skew)", lease: hbLease(new(now.Add(2*time.Second)), 30), wantAge: 0, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			age, ok := Age(tt.lease, now)
			if age != tt.wantAge || ok != tt.wantOK {
				t.Errorf("Age() = %s, %t; want %s, %t", age, ok, tt.wantAge, tt.wantOK)
			}
		})
	}
}

func TestHeartbeatState(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { return new(now.Add(-d)) }
	tests := []struct {
		name  string
		lease *coordinationv1.Lease
		want  string
	}{
		{name: "no lease", lease: nil, want: StateNeverSeen},
		{name: "never renewed", lease: hbLease(nil, 30), want: StateNeverSeen},
		{name: "fresh", lease: hbLease(ago(10*time.Second), 30), want: StateConnected},
		{name: "exactly at the duration", lease: hbLease(ago(30*time.Second), 30), want: StateConnected},
		{name: "older than the duration", lease: hbLease(ago(31*time.Second), 30), want: StateStale},
		{name: "short duration", lease: hbLease(ago(3*time.Second), 2), want: StateStale},
		{name: "no duration: default 30s, fresh", lease: hbLease(ago(20*time.Second), 0), want: StateConnected},
		{name: "no duration: default 30s, stale", lease: hbLease(ago(40*time.Second), 0), want: StateStale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := State(tt.lease, now); got != tt.want {
				t.Errorf("State() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestHeartbeatOptionsValidation(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).Build()
	valid := Options{Hub: c, Namespace: hbNamespace, ClusterID: hbClusterID, Identity: "me"}
	tests := []struct {
		name    string
		mutate  func(*Options)
		wantErr string
		check   func(*testing.T, Options)
	}{
		{name: "defaults", mutate: func(*Options) {}, check: func(t *testing.T, o Options) {
			if o.Interval != DefaultInterval || o.LeaseDuration != 3*DefaultInterval {
				t.Errorf("interval %s, lease duration %s; want %s, %s", o.Interval, o.LeaseDuration, DefaultInterval, 3*DefaultInterval)
			}
		}},
		{name: "lease duration follows interval", mutate: func(o *Options) { o.Interval = time.Second }, check: func(t *testing.T, o Options) {
			if o.LeaseDuration != 3*time.Second {
				t.Errorf("lease duration %s, want 3s", o.LeaseDuration)
			}
		}},
		{name: "identity defaults to hostname", mutate: func(o *Options) { o.Identity = "" }, check: func(t *testing.T, o Options) {
			if o.Identity == "" {
				t.Error("identity is empty")
			}
		}},
		{name: "no hub client", mutate: func(o *Options) { o.Hub = nil }, wantErr: "hub client is required"},
		{name: "no namespace", mutate: func(o *Options) { o.Namespace = "" }, wantErr: "namespace is required"},
		{name: "no cluster ID", mutate: func(o *Options) { o.ClusterID = "" }, wantErr: "cluster ID is required"},
		{name: "lease not longer than interval", mutate: func(o *Options) { o.Interval, o.LeaseDuration = 10*time.Second, 10*time.Second }, wantErr: "must be longer than the heartbeat interval"},
		{name: "negative interval", mutate: func(o *Options) { o.Interval = -time.Second }, wantErr: "must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := valid
			tt.mutate(&o)
			h, err := New(o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New() error = %v", err)
			}
			tt.check(t, h.opts)
		})
	}
}

// TestHeartbeatWritesStatusOnlyOnChange drives ticks by hand against a fake hub and counts
// the writes.
func TestHeartbeatWritesStatusOnlyOnChange(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	var statusPatches int
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).
		WithStatusSubresource(&v1alpha1.Cluster{}).
		WithObjects(hbCluster(),
			// Left behind by a previous replica: the heartbeat must take it over.
			&coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: hbNamespace, Name: hbClusterID, Labels: map[string]string{v1alpha1.ClusterLabel: hbClusterID}},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: new("old-pod"), LeaseTransitions: new(int32(2))},
			}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				statusPatches++
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	h := hbNew(t, Options{Hub: c, Namespace: hbNamespace, ClusterID: hbClusterID,
		Interval: time.Second, Identity: "new-pod", Version: "v1.2.3", Clock: clk})
	ctx := logf.IntoContext(t.Context(), testr.New(t))

	for range 5 {
		clk.Step(time.Second)
		h.tick(ctx)
	}
	lease := hbGetLease(t, c)
	if got := ptrValue(lease.Spec.HolderIdentity); got != "new-pod" {
		t.Errorf("holderIdentity = %q, want new-pod", got)
	}
	if got := ptrValue(lease.Spec.LeaseTransitions); got != 3 {
		t.Errorf("leaseTransitions = %d, want 3 (one takeover)", got)
	}
	if got := ptrValue(lease.Spec.LeaseDurationSeconds); got != 3 {
		t.Errorf("leaseDurationSeconds = %d, want 3", got)
	}
	if got := lease.Spec.RenewTime; got == nil || !got.Time.Equal(clk.Now()) {
		t.Errorf("renewTime = %v, want %v", got, clk.Now())
	}
	hbAssertCondition(t, hbGetCluster(t, c), metav1.ConditionTrue, v1alpha1.ReasonHeartbeating)
	if got := hbGetCluster(t, c).Status.AgentVersion; got != "v1.2.3" {
		t.Errorf("agentVersion = %q, want v1.2.3", got)
	}
	if statusPatches != 1 {
		t.Errorf("status patched %d times in 5 ticks, want 1", statusPatches)
	}

	// Someone else (a replica shutting down) marks the cluster stopped: the next tick puts it right.
	cl := hbGetCluster(t, c)
	meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: v1alpha1.ClusterConditionAgentConnected,
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAgentStopped, Message: "stopped"})
	if err := c.Status().Update(t.Context(), cl); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clk.Step(time.Second)
		h.tick(ctx)
	}
	hbAssertCondition(t, hbGetCluster(t, c), metav1.ConditionTrue, v1alpha1.ReasonHeartbeating)
	if statusPatches != 2 {
		t.Errorf("status patched %d times in total, want 2", statusPatches)
	}
}

// TestHeartbeatLogsOncePerFailureKind checks that a hub that fails for many ticks yields one
// log line per kind of failure and one when it recovers.
func TestHeartbeatLogsOncePerFailureKind(t *testing.T) {
	var (
		mu      sync.Mutex
		logs    []string
		failure error
	)
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, args)
	}, funcr.Options{})
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).
		WithStatusSubresource(&v1alpha1.Cluster{}).
		WithObjects(hbCluster()).
		WithInterceptorFuncs(interceptor.Funcs{
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				if failure != nil {
					return failure
				}
				return c.Update(ctx, obj, opts...)
			},
		}).Build()
	clk := clocktesting.NewFakeClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	h := hbNew(t, Options{Hub: c, Namespace: hbNamespace, ClusterID: hbClusterID,
		Interval: time.Second, Identity: "me", Clock: clk})
	ctx := logf.IntoContext(t.Context(), logger)
	ticks := func(n int) {
		for range n {
			clk.Step(time.Second)
			h.tick(ctx)
		}
	}
	leaseGR := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

	// The last success's timestamp moves with every renewal, and only then.
	wantLastSuccess := func(when string, want time.Time) {
		t.Helper()
		m := &dto.Metric{}
		if err := lastSuccess.WithLabelValues(hbClusterID).Write(m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetGauge().GetValue(); got != float64(want.Unix()) {
			t.Errorf("%s: octopus_heartbeat_last_success_timestamp_seconds = %v, want %v", when, got, float64(want.Unix()))
		}
	}

	ticks(2) // healthy: creates the Lease, then updates it
	wantLastSuccess("healthy", clk.Now())
	lastRenewal := clk.Now()
	failure = fmt.Errorf("dial tcp 127.0.0.1:6443: connect: connection refused")
	ticks(5)
	failure = errors.New("dial tcp 127.0.0.1:6443: i/o timeout") // same kind: no new line
	ticks(5)
	failure = apierrors.NewForbidden(leaseGR, hbClusterID, errors.New("denied by policy"))
	ticks(5)
	wantLastSuccess("failing", lastRenewal)
	failure = nil
	ticks(5)
	wantLastSuccess("recovered", clk.Now())

	mu.Lock()
	defer mu.Unlock()
	var failed, resumed int
	for _, l := range logs {
		switch {
		case strings.Contains(l, "Failed to heartbeat"):
			failed++
		case strings.Contains(l, "Resumed heartbeat"):
			resumed++
			if !strings.Contains(l, `"failedTicks"=15`) {
				t.Errorf("recovery line %s does not count 15 failed ticks", l)
			}
		}
	}
	if failed != 2 || resumed != 1 {
		t.Errorf("got %d failure and %d recovery lines, want 2 and 1; logs:\n%s", failed, resumed, strings.Join(logs, "\n"))
	}
	if got := hbGetLease(t, c).Spec.RenewTime; got == nil || !got.Time.Equal(clk.Now()) {
		t.Errorf("renewTime after recovery = %v, want %v", got, clk.Now())
	}
}

func TestHeartbeatStop(t *testing.T) {
	tests := []struct {
		name       string
		holder     string
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{name: "holder marks the cluster stopped", holder: "me", wantStatus: metav1.ConditionFalse, wantReason: v1alpha1.ReasonAgentStopped},
		{name: "a replica that lost the Lease leaves the status alone", holder: "other-pod", wantStatus: metav1.ConditionTrue, wantReason: v1alpha1.ReasonHeartbeating},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := hbCluster()
			cl.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ClusterConditionAgentConnected, Status: metav1.ConditionTrue,
				Reason: v1alpha1.ReasonHeartbeating, Message: "beating", LastTransitionTime: metav1.Now()}}
			c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithStatusSubresource(&v1alpha1.Cluster{}).
				WithObjects(cl, &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Namespace: hbNamespace, Name: hbClusterID},
					Spec:       coordinationv1.LeaseSpec{HolderIdentity: new(tt.holder)},
				}).Build()
			h := hbNew(t, Options{Hub: c, Namespace: hbNamespace, ClusterID: hbClusterID, Identity: "me"})
			h.stop(logf.IntoContext(t.Context(), testr.New(t)))
			hbAssertCondition(t, hbGetCluster(t, c), tt.wantStatus, tt.wantReason)
		})
	}
}

// TestHeartbeatAgainstHub runs the heartbeat against a real API server, kills the server
// under it and stops it.
func TestHeartbeatAgainstHub(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	logf.SetLogger(logr.Discard()) // the test's own client logs nothing worth reading
	env := testenv.ControlPlanes(t, "hub")
	hubCP := env.Cluster("hub")
	admin, err := client.New(hubCP.RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	hbInstallHub(t, admin)

	const interval = 200 * time.Millisecond
	h := hbNew(t, Options{Hub: admin, Namespace: hbNamespace, ClusterID: hbClusterID,
		Interval: interval, Identity: "agent-0", Version: "v0.0.0-test"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Start(logf.IntoContext(ctx, testr.New(t))) }()
	t.Cleanup(func() {
		// testr must not log after the test returns.
		cancel()
		if err := <-done; err != nil {
			t.Errorf("heartbeat ended with %v", err)
		}
	})

	// Renewals: the Lease appears, carries the cluster's label and its renewTime advances.
	first := hbWaitLease(t, admin, 30*time.Second, func(l *coordinationv1.Lease) error {
		if got := l.Labels[v1alpha1.ClusterLabel]; got != hbClusterID {
			return fmt.Errorf("label %s=%q, want %q", v1alpha1.ClusterLabel, got, hbClusterID)
		}
		if ptrValue(l.Spec.HolderIdentity) != "agent-0" || ptrValue(l.Spec.LeaseDurationSeconds) != 1 || l.Spec.RenewTime == nil {
			return fmt.Errorf("spec %+v, want holder agent-0, 1s duration, a renewTime", l.Spec)
		}
		return nil
	})
	hbWaitRenewedAfter(t, admin, first.Spec.RenewTime.Time, 10*time.Second)
	hbWaitCondition(t, admin, metav1.ConditionTrue, v1alpha1.ReasonHeartbeating, 10*time.Second)
	if v := hbGetCluster(t, admin).Status.AgentVersion; v != "v0.0.0-test" {
		t.Errorf("agentVersion = %q, want v0.0.0-test", v)
	}

	// Fault: the hub crashes for several intervals; renewals resume with no intervention.
	hbWaitControllerManager(t, admin)
	if err := hubCP.KillAPIServer(); err != nil {
		t.Fatalf("killing the hub API server: %v", err)
	}
	time.Sleep(10 * interval)
	startCtx, startCancel := context.WithTimeout(t.Context(), time.Minute)
	defer startCancel()
	if err := hubCP.StartAPIServer(startCtx); err != nil {
		t.Fatalf("restarting the hub API server: %v", err)
	}
	restarted := time.Now()
	hbWaitRenewedAfter(t, admin, restarted, 30*time.Second)
	hbWaitCondition(t, admin, metav1.ConditionTrue, v1alpha1.ReasonHeartbeating, 10*time.Second)

	// Clean shutdown: the cluster is marked stopped before Start returns.
	cancel()
	select {
	case err := <-done:
		done <- err // for the cleanup
		if err != nil {
			t.Fatalf("Start() = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return within 10s of cancellation")
	}
	hbAssertCondition(t, hbGetCluster(t, admin), metav1.ConditionFalse, v1alpha1.ReasonAgentStopped)
}

// hbInstallHub prepares a bare API server as a hub for cluster "east": the hub namespace,
// the hub CRDs (waiting until they are served) and the Cluster.
func hbInstallHub(t *testing.T, c client.Client) {
	t.Helper()
	ctx := t.Context()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hbNamespace}}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	crds, err := crd.Hub()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range crds {
		if err := c.Create(ctx, d); err != nil {
			t.Fatalf("creating CRD %s: %v", d.Name, err)
		}
	}
	for _, d := range crds {
		testenv.Eventually(t, 30*time.Second, "CRD "+d.Name+" established", func() error {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(d), got); err != nil {
				return err
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("CRD %s not established yet", d.Name)
		})
	}
	// The first create after the CRDs are established may still miss the new kind in discovery.
	testenv.Eventually(t, 30*time.Second, "the Cluster created", func() error { return c.Create(ctx, hbCluster()) })
}

// hbWaitControllerManager waits until kube-controller-manager runs its controllers, shown by
// the "default" ServiceAccount it creates in the hub namespace. Before that it is still building
// them and exits if the API server goes away, which the environment reports as a failure.
func hbWaitControllerManager(t *testing.T, c client.Client) {
	t.Helper()
	testenv.Eventually(t, time.Minute, "the controller manager's default ServiceAccount", func() error {
		return c.Get(t.Context(), client.ObjectKey{Namespace: hbNamespace, Name: "default"}, &corev1.ServiceAccount{})
	})
}

func hbCluster() *v1alpha1.Cluster {
	return &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: hbNamespace, Name: hbClusterID, Labels: map[string]string{v1alpha1.ClusterLabel: hbClusterID}},
		Spec: v1alpha1.ClusterSpec{ClusterID: hbClusterID, PodCIDRs: []string{"10.1.0.0/16"},
			ServiceCIDRs: []string{"10.96.0.0/16"}, Addressing: v1alpha1.AddressingDirect},
	}
}

func hbLease(renew *time.Time, durationSeconds int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	if renew != nil {
		l.Spec.RenewTime = &metav1.MicroTime{Time: *renew}
	}
	if durationSeconds != 0 {
		l.Spec.LeaseDurationSeconds = new(durationSeconds)
	}
	return l
}

func hbNew(t *testing.T, o Options) *Heartbeat {
	t.Helper()
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func hbGetLease(t *testing.T, c client.Client) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: hbNamespace, Name: hbClusterID}, l); err != nil {
		t.Fatalf("getting the heartbeat Lease: %v", err)
	}
	return l
}

func hbGetCluster(t *testing.T, c client.Client) *v1alpha1.Cluster {
	t.Helper()
	cl := &v1alpha1.Cluster{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: hbNamespace, Name: hbClusterID}, cl); err != nil {
		t.Fatalf("getting Cluster %s: %v", hbClusterID, err)
	}
	return cl
}

func hbConditionIs(cl *v1alpha1.Cluster, status metav1.ConditionStatus, reason string) error {
	got := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ClusterConditionAgentConnected)
	if got == nil {
		return fmt.Errorf("no %s condition", v1alpha1.ClusterConditionAgentConnected)
	}
	if got.Status != status || got.Reason != reason {
		return fmt.Errorf("%s=%s/%s (%q), want %s/%s", got.Type, got.Status, got.Reason, got.Message, status, reason)
	}
	return nil
}

func hbAssertCondition(t *testing.T, cl *v1alpha1.Cluster, status metav1.ConditionStatus, reason string) {
	t.Helper()
	if err := hbConditionIs(cl, status, reason); err != nil {
		t.Error(err)
	}
}

func hbWaitCondition(t *testing.T, c client.Client, status metav1.ConditionStatus, reason string, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, "condition "+reason, func() error {
		cl := &v1alpha1.Cluster{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: hbNamespace, Name: hbClusterID}, cl); err != nil {
			return err
		}
		return hbConditionIs(cl, status, reason)
	})
}

func hbWaitLease(t *testing.T, c client.Client, timeout time.Duration, check func(*coordinationv1.Lease) error) *coordinationv1.Lease {
	t.Helper()
	var l *coordinationv1.Lease
	testenv.Eventually(t, timeout, "the Lease renewed", func() error {
		l = &coordinationv1.Lease{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: hbNamespace, Name: hbClusterID}, l); err != nil {
			return err
		}
		return check(l)
	})
	return l
}

func hbWaitRenewedAfter(t *testing.T, c client.Client, after time.Time, timeout time.Duration) {
	t.Helper()
	hbWaitLease(t, c, timeout, func(l *coordinationv1.Lease) error {
		if l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(after) {
			return fmt.Errorf("renewTime %v is not after %v", l.Spec.RenewTime, after.Format(time.RFC3339Nano))
		}
		return nil
	})
}
