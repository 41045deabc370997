package servicediscovery_test

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/servicediscovery"
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
	if err := f.hub.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: v1alpha1.HeartbeatLeaseName(member)}, l); err != nil {
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
	// Worker counts other than the default, to see them reach the controllers.
	f := newFabricWith(t, agent.ControllerOptions{HeartbeatInterval: 500 * time.Millisecond, LeaseDuration: leaseDuration, StaleClusterTTL: ttl,
		ExportWorkers: 2, ImportWorkers: 3},
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
	eastSolo, eastShared, northShared := f.serve(t, "east", solo), f.serve(t, "east", shared), f.serve(t, "north", shared)
	http := []string{"http:80/TCP"}
	soloWant := wantImport{typ: mcsv1beta1.ClusterSetIP, ports: http, endpoints: map[string][]string{"east": {eastSolo}}}
	sharedBoth := wantImport{typ: mcsv1beta1.ClusterSetIP, ports: http, endpoints: map[string][]string{"east": {eastShared}, "north": {northShared}}}
	sharedNorth := wantImport{typ: mcsv1beta1.ClusterSetIP, ports: http, endpoints: map[string][]string{"north": {northShared}}}
	for _, m := range []string{"west", "north"} {
		f.waitImport(t, m, solo, soloWant)
		f.waitImport(t, m, shared, sharedBoth)
	}
	for controller, want := range map[string]float64{"serviceexport": 2, "serviceimport": 3} {
		if got := maxConcurrentReconciles(t, controller); got != want {
			t.Errorf("controller %s runs %g workers, want %g", controller, got, want)
		}
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
	checkHubCacheStripped(t, f, "west")
}

// maxConcurrentReconciles reads the worker count controller-runtime reports for controller.
func maxConcurrentReconciles(t *testing.T, controller string) float64 {
	t.Helper()
	m := servicediscovery.ControllerMetric(t, "controller_runtime_max_concurrent_reconciles", "controller", controller)
	if m == nil {
		t.Fatalf("no worker count reported for controller %s", controller)
	}
	return m.GetGauge().GetValue()
}

// checkHubCacheStripped builds the import side's hub cache as the agent does, in member, and
// checks that it holds the hub's records and slices without their managedFields, which the
// API server's copies have.
func checkHubCacheStripped(t *testing.T, f *fabric, member string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	mgr, err := manager.New(f.env.Cluster(member).RESTConfig(), manager.Options{Scheme: kube.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	hubCache, err := servicediscovery.SetupImportCache(mgr, servicediscovery.ImportOptions{Hub: f.env.Cluster("hub").RESTConfig(), HubNamespace: f.ns, ClusterID: member})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	if !hubCache.WaitForCacheSync(ctx) {
		t.Fatal("the hub cache did not sync")
	}
	for _, lists := range []struct{ api, cached client.ObjectList }{
		{&mcsv1beta1.ServiceImportList{}, &mcsv1beta1.ServiceImportList{}},
		{&discoveryv1.EndpointSliceList{}, &discoveryv1.EndpointSliceList{}},
	} {
		sel := client.HasLabels{v1alpha1.ServiceNamespaceLabel}
		if err := f.hub.List(ctx, lists.api, client.InNamespace(f.ns), sel); err != nil {
			t.Fatal(err)
		}
		if err := hubCache.List(ctx, lists.cached, client.InNamespace(f.ns)); err != nil {
			t.Fatal(err)
		}
		apiItems, _ := apimeta.ExtractList(lists.api)
		cachedItems, _ := apimeta.ExtractList(lists.cached)
		if len(cachedItems) == 0 || len(cachedItems) != len(apiItems) {
			t.Fatalf("%T: %d cached, %d on the hub; want the same, more than none", lists.cached, len(cachedItems), len(apiItems))
		}
		if o := apiItems[0].(client.Object); len(o.GetManagedFields()) == 0 {
			t.Fatalf("%T %s has no managedFields on the hub: the check below proves nothing", o, o.GetName())
		}
		for _, item := range cachedItems {
			if o := item.(client.Object); len(o.GetManagedFields()) != 0 {
				t.Errorf("the hub cache holds %T %s with its managedFields", o, o.GetName())
			}
		}
	}
}
