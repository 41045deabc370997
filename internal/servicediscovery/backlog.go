package servicediscovery

import (
	"context"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// controller-runtime's priority queue serves the events of an informer's initial list after
// every other event, so that a restarted controller's backlog does not hold up what users do
// meanwhile. An agent's backlog is larger than its own initial lists, though: when clusters
// start together, or one joins, the other agents publish exports that existed long before, and
// these reach this agent as new hub objects, one event at a time, ahead of an export made a
// second ago. backlogLast puts them where they belong, by when the export was made: an export
// older than this agent is backlog, whichever way its objects arrive; an export made since is
// served first, even when its object comes in the initial list (it was made as the agent
// started). It only orders work, so a clock skew between clusters at worst serves an export
// in arrival order, as without it.
type backlogLast[T client.Object] struct {
	handler.TypedEventHandler[T, reconcile.Request]
	// started is when this agent started, truncated to the second as creation times are.
	started time.Time
	// created returns when the export behind an object was made; false when it cannot
	// tell, which leaves the event's priority as controller-runtime sets it.
	created func(context.Context, T) (time.Time, bool)
}

func newBacklogLast[T client.Object](h handler.TypedEventHandler[T, reconcile.Request], started time.Time, created func(context.Context, T) (time.Time, bool)) backlogLast[T] {
	return backlogLast[T]{TypedEventHandler: h, started: started.Truncate(time.Second), created: created}
}

// Create marks the event as the initial list's when the export predates the agent, which the
// wrapped handler turns into a low priority; Update, Delete and Generic pass through: a change
// of an existing export (an endpoint becoming ready) is never backlog.
func (h backlogLast[T]) Create(ctx context.Context, e event.TypedCreateEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if t, ok := h.created(ctx, e.Object); ok {
		e.IsInInitialList = t.Before(h.started)
	}
	h.TypedEventHandler.Create(ctx, e, q)
}

// objectCreated is the creation time of a ServiceExport itself.
func objectCreated[T client.Object](_ context.Context, o T) (time.Time, bool) {
	t := o.GetCreationTimestamp()
	return t.Time, !t.IsZero()
}

// recordCreated is the export creation time a hub record carries.
func recordCreated(_ context.Context, rec *mcsv1beta1.ServiceImport) (time.Time, bool) {
	t := parseRecord(rec).Created
	return t, !t.IsZero()
}

// sliceCreated is the export creation time of the record a hub slice was published with, from
// hub, a cache indexed by hubServiceIndex; false if the record is not there (yet).
func sliceCreated(hub client.Reader, hubNamespace string) func(context.Context, *discoveryv1.EndpointSlice) (time.Time, bool) {
	return func(ctx context.Context, s *discoveryv1.EndpointSlice) (time.Time, bool) {
		key := exportedServiceKey(s)
		cluster := s.GetLabels()[mcsv1beta1.LabelSourceCluster]
		if len(key) == 0 || cluster == "" {
			return time.Time{}, false
		}
		records := &mcsv1beta1.ServiceImportList{}
		if err := hub.List(ctx, records, client.InNamespace(hubNamespace), client.MatchingFields{hubServiceIndex: key[0]}); err != nil {
			return time.Time{}, false // only a cache read: the cache is shutting down
		}
		for i := range records.Items {
			if records.Items[i].Labels[mcsv1beta1.LabelSourceCluster] == cluster {
				return recordCreated(ctx, &records.Items[i])
			}
		}
		return time.Time{}, false
	}
}
