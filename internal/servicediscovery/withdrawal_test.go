package servicediscovery_test

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/hub"
)

// restart starts member's agent again after f.stop[member] stopped it.
func (f *fabric) restart(t *testing.T, member string) {
	t.Helper()
	f.stop[member] = startAgent(t, member, f.env.Cluster(member).RESTConfig(), f.opts)
}

// lastRenewal returns when member last renewed its heartbeat Lease on the hub.
func (f *fabric) lastRenewal(t *testing.T, member string) time.Time {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := f.hub.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: hub.HeartbeatLeaseName(member)}, l); err != nil {
		t.Fatalf("reading the heartbeat Lease of %s: %v", member, err)
	}
	if l.Spec.RenewTime == nil {
		t.Fatalf("the heartbeat Lease of %s was never renewed", member)
	}
	return l.Spec.RenewTime.Time
}

// TestStaleClusterWithdrawal stops a cluster's agent without leaving: once its heartbeat Lease
// has been expired for the TTL, the other clusters drop its endpoints (and an import it alone
// exported), while its records stay on the hub; when the agent comes back, so do its endpoints.
func TestStaleClusterWithdrawal(t *testing.T) {
	// Short enough for a quick test, long enough that the agents that keep running never miss
	// lease + TTL on a busy 2-core machine (a CI run at load average 38 did with 1 s + 2 s).
	const (
		leaseDuration = 3 * time.Second
		ttl           = 5 * time.Second
	)
	f := newFabricWith(t, agent.ControllerOptions{HeartbeatInterval: 500 * time.Millisecond, LeaseDuration: leaseDuration, StaleClusterTTL: ttl},
		"east", "west", "north")
	east, north := f.members["east"], f.members["north"]
	for _, m := range []string{"east", "west", "north"} {
		create(t, f.members[m], namespace("shop"))
	}
	solo := types.NamespacedName{Namespace: "shop", Name: "solo"}     // exported by east only
	shared := types.NamespacedName{Namespace: "shop", Name: "shared"} // by east and north
	create(t, east, clusterIPService("shop", "solo", corev1.ServicePort{Name: "http", Port: 80}), export("shop", "solo"))
	create(t, east, clusterIPService("shop", "shared", corev1.ServicePort{Name: "http", Port: 80}), export("shop", "shared"))
	create(t, north, clusterIPService("shop", "shared", corev1.ServicePort{Name: "http", Port: 80}), export("shop", "shared"))
	eastSolo, eastShared, northShared := f.clusterIP(t, "east", solo), f.clusterIP(t, "east", shared), f.clusterIP(t, "north", shared)
	http := []string{"http:80/TCP"}
	soloWant := wantImport{typ: mcsv1beta1.ClusterSetIP, ports: http, endpoints: map[string][]string{"east": {eastSolo}}}
	sharedBoth := wantImport{typ: mcsv1beta1.ClusterSetIP, ports: http, endpoints: map[string][]string{"east": {eastShared}, "north": {northShared}}}
	sharedNorth := wantImport{typ: mcsv1beta1.ClusterSetIP, ports: http, endpoints: map[string][]string{"north": {northShared}}}
	for _, m := range []string{"west", "north"} {
		f.waitImport(t, m, solo, soloWant)
		f.waitImport(t, m, shared, sharedBoth)
	}
	before, err := getImported(t.Context(), f.members["west"], shared)
	if err != nil {
		t.Fatal(err)
	}

	f.stop["east"]()
	lastRenewal := f.lastRenewal(t, "east")
	for _, m := range []string{"west", "north"} {
		f.waitNoImport(t, m, solo)
		f.waitImport(t, m, shared, sharedNorth)
	}
	// Not before the Lease expired and the TTL passed (the clocks are the same machine's).
	if early := lastRenewal.Add(leaseDuration + ttl); time.Now().Before(early) {
		t.Errorf("east's endpoints were withdrawn before %s, its last renewal %s plus lease duration and TTL", early.Format(time.RFC3339Nano), lastRenewal.Format(time.RFC3339Nano))
	}
	// Withdrawn by the importers, not unexported: east's records are still on the hub.
	if recs, sls, err := f.published(t.Context(), "east", "shop", "solo"); err != nil || len(recs) != 1 || len(sls) == 0 {
		t.Errorf("east's records of shop/solo on the hub: %d records, %d slices, %v; want them left in place", len(recs), len(sls), err)
	}

	f.restart(t, "east")
	for _, m := range []string{"west", "north"} {
		f.waitImport(t, m, solo, soloWant)
		f.waitImport(t, m, shared, sharedBoth)
	}
	after, err := getImported(t.Context(), f.members["west"], shared)
	if err != nil {
		t.Fatal(err)
	}
	if after.si.UID != before.si.UID || len(after.derived) != 1 || after.derived[0].UID != before.derived[0].UID {
		t.Errorf("west's import of shop/shared or its derived Service was recreated while north kept exporting it")
	}
	eventually(t, "east imports its own services again", func(ctx context.Context) string {
		_, msg := checkImport(ctx, east, solo, soloWant)
		return msg
	})
}
