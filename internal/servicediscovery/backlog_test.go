package servicediscovery

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// TestBacklogLastPriority feeds events through backlogLast into controller-runtime's own
// priority queue and reads the priority each request is served at: low (the initial list's)
// exactly when the export predates the agent.
func TestBacklogLastPriority(t *testing.T) {
	started := time.Date(2026, 11, 23, 12, 0, 0, 600_000_000, time.UTC)
	tests := []struct {
		name      string
		created   time.Time // zero: the creation time is unknown
		initial   bool      // the event comes in the informer's initial list
		update    bool      // an Update event rather than a Create
		wantFirst bool      // served at normal priority
	}{
		{name: "export older than the agent, published since", created: started.Add(-time.Hour), wantFirst: false},
		{name: "export older than the agent, initial list", created: started.Add(-time.Hour), initial: true, wantFirst: false},
		{name: "export made since, published since", created: started.Add(time.Minute), wantFirst: true},
		{name: "export made as the agent started, initial list", created: started.Add(time.Second), initial: true, wantFirst: true},
		// Creation times have whole seconds: the agent's own second counts as since.
		{name: "export made in the agent's starting second", created: started.Truncate(time.Second), wantFirst: true},
		{name: "unknown creation time, initial list", initial: true, wantFirst: false},
		{name: "unknown creation time, published since", wantFirst: true},
		{name: "old export changed (an endpoint became ready)", created: started.Add(-time.Hour), update: true, wantFirst: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := priorityqueue.New[reconcile.Request]("backlog-test")
			defer q.ShutDown()
			h := newBacklogLast(&handler.EnqueueRequestForObject{}, started, func(context.Context, client.Object) (time.Time, bool) {
				return tc.created, !tc.created.IsZero()
			})
			obj := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc", ResourceVersion: "2"}}
			if tc.update {
				old := obj.DeepCopy()
				old.ResourceVersion = "1"
				h.Update(t.Context(), event.UpdateEvent{ObjectOld: old, ObjectNew: obj}, q)
			} else {
				h.Create(t.Context(), event.CreateEvent{Object: obj, IsInInitialList: tc.initial}, q)
			}
			req, priority, _ := q.GetWithPriority()
			if req.NamespacedName != (types.NamespacedName{Namespace: "ns", Name: "svc"}) {
				t.Fatalf("served %v, want ns/svc", req)
			}
			if first := priority > handler.LowPriority; first != tc.wantFirst {
				t.Errorf("served at priority %d; want it served before the backlog: %v", priority, tc.wantFirst)
			}
		})
	}
}

// TestBacklogLastOrder checks the point of it all: an export made after the agent started is
// served before a thousand older ones published just before it.
func TestBacklogLastOrder(t *testing.T) {
	started := time.Now()
	q := priorityqueue.New[reconcile.Request]("backlog-order-test")
	defer q.ShutDown()
	h := newBacklogLast(&handler.EnqueueRequestForObject{}, started, objectCreated[client.Object])
	for i := range 1000 {
		old := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "bulk", Name: fmt.Sprintf("svc-%04d", i), CreationTimestamp: metav1.NewTime(started.Add(-time.Minute))}}
		h.Create(t.Context(), event.CreateEvent{Object: old}, q)
	}
	fresh := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "probe", Name: "new", CreationTimestamp: metav1.NewTime(started.Add(time.Second))}}
	h.Create(t.Context(), event.CreateEvent{Object: fresh}, q)
	if req, _, _ := q.GetWithPriority(); req.Namespace != "probe" {
		t.Fatalf("served %v first, want the export made after the agent started", req)
	}
}

// TestSliceCreated checks that a hub slice is dated by its own cluster's record of the service,
// not another cluster's.
func TestSliceCreated(t *testing.T) {
	const hubNS = "octopus-hub"
	key := types.NamespacedName{Namespace: "web", Name: "api"}
	west := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	east := west.Add(24 * time.Hour)
	var objs []client.Object
	for cluster, created := range map[string]time.Time{"west": west, "east": east} {
		rec, _, err := Publication(hubNS, cluster,
			&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, CreationTimestamp: metav1.NewTime(created)}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Spec: corev1.ServiceSpec{ClusterIP: "192.0.2.10"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, rec)
	}
	hub := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(objs...).
		WithIndex(&mcsv1beta1.ServiceImport{}, hubServiceIndex, exportedServiceKey).Build()
	created := sliceCreated(hub, hubNS)
	slice := func(cluster string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: "s", Labels: hubLabels(key, cluster)}}
	}
	for cluster, want := range map[string]time.Time{"west": west, "east": east} {
		if got, ok := created(t.Context(), slice(cluster)); !ok || !got.Equal(want) {
			t.Errorf("slice of %s dated %v (found %v), want %v", cluster, got, ok, want)
		}
	}
	if got, ok := created(t.Context(), slice("north")); ok {
		t.Errorf("slice of a cluster without a record dated %v, want unknown", got)
	}
	unlabelled := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: "s", Labels: map[string]string{v1alpha1.ClusterLabel: "west"}}}
	if got, ok := created(t.Context(), unlabelled); ok {
		t.Errorf("slice without service labels dated %v, want unknown", got)
	}
}
