package kube

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// fakeCache is controller-runtime's fake informers with a Start that, like a real cache's,
// runs until its context ends, or returns what the test sends on stop.
type fakeCache struct {
	*informertest.FakeInformers
	stop chan error
}

func (c *fakeCache) Start(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-c.stop:
		return err
	}
}

// recorder is a reconciler that records its requests, can be held inside a reconcile, and
// returns the RequeueAfter the test sets per request name.
type recorder struct {
	mu       sync.Mutex
	requests []string
	running  int
	overlap  bool
	requeue  map[string]time.Duration
	hold     chan struct{} // a reconcile waits for it when set
	inside   chan struct{} // signalled when a held reconcile started
}

func (r *recorder) Reconcile(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.mu.Lock()
	r.running++
	r.overlap = r.overlap || r.running > 1
	r.requests = append(r.requests, req.Name)
	hold, after := r.hold, r.requeue[req.Name]
	r.mu.Unlock()
	if hold != nil {
		r.inside <- struct{}{}
		<-hold
	}
	time.Sleep(5 * time.Millisecond) // long enough for overlapping workers to show
	r.mu.Lock()
	r.running--
	r.mu.Unlock()
	return reconcile.Result{RequeueAfter: after}, nil
}

func (r *recorder) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, q := range r.requests {
		if q == name {
			n++
		}
	}
	return n
}

func (r *recorder) await(t *testing.T, what, name string, atLeast int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.count(name) < atLeast {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d reconciles of %q, want at least %d", what, r.count(name), name, atLeast)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var (
	triggerReq = reconcile.Request{NamespacedName: types.NamespacedName{Name: "trigger"}}
	periodReq  = reconcile.Request{NamespacedName: types.NamespacedName{Name: "period"}}
)

// startController runs the controller under test; Run's result arrives once on done.
func startController(t *testing.T, c *fakeCache, r *recorder) (cancel func(), done chan error) {
	t.Helper()
	// Only ConfigMap updates that change data count; Secrets always do.
	dataChanged := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.(*corev1.ConfigMap).Data["k"] != e.ObjectNew.(*corev1.ConfigMap).Data["k"]
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		done <- SingleKeyController{
			Name: "test", Cache: c, Trigger: triggerReq, Later: []DelayedRequest{{Request: periodReq, After: 100 * time.Millisecond}}, Reconciler: r,
			Watches: []Watch{{Object: &corev1.ConfigMap{}, Predicates: []predicate.Predicate{dataChanged}}, {Object: &corev1.Secret{}}},
		}.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-returned
	})
	return cancel, done
}

func newFakeCache(t *testing.T) (*fakeCache, *controllertest.FakeInformer, *controllertest.FakeInformer) {
	t.Helper()
	c := &fakeCache{FakeInformers: &informertest.FakeInformers{Scheme: Scheme}, stop: make(chan error, 1)}
	// Made before Run, so that the controller and the test never create them concurrently.
	cms, err := c.FakeInformerFor(context.Background(), &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := c.FakeInformerFor(context.Background(), &corev1.Secret{})
	if err != nil {
		t.Fatal(err)
	}
	return c, cms, secrets
}

func TestSingleKeyController(t *testing.T) {
	c, cms, secrets := newFakeCache(t)
	r := &recorder{requeue: map[string]time.Duration{"period": 50 * time.Millisecond}}
	cancel, done := startController(t, c, r)

	// The trigger runs at the start without any event, the delayed request after its delay;
	// then it keeps requeueing itself, the trigger (RequeueAfter 0) does not.
	start := time.Now()
	r.await(t, "at the start", "trigger", 1)
	if n := r.count("period"); n != 0 {
		t.Fatalf("the delayed request ran %d times at once", n)
	}
	r.await(t, "after its delay", "period", 1)
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("the delayed request ran after %s, want 100ms", d)
	}
	r.await(t, "periodic requeue", "period", 4)
	if n := r.count("trigger"); n != 1 {
		t.Fatalf("%d reconciles of the trigger without an event, want 1", n)
	}

	// Every event of a watched kind requests the trigger; a filtered one does not.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}, Data: map[string]string{"k": "1"}}
	cms.Add(cm)
	r.await(t, "ConfigMap added", "trigger", 2)
	same := cm.DeepCopy()
	same.Labels = map[string]string{"only": "metadata"}
	cms.Update(cm, same)
	time.Sleep(200 * time.Millisecond)
	if n := r.count("trigger"); n != 2 {
		t.Fatalf("%d reconciles of the trigger after an update the predicate rejects, want 2", n)
	}
	changed := cm.DeepCopy()
	changed.Data["k"] = "2"
	cms.Update(cm, changed)
	r.await(t, "ConfigMap data changed", "trigger", 3)
	secrets.Delete(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}})
	r.await(t, "Secret deleted", "trigger", 4)

	// A burst of events while a reconcile runs is one more reconcile, never a concurrent one.
	r.mu.Lock()
	r.hold, r.inside = make(chan struct{}), make(chan struct{}, 1)
	hold := r.hold
	r.mu.Unlock()
	secrets.Add(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s1", Namespace: "ns"}})
	<-r.inside
	r.mu.Lock()
	r.hold = nil
	r.mu.Unlock()
	before := r.count("trigger")
	for i := range 20 {
		secrets.Add(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "burst", Namespace: "ns", ResourceVersion: string(rune('a' + i))}})
	}

	// Cancelled inside a reconcile: Run waits for it to finish, then returns nil.
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a reconcile was still running", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(hold)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if n := r.count("trigger"); n > before+1 {
		t.Fatalf("%d reconciles for a burst of 20 events during one reconcile, want at most 1", n-before)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.overlap {
		t.Fatal("two reconciles ran at once")
	}
}

func TestSingleKeyControllerCacheFailures(t *testing.T) {
	t.Run("the cache stops on its own", func(t *testing.T) {
		c, _, _ := newFakeCache(t)
		r := &recorder{}
		_, done := startController(t, c, r)
		r.await(t, "at the start", "trigger", 1)
		boom := errors.New("boom")
		c.stop <- boom
		select {
		case err := <-done:
			if !errors.Is(err, boom) {
				t.Fatalf("Run = %v, want the cache's error", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return when the cache stopped")
		}
	})
	t.Run("the cache never syncs", func(t *testing.T) {
		c, _, _ := newFakeCache(t)
		c.Synced = ptr.To(false)
		r := &recorder{}
		_, done := startController(t, c, r)
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotSynced) {
				t.Fatalf("Run = %v, want ErrNotSynced", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return")
		}
		if n := r.count("trigger"); n != 0 {
			t.Fatalf("%d reconciles before the cache synced", n)
		}
	})
}
