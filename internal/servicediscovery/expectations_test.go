package servicediscovery

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// fakeCache answers Get from objects by type and name; nothing else is needed here.
type fakeCache []client.Object

func (c fakeCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	for _, o := range c {
		if o.GetName() == key.Name && o.GetNamespace() == key.Namespace && reflect.TypeOf(o) == reflect.TypeOf(obj) {
			reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(o).Elem())
			return nil
		}
	}
	return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
}

func (c fakeCache) List(context.Context, client.ObjectList, ...client.ListOption) error {
	panic("not used")
}

func objMeta(name, rv string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: "shop", Name: name, ResourceVersion: rv}
}

// TestExpectations checks when a reconcile may go ahead after our own writes: only once the
// cache shows each of them (or they are too old to wait for), so that a stale cache never
// makes the import controller repeat a write.
func TestExpectations(t *testing.T) {
	key := types.NamespacedName{Namespace: "shop", Name: "web"}
	other := types.NamespacedName{Namespace: "shop", Name: "db"}
	written := []struct {
		kind writtenKind
		obj  client.Object
	}{
		{writtenImport, &mcsv1beta1.ServiceImport{ObjectMeta: objMeta("web", "12")}},
		{writtenService, &corev1.Service{ObjectMeta: objMeta("derived-web", "11")}},
		{writtenSlice, &discoveryv1.EndpointSlice{ObjectMeta: objMeta("web-east", "13")}},
		{writtenExport, &mcsv1beta1.ServiceExport{ObjectMeta: objMeta("web", "14")}},
	}
	for _, tc := range []struct {
		name    string
		cache   fakeCache
		key     types.NamespacedName
		elapsed time.Duration
		want    bool
		// wantAfter is what a second call says with an empty cache: true when the first call
		// forgot every expectation.
		wantAfter bool
	}{
		{
			name: "cache holds every write",
			cache: fakeCache{
				&mcsv1beta1.ServiceImport{ObjectMeta: objMeta("web", "12")},
				&corev1.Service{ObjectMeta: objMeta("derived-web", "11")},
				&discoveryv1.EndpointSlice{ObjectMeta: objMeta("web-east", "13")},
				&mcsv1beta1.ServiceExport{ObjectMeta: objMeta("web", "14")},
			},
			key: key, want: true, wantAfter: true,
		},
		{
			name: "cache holds newer versions",
			cache: fakeCache{
				&mcsv1beta1.ServiceImport{ObjectMeta: objMeta("web", "20")},
				&corev1.Service{ObjectMeta: objMeta("derived-web", "100")},
				&discoveryv1.EndpointSlice{ObjectMeta: objMeta("web-east", "14")},
				&mcsv1beta1.ServiceExport{ObjectMeta: objMeta("web", "15")},
			},
			key: key, want: true, wantAfter: true,
		},
		{
			name: "the import is older in the cache",
			cache: fakeCache{
				&mcsv1beta1.ServiceImport{ObjectMeta: objMeta("web", "10")},
				&corev1.Service{ObjectMeta: objMeta("derived-web", "11")},
				&discoveryv1.EndpointSlice{ObjectMeta: objMeta("web-east", "13")},
				&mcsv1beta1.ServiceExport{ObjectMeta: objMeta("web", "14")},
			},
			key: key, want: false, wantAfter: false,
		},
		{
			// Same name as the import, another kind: the export's status patch is its own wait.
			name: "the export's status patch is not in the cache yet",
			cache: fakeCache{
				&mcsv1beta1.ServiceImport{ObjectMeta: objMeta("web", "12")},
				&corev1.Service{ObjectMeta: objMeta("derived-web", "11")},
				&discoveryv1.EndpointSlice{ObjectMeta: objMeta("web-east", "13")},
				&mcsv1beta1.ServiceExport{ObjectMeta: objMeta("web", "9")},
			},
			key: key, want: false, wantAfter: false,
		},
		{
			name: "a new slice is not in the cache yet",
			cache: fakeCache{
				&mcsv1beta1.ServiceImport{ObjectMeta: objMeta("web", "12")},
				&corev1.Service{ObjectMeta: objMeta("derived-web", "11")},
			},
			key: key, want: false, wantAfter: false,
		},
		{
			name:  "expectations too old to wait for",
			cache: fakeCache{},
			key:   key, elapsed: expectationTTL + time.Second, want: true, wantAfter: true,
		},
		{
			name:  "another service waits for nothing",
			cache: fakeCache{},
			key:   other, want: true, wantAfter: false,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			now := start
			e := newExpectations()
			e.now = func() time.Time { return now }
			for _, w := range written {
				e.wrote(key, w.kind, w.obj)
			}
			now = start.Add(tc.elapsed)
			got, err := e.satisfied(t.Context(), tc.cache, tc.key)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("satisfied = %v, want %v", got, tc.want)
			}
			after, err := e.satisfied(t.Context(), fakeCache{}, key)
			if err != nil {
				t.Fatal(err)
			}
			if after != tc.wantAfter {
				t.Errorf("then with an empty cache: satisfied = %v, want %v", after, tc.wantAfter)
			}
		})
	}

	t.Run("forget", func(t *testing.T) {
		e := newExpectations()
		e.wrote(key, writtenImport, written[0].obj)
		e.forget(key)
		if ok, err := e.satisfied(t.Context(), fakeCache{}, key); err != nil || !ok {
			t.Errorf("satisfied after forget = %v, %v; want true", ok, err)
		}
	})
	t.Run("nil waits for nothing", func(t *testing.T) {
		var e *expectations
		e.wrote(key, writtenImport, written[0].obj)
		if ok, err := e.satisfied(t.Context(), fakeCache{}, key); err != nil || !ok {
			t.Errorf("satisfied = %v, %v; want true", ok, err)
		}
	})
}

