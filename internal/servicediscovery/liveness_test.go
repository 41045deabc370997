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
		// hubBack is how long ago the agent found the hub back at start; 0: it never waited.
		hubBack time.Duration
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
		name:   "first sight in any order is no outage: a long-dead cluster seen before a live one",
		self:   "west",
		leases: []*coordinationv1.Lease{heartbeatLease("east", now, 5*time.Minute), heartbeatLease("west", now, time.Second)},
		want:   map[string]bool{"west": false, "east": true},
	}, {
		name:    "the agent found the hub down at start: expiry counts from its return",
		self:    "west",
		hubBack: 59 * time.Second,
		leases:  []*coordinationv1.Lease{heartbeatLease("west", now, time.Second), heartbeatLease("east", now, 5*time.Minute)},
		want:    map[string]bool{"east": false},
	}, {
		name:    "the hub returned more than the TTL ago: withdrawn",
		self:    "west",
		hubBack: 61 * time.Second,
		leases:  []*coordinationv1.Lease{heartbeatLease("west", now, time.Second), heartbeatLease("east", now, 5*time.Minute)},
		want:    map[string]bool{"east": true},
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
			var back time.Time
			if tc.hubBack != 0 {
				back = now.Add(-tc.hubBack)
			}
			l := newLiveness(time.Minute, tc.self, nil, "hub", back)
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

// TestLivenessAcrossHubOutage follows one agent's view through a hub outage longer than lease +
// TTL (north's Lease lasts 10s, the TTL is one minute): no cluster can renew while the hub is down, so the live
// ones are not withdrawn when it returns, before they had the TTL to renew; a cluster withdrawn
// before the outage stays withdrawn; a cluster that does not renew is withdrawn the TTL after the
// hub returned. A CI run withdrew and restored a live cluster's import right after an outage.
func TestLivenessAcrossHubOutage(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	clock := t0
	l := newLiveness(time.Minute, "west", nil, "hub", time.Time{})
	l.now = func() time.Time { return clock }
	t.Cleanup(func() {
		for _, tm := range l.timers {
			tm.Stop()
		}
	})
	renewal := func(id string, at time.Duration) *coordinationv1.Lease { return heartbeatLease(id, t0.Add(at), 0) }
	// west's own Lease lasts two minutes, so that it renews seldom in this test and the hub
	// counts as silent only when nobody renewed for longer than that.
	westRenewal := func(at time.Duration) *coordinationv1.Lease {
		lease := renewal("west", at)
		lease.Spec.LeaseDurationSeconds = new(int32(120))
		return lease
	}
	for _, step := range []struct {
		name string
		at   time.Duration // the clock, from t0
		// lease is observed at the clock; nil: only the timers fire.
		lease *coordinationv1.Lease
		want  map[string]bool
	}{
		{name: "before: north renews", lease: renewal("north", 0), want: map[string]bool{"north": false}},
		{name: "before: west renews", lease: westRenewal(0), want: map[string]bool{"west": false}},
		{name: "before: gone, silent for an hour", at: time.Second, lease: renewal("gone", -time.Hour), want: map[string]bool{"gone": true}},
		{name: "the hub is back after three minutes and west renews", at: 3 * time.Minute, lease: westRenewal(3 * time.Minute),
			want: map[string]bool{"north": false, "gone": true}},
		{name: "north still has time to renew", at: 3*time.Minute + 59*time.Second, lease: westRenewal(3*time.Minute + 59*time.Second),
			want: map[string]bool{"north": false, "gone": true}},
		{name: "the TTL after the hub's return passed", at: 4*time.Minute + time.Second, want: map[string]bool{"north": true, "gone": true}},
		{name: "north renews at last", at: 4*time.Minute + 2*time.Second, lease: renewal("north", 4*time.Minute+2*time.Second),
			want: map[string]bool{"north": false, "gone": true}},
	} {
		clock = t0.Add(step.at)
		if step.lease != nil {
			l.observe(t.Context(), nil, step.lease, false)
		} else {
			l.fire(t.Context())
		}
		for id, want := range step.want {
			if got := l.Withdrawn(id); got != want {
				t.Errorf("%s: Withdrawn(%s) = %v, want %v", step.name, id, got, want)
			}
		}
	}
}

// TestLivenessHeartbeatMetric: every cluster's heartbeat Lease renewal on the hub is exported
// as it is seen, and goes with the Lease.
func TestLivenessHeartbeatMetric(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	l := newLiveness(time.Minute, "self", nil, "hub-ns", time.Time{})
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
