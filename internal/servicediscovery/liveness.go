package servicediscovery

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/heartbeat"
)

// DefaultStaleClusterTTL is how long a cluster's heartbeat Lease may stay expired before its
// exported endpoints are withdrawn everywhere. Long enough that an agent restart or rollout
// (the agent dies, the cluster's pods keep serving) never withdraws anything; short enough that
// a cluster that is really gone stops receiving traffic within a few minutes.
const DefaultStaleClusterTTL = 2 * time.Minute

// liveness tracks, from every cluster's heartbeat Lease on the hub, which clusters are
// withdrawn: their Lease has been expired (renewTime + leaseDurationSeconds) for longer than
// ttl. It is driven by Lease events and by one timer per cluster set for the instant its
// withdrawal becomes due; nothing polls. When a cluster's state flips, every service it
// exports is enqueued for the import reconciler, which leaves a withdrawn cluster's records and
// slices out (see ImportReconciler.fromHub).
//
// A cluster is withdrawn only while the hub is demonstrably reachable, i.e. while this
// cluster's own Lease (self) is fresh in the cache: when the hub is down every Lease looks
// expired, and imports keep their last state then (docs/architecture.md §6b). A cluster
// without a Lease (not heartbeating yet, or gone with `leave`, which withdraws its records
// itself) is never withdrawn here.
//
// No cluster can renew its Lease while the hub is down, so after an outage every Lease looks
// expired, for as long as the outage lasted. Expiry therefore counts only from when the hub was
// last seen back (hubBack): either the agent found it unreachable at start, or a Lease of this
// cache was renewed more than a lease duration after any other renewal (nobody could renew in
// between). Without that, an outage longer than lease + TTL would withdraw and then restore
// every other cluster's endpoints the moment the hub returned, before they renewed.
type liveness struct {
	ttl time.Duration
	// self is this cluster's ID; "" means any fresh Lease proves the hub reachable.
	self string
	// records lists the hub records of a cluster (the import side's hub cache).
	records client.Reader
	ns      string
	now     func() time.Time

	mu sync.Mutex
	// hubBack is when the hub was last seen to return from an outage; zero if never.
	hubBack time.Time
	// latestRenewal is the latest renewal of any Lease seen.
	latestRenewal time.Time
	// leases holds the last seen Lease of every cluster, by cluster ID.
	leases map[string]*coordinationv1.Lease
	// withdrawn is the set of clusters currently withdrawn.
	withdrawn map[string]bool
	timers    map[string]*time.Timer
	// queue is the import controller's queue, known from the first Lease event.
	queue workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// newLiveness returns the liveness of the clusters whose Leases are in hubNamespace. hubBack is
// when the hub answered after being found unreachable at start (zero if it answered at once).
func newLiveness(ttl time.Duration, self string, records client.Reader, hubNamespace string, hubBack time.Time) *liveness {
	return &liveness{
		ttl: ttl, self: self, records: records, ns: hubNamespace, now: time.Now, hubBack: hubBack,
		leases: map[string]*coordinationv1.Lease{}, withdrawn: map[string]bool{}, timers: map[string]*time.Timer{},
	}
}

// Withdrawn reports whether clusterID's endpoints are withdrawn.
func (l *liveness) Withdrawn(clusterID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.withdrawn[clusterID]
}

// handler feeds Lease events of the hub cache into l.
func (l *liveness) handler() handler.TypedEventHandler[*coordinationv1.Lease, reconcile.Request] {
	return handler.TypedFuncs[*coordinationv1.Lease, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*coordinationv1.Lease], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			l.observe(ctx, q, e.Object, false)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*coordinationv1.Lease], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			l.observe(ctx, q, e.ObjectNew, false)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*coordinationv1.Lease], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			l.observe(ctx, q, e.Object, true)
		},
	}
}

// leaseCluster is the cluster a heartbeat Lease belongs to: its label, which the hub's
// admission policy guarantees for Leases written by clusters.
func leaseCluster(lease *coordinationv1.Lease) string {
	return lease.Labels[v1alpha1.ClusterLabel]
}

func (l *liveness) observe(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], lease *coordinationv1.Lease, deleted bool) {
	id := leaseCluster(lease)
	if id == "" || lease.Name != id {
		return // not a heartbeat Lease (e.g. a gateway's leader-election Lease)
	}
	l.mu.Lock()
	l.queue = q
	if deleted {
		delete(l.leases, id)
		clusterHeartbeat.DeleteLabelValues(id)
	} else {
		if lease.Spec.RenewTime != nil {
			l.noteRenewalLocked(ctx, id, lease)
			clusterHeartbeat.WithLabelValues(id).Set(float64(lease.Spec.RenewTime.UnixMicro()) / 1e6)
		}
		l.leases[id] = lease
	}
	flipped := l.evaluateLocked(ctx)
	l.mu.Unlock()
	l.enqueue(ctx, flipped)
}

