package servicediscovery

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// heartbeatLease is cluster id's Lease, renewed age before now, lasting 10s.
func heartbeatLease(id string, now time.Time, age time.Duration) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: id, Labels: map[string]string{v1alpha1.ClusterLabel: id}},
		Spec: coordinationv1.LeaseSpec{
			LeaseDurationSeconds: new(int32(10)),
			RenewTime:            &metav1.MicroTime{Time: now.Add(-age)},
		},
	}
}

// TestLivenessVerdicts checks when a cluster counts as withdrawn (TTL one minute, Leases of
// 10s): only once its Lease expired more than the TTL ago, and only while this cluster's own
// fresh Lease shows the hub reachable; the ages below straddle 70s = lease + TTL.
func TestLivenessVerdicts(t *testing.T) {
	now := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		self   string
		leases []*coordinationv1.Lease
		// deleted names Leases deleted after the others were observed.
		deleted []string
		want    map[string]bool
	}{{
		name:   "fresh Leases: nobody withdrawn",
		self:   "west",
		leases: []*coordinationv1.Lease{heartbeatLease("west", now, time.Second), heartbeatLease("east", now, 5*time.Second)},
		want:   map[string]bool{"west": false, "east": false},
	}, {
		name:   "expired, but not for the TTL yet",
		self:   "west",
		leases: []*coordinationv1.Lease{heartbeatLease("west", now, time.Second), heartbeatLease("east", now, 69*time.Second)},
		want:   map[string]bool{"east": false},
	}, {
		name:   "expired for longer than the TTL while the hub is reachable: withdrawn",
		self:   "west",
		leases: []*coordinationv1.Lease{heartbeatLease("west", now, time.Second), heartbeatLease("east", now, 71*time.Second)},
		want:   map[string]bool{"west": false, "east": true},
	}, {
		name:   "our own Lease stale too: the hub is unreachable, nothing withdrawn",
		self:   "west",
		leases: []*coordinationv1.Lease{heartbeatLease("west", now, 20*time.Second), heartbeatLease("east", now, 5*time.Minute)},
		want:   map[string]bool{"west": false, "east": false},
	}, {
		name:   "another cluster's fresh Lease is no proof when we know our own ID",
		self:   "west",
		leases: []*coordinationv1.Lease{heartbeatLease("north", now, time.Second), heartbeatLease("east", now, 5*time.Minute)},
		want:   map[string]bool{"east": false},
	}, {
		name:   "without an own ID, any fresh Lease proves the hub reachable",
		leases: []*coordinationv1.Lease{heartbeatLease("north", now, time.Second), heartbeatLease("east", now, 5*time.Minute)},
		want:   map[string]bool{"north": false, "east": true},
	}, {
		name:    "the Lease deleted (the cluster left): no longer withdrawn here",
		self:    "west",
		leases:  []*coordinationv1.Lease{heartbeatLease("west", now, time.Second), heartbeatLease("east", now, 5*time.Minute)},
		deleted: []string{"east"},
		want:    map[string]bool{"east": false},
	}, {
		name:   "renewed after a withdrawal: restored",
		self:   "west",
		leases: []*coordinationv1.Lease{heartbeatLease("west", now, time.Second), heartbeatLease("east", now, 5*time.Minute), heartbeatLease("east", now, 0)},
		want:   map[string]bool{"east": false},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLiveness(time.Minute, tc.self, nil, "hub")
			l.now = func() time.Time { return now }
			t.Cleanup(func() {
				for _, tm := range l.timers {
					tm.Stop()
				}
			})
			for _, lease := range tc.leases {
				l.observe(t.Context(), nil, lease, false)
			}
			for _, id := range tc.deleted {
				l.observe(t.Context(), nil, heartbeatLease(id, now, 0), true)
			}
			for id, want := range tc.want {
				if got := l.Withdrawn(id); got != want {
					t.Errorf("Withdrawn(%s) = %v, want %v", id, got, want)
				}
			}
		})
	}
}

// TestLivenessHeartbeatMetric: every cluster's heartbeat Lease renewal on the hub is exported
// as it is seen, and goes with the Lease.
func TestLivenessHeartbeatMetric(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	l := newLiveness(time.Minute, "self", nil, "hub-ns")
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	read := func() (float64, bool) {
		m := controllerMetric(t, "octopus_hub_heartbeat_renew_timestamp_seconds", "cluster", "metric-east")
		return m.GetGauge().GetValue(), m != nil
	}
	for _, step := range []struct {
		name    string
		lease   *coordinationv1.Lease
		deleted bool
		want    float64 // 0: no series
	}{
		{name: "renewed 5s ago", lease: heartbeatLease("metric-east", now, 5*time.Second), want: float64(now.Add(-5 * time.Second).Unix())},
		{name: "renewed now", lease: heartbeatLease("metric-east", now, 0), want: float64(now.Unix())},
		{name: "a gateway's election Lease: ignored", lease: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "octopus-gateway",
			Labels: map[string]string{v1alpha1.ClusterLabel: "metric-east"}}}, want: float64(now.Unix())},
		{name: "Lease deleted (the cluster left)", lease: heartbeatLease("metric-east", now, 0), deleted: true},
	} {
		l.observe(t.Context(), q, step.lease, step.deleted)
		got, ok := read()
		if step.want == 0 && ok {
			t.Errorf("%s: series left: %v", step.name, got)
		} else if step.want != 0 && got != step.want {
			t.Errorf("%s: got %v (present %t), want %v", step.name, got, ok, step.want)
		}
	}
}
