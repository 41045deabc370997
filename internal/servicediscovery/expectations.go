package servicediscovery

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// expectationTTL bounds how long a reconcile waits for the cache to show our own writes. An
// expectation normally clears within milliseconds, when the watch event of the write arrives;
// one that never does (the object was deleted by someone else before the cache saw it, so no
// event will come) must not stall the service for good.
const expectationTTL = 10 * time.Second

// expectationRecheck is when a reconcile that waited for the cache runs again even if no event
// brings it back earlier: the backstop for expectationTTL.
const expectationRecheck = time.Second

// writtenKind is a kind of member object the import and export reconcilers write.
type writtenKind int

const (
	writtenImport writtenKind = iota
	writtenService
	writtenSlice
	// writtenExport is the export side's status patch of a ServiceExport.
	writtenExport
)

func (k writtenKind) object() client.Object {
	switch k {
	case writtenService:
		return &corev1.Service{}
	case writtenSlice:
		return &discoveryv1.EndpointSlice{}
	case writtenExport:
		return &mcsv1beta1.ServiceExport{}
	default:
		return &mcsv1beta1.ServiceImport{}
	}
}

// writtenRef is one object written for a service: its kind and name (the namespace is the
// service's).
type writtenRef struct {
	kind writtenKind
	name string
}

// expectations remember, per service, the resourceVersion each of our writes left on
// the member, until the manager's cache shows at least that version. Every write of ours fires
// a watch event that reconciles the service again, usually before the cache holds the write:
// that reconcile would see the old object (or none), and write again what the server already
// has. With expectations it waits instead, for the event that the write's arrival in the cache
// brings; the ReplicaSet controller's expectations do the same for the Pods it creates. Safe
// for concurrent use: the workers share it.
type expectations struct {
	now func() time.Time

	mu      sync.Mutex
	pending map[types.NamespacedName]*expected
}

type expected struct {
	since time.Time
	rvs   map[writtenRef]string
	// deferred is set once a reconcile found these writes missing from the cache and is
	// waiting for them: their echoes must then wake it (see echo).
	deferred bool
}

func newExpectations() *expectations {
	return &expectations{now: time.Now, pending: map[types.NamespacedName]*expected{}}
}

// wrote records that our write of obj, of kind, for service key left it at obj's
// resourceVersion.
func (e *expectations) wrote(key types.NamespacedName, kind writtenKind, obj client.Object) {
	if e == nil || obj.GetResourceVersion() == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.pending[key]
	if x == nil {
		x = &expected{rvs: map[writtenRef]string{}}
		e.pending[key] = x
	}
	x.since = e.now()
	x.rvs[writtenRef{kind, obj.GetName()}] = obj.GetResourceVersion()
}

// echo reports whether obj, as a watch event shows it, is exactly what our last write of it,
// of kind, for service key left, and if so forgets that write: the cache holds it now (event
// handlers run after the store is updated). Such an event is our own write coming back and
// can change nothing a reconcile would do; anything else, someone else's change included,
// is not an echo. Only the last write of an object is remembered, so an earlier one of a
// reconcile's writes (the import's spec before its status) still passes: one idle reconcile
// instead of a missed drift.
func (e *expectations) echo(key types.NamespacedName, kind writtenKind, obj client.Object) bool {
	if e == nil || obj.GetResourceVersion() == "" {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.pending[key]
	if x == nil {
		return false
	}
	if x.deferred {
		// A reconcile is waiting for this write to reach the cache: the event is what ends
		// the wait, rather than the expectationRecheck backstop a second later (which put
		// a second on the p99 of export → import propagation when it was dropped).
		return false
	}
	ref := writtenRef{kind, obj.GetName()}
	if rv, ok := x.rvs[ref]; !ok || rv != obj.GetResourceVersion() {
		return false
	}
	delete(x.rvs, ref)
	if len(x.rvs) == 0 {
		delete(e.pending, key)
	}
	return true
}

// echoes is a predicate that drops the create and update events that are echoes (see echo) of
// our writes of kind; keyOf maps an object to the service it was written for.
func (e *expectations) echoes(kind writtenKind, keyOf func(client.Object) (types.NamespacedName, bool)) predicate.Funcs {
	own := func(o client.Object) bool {
		key, ok := keyOf(o)
		return ok && e.echo(key, kind, o)
	}
	return predicate.Funcs{
		CreateFunc: func(ev event.CreateEvent) bool { return !own(ev.Object) },
		UpdateFunc: func(ev event.UpdateEvent) bool { return !own(ev.ObjectNew) },
	}
}

// forget drops what was expected for key: a removed import has nothing left to wait for.
func (e *expectations) forget(key types.NamespacedName) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.pending, key)
}

// satisfied reports whether cache holds every object written for key at least at the version
// written (or the expectations are older than expectationTTL), forgetting those it holds.
func (e *expectations) satisfied(ctx context.Context, cache client.Reader, key types.NamespacedName) (bool, error) {
	if e == nil {
		return true, nil
	}
	e.mu.Lock()
	x := e.pending[key]
	if x == nil {
		e.mu.Unlock()
		return true, nil
	}
	if e.now().Sub(x.since) > expectationTTL {
		delete(e.pending, key)
		e.mu.Unlock()
		return true, nil
	}
	refs := make(map[writtenRef]string, len(x.rvs))
	for ref, rv := range x.rvs {
		refs[ref] = rv
	}
	e.mu.Unlock()

	// Cache reads outside the lock: other workers need it meanwhile.
	var seen []writtenRef
	all := true
	for ref, rv := range refs {
		obj := ref.kind.object()
		if err := cache.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: ref.name}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				all = false
				continue
			}
			return false, fmt.Errorf("reading %T %s/%s from the cache: %w", obj, key.Namespace, ref.name, err)
		}
		if cmp, err := resourceversion.CompareResourceVersion(obj.GetResourceVersion(), rv); err != nil || cmp >= 0 {
			// A resourceVersion that is not a plain integer cannot be ordered: trust the cache.
			seen = append(seen, ref)
			continue
		}
		all = false
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.pending[key]; x != nil {
		for _, ref := range seen {
			// Only if no newer write was recorded meanwhile (this key is ours alone, but be safe).
			if x.rvs[ref] == refs[ref] {
				delete(x.rvs, ref)
			}
		}
		if len(x.rvs) == 0 {
			delete(e.pending, key)
		} else if !all {
			x.deferred = true
		}
	}
	return all, nil
}