// noteRenewalLocked records lease's renewal and, when it is a Lease already seen renewed more
// than a lease duration after every renewal before it, that the hub is back from an outage.
// Only Leases already seen count: the first sight of every Lease (the cache's initial list)
// comes in no particular order, and a long-dead cluster's Lease followed by a live one is no
// outage.
func (l *liveness) noteRenewalLocked(ctx context.Context, id string, lease *coordinationv1.Lease) {
	renewed := lease.Spec.RenewTime.Time
	if _, seen := l.leases[id]; seen && !l.latestRenewal.IsZero() && renewed.Sub(l.latestRenewal) > leaseDuration(lease) {
		l.hubBack = l.now()
		logf.FromContext(ctx).Info("The hub accepted no heartbeat for longer than a Lease lasts; every cluster's expiry counts from now",
			"cluster", id, "silentFor", renewed.Sub(l.latestRenewal).Round(time.Second).String())
	}
	if renewed.After(l.latestRenewal) {
		l.latestRenewal = renewed
	}
}

// evaluateLocked recomputes every cluster's state (a Lease event may be the proof that the hub
// is reachable again, which matters for all of them), re-arms the timers and returns the
// clusters whose state flipped.
func (l *liveness) evaluateLocked(ctx context.Context) []string {
	now := l.now()
	reachable := l.hubReachableLocked(now)
	var flipped []string
	for id := range l.withdrawn {
		if _, ok := l.leases[id]; !ok {
			delete(l.withdrawn, id)
			flipped = append(flipped, id)
		}
	}
	// A withdrawal due while the hub was down waits for the TTL after it returned; one made
	// before stays (only the cluster's renewal restores it).
	notBefore := l.hubBack.Add(l.ttl)
	for id, lease := range l.leases {
		due, ok := withdrawalDue(lease, l.ttl)
		if t := l.timers[id]; t != nil {
			t.Stop()
			delete(l.timers, id)
		}
		if !ok {
			continue
		}
		switch {
		case now.Before(due):
			if l.withdrawn[id] {
				delete(l.withdrawn, id)
				flipped = append(flipped, id)
				logf.FromContext(ctx).Info("Restored the endpoints of a cluster whose heartbeat resumed", "cluster", id)
			}
			l.arm(ctx, id, now, latest(due, notBefore))
		case l.withdrawn[id]:
		case now.Before(notBefore):
			l.arm(ctx, id, now, notBefore)
		case reachable:
			l.withdrawn[id] = true
			flipped = append(flipped, id)
			logf.FromContext(ctx).Info("Withdrew the endpoints of a cluster whose heartbeat Lease expired", "cluster", id,
				"lastRenewal", lease.Spec.RenewTime.Time, "ttl", l.ttl.String())
		}
	}
	return flipped
}

// arm sets id's timer for the instant at.
func (l *liveness) arm(ctx context.Context, id string, now, at time.Time) {
	l.timers[id] = time.AfterFunc(at.Sub(now), func() { l.fire(ctx) })
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// fire is a timer's callback: some cluster's withdrawal became due.
func (l *liveness) fire(ctx context.Context) {
	l.mu.Lock()
	flipped := l.evaluateLocked(ctx)
	l.mu.Unlock()
	l.enqueue(ctx, flipped)
}

// hubReachableLocked reports whether the Leases in the cache show the hub accepting heartbeats
// now: our own Lease is fresh, or, without an own ID, any Lease is.
func (l *liveness) hubReachableLocked(now time.Time) bool {
	for id, lease := range l.leases {
		if (l.self == "" || id == l.self) && heartbeat.State(lease, now) == heartbeat.StateConnected {
			return true
		}
	}
	return false
}

// enqueue sends every service that the clusters export to the import reconciler.
func (l *liveness) enqueue(ctx context.Context, clusters []string) {
	l.mu.Lock()
	q := l.queue
	l.mu.Unlock()
	if q == nil {
		return
	}
	for _, id := range clusters {
		records := &mcsv1beta1.ServiceImportList{}
		if err := l.records.List(ctx, records, client.InNamespace(l.ns), client.MatchingLabels{mcsv1beta1.LabelSourceCluster: id}); err != nil {
			// Only a cache read, failing only while shutting down.
			logf.FromContext(ctx).Error(err, "Could not list the exported services of a cluster whose liveness changed", "cluster", id)
			continue
		}
		for i := range records.Items {
			for _, req := range hubService(ctx, &records.Items[i]) {
				q.Add(req)
			}
		}
	}
}

// withdrawalDue returns when the endpoints of lease's cluster are to be withdrawn: ttl after
// the Lease expires. false when the Lease was never renewed.
func withdrawalDue(lease *coordinationv1.Lease, ttl time.Duration) (time.Time, bool) {
	if lease.Spec.RenewTime == nil {
		return time.Time{}, false
	}
	return lease.Spec.RenewTime.Add(leaseDuration(lease) + ttl), true
}

// leaseDuration is how long lease lasts after a renewal.
func leaseDuration(lease *coordinationv1.Lease) time.Duration {
	if s := lease.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		return time.Duration(*s) * time.Second
	}
	return 3 * heartbeat.DefaultInterval
}