// TestExpectationsConcurrent exercises expectations from several workers at once, as the
// import controller's workers share them (run with -race).
func TestExpectationsConcurrent(t *testing.T) {
	e := newExpectations()
	cache := fakeCache{&mcsv1beta1.ServiceImport{ObjectMeta: objMeta("web", "5")}}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			key := types.NamespacedName{Namespace: "shop", Name: fmt.Sprintf("svc-%d", i%3)}
			for j := range 100 {
				e.wrote(key, writtenImport, &mcsv1beta1.ServiceImport{ObjectMeta: objMeta("web", strconv.Itoa(j+1))})
				if _, err := e.satisfied(t.Context(), cache, key); err != nil {
					t.Error(err)
				}
				if j%10 == 0 {
					e.forget(key)
				}
			}
		})
	}
	wg.Wait()
}

// TestEcho checks which watch events of our own writes are dropped: exactly the version the
// last write left, unless a reconcile is waiting for it, which the event must wake.
func TestEcho(t *testing.T) {
	key := types.NamespacedName{Namespace: "shop", Name: "web"}
	si := func(rv string) client.Object { return &mcsv1beta1.ServiceImport{ObjectMeta: objMeta("web", rv)} }
	for _, tc := range []struct {
		name     string
		write    string // the resourceVersion our write left; "" for none
		deferred bool   // a reconcile found the write missing from the cache first
		event    string // the resourceVersion the event shows
		want     bool
	}{
		{name: "the version we wrote", write: "12", event: "12", want: true},
		{name: "a later version: someone else's change", write: "12", event: "13", want: false},
		{name: "an earlier version", write: "12", event: "11", want: false},
		{name: "nothing written", event: "12", want: false},
		{name: "the version we wrote, a reconcile waiting for it", write: "12", deferred: true, event: "12", want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newExpectations()
			if tc.write != "" {
				e.wrote(key, writtenImport, si(tc.write))
			}
			if tc.deferred {
				if ok, err := e.satisfied(t.Context(), fakeCache{}, key); err != nil || ok {
					t.Fatalf("satisfied with an empty cache = %v, %v; want false", ok, err)
				}
			}
			if got := e.echo(key, writtenImport, si(tc.event)); got != tc.want {
				t.Errorf("echo = %v, want %v", got, tc.want)
			}
			if tc.want {
				if ok, _ := e.satisfied(t.Context(), fakeCache{}, key); !ok {
					t.Error("an echo left its expectation pending")
				}
			}
		})
	}
}
