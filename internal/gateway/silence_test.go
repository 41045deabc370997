package gateway

import (
	"maps"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// TestSilence: a cluster whose heartbeat stops is silent after its lease duration plus the
// TTL while others keep renewing; nobody is silent while no Lease changes (the hub is down),
// nor right after the hub comes back; renewing ends the silence; other Leases do not count.
func TestSilence(t *testing.T) {
	const ttl = time.Minute
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lease := func(id string, renew time.Time) coordinationv1.Lease {
		return coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: id, Labels: map[string]string{v1alpha1.ClusterLabel: id}},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renew}, LeaseDurationSeconds: new(int32(10))}}
	}
	s := newSilence(ttl)
	silent := func(now time.Time, leases ...coordinationv1.Lease) []string {
		return slices.Sorted(maps.Keys(s.observe(leases, now)))
	}
	// a and b renew every 5 s; c stops at t0.
	at := func(d time.Duration, renewing ...string) []coordinationv1.Lease {
		out := []coordinationv1.Lease{lease("c", t0)}
		for _, id := range renewing {
			out = append(out, lease(id, t0.Add(d)))
		}
		return out
	}
	hubLease := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.HubGatewayLeaseName}, Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: t0}}}
	var got []string
	for d := time.Duration(0); d <= 60*time.Second; d += 5 * time.Second {
		got = silent(t0.Add(d), append(at(d, "a", "b"), hubLease)...)
	}
	if len(got) != 0 {
		t.Fatalf("silent after 60s: %v, want nobody before lease duration + TTL", got)
	}
	for d := 65 * time.Second; d <= 80*time.Second; d += 5 * time.Second {
		got = silent(t0.Add(d), at(d, "a", "b")...)
	}
	if !slices.Equal(got, []string{"c"}) {
		t.Fatalf("silent after 80s: %v, want [c]", got)
	}
	// The hub goes away for ten minutes: no Lease changes, nobody is silent.
	for d := 85 * time.Second; d <= 11*time.Minute; d += 5 * time.Second {
		got = silent(t0.Add(d), at(80*time.Second, "a", "b")...)
	}
	if len(got) != 0 {
		t.Fatalf("silent while no Lease changes: %v, want nobody", got)
	}
	// It is back: a renews first, b a little later; neither is silent meanwhile.
	back := t0.Add(11*time.Minute + 5*time.Second)
	got = silent(back, append(at(80*time.Second, "b"), lease("a", back))...)
	if len(got) != 0 {
		t.Fatalf("silent right after the hub came back: %v, want nobody", got)
	}
	got = silent(back.Add(5*time.Second), lease("c", t0), lease("a", back), lease("b", back.Add(5*time.Second)))
	if len(got) != 0 {
		t.Fatalf("silent once everyone renewed: %v, want nobody", got)
	}
	// c renews again: no longer silent.
	now := back.Add(90 * time.Second)
	if got = silent(now, lease("a", now), lease("b", now), lease("c", now)); len(got) != 0 {
		t.Fatalf("silent after c renewed: %v", got)
	}
}

// TestComputeRefusesSilentCluster: a silent cluster's Peer gets no tunnel; the others keep theirs.
func TestComputeRefusesSilentCluster(t *testing.T) {
	local := Local{ClusterID: "a", Backend: v1alpha1.BackendWireGuard, Subnets: prefixes("10.1.0.0/16"), Silent: map[string]bool{"c": true}}
	d := computeHonest(local, []v1alpha1.Peer{peer("b", keyB, "203.0.113.17", 4500, "10.2.0.0/16"), peer("c", keyC, "203.0.113.33", 4500, "10.3.0.0/16")})
	if got := refusedReasons(t, d); len(got) != 1 || got["c"] != ReasonSilent {
		t.Fatalf("refused %v, want c as %s", got, ReasonSilent)
	}
	if len(d.Tunnel.Peers) != 1 || d.Tunnel.Peers[0].Cluster != "b" {
		t.Fatalf("tunnels %+v, want b's only", d.Tunnel.Peers)
	}
}
