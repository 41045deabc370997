package servicediscovery_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// churn watches what consumers in one member see of the imports in a namespace (ServiceImports,
// EndpointSlices, Services) and records every deletion and every name that changed UID, i.e.
// was deleted and recreated.
type churn struct {
	mu      sync.Mutex
	uids    map[string]types.UID // kind/name → first UID seen
	deleted []string
	changed []string
}

func watchChurn(t *testing.T, f *fabric, member, ns string) *churn {
	t.Helper()
	c, err := client.NewWithWatch(f.env.Cluster(member).RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ch := &churn{uids: map[string]types.UID{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for kind, list := range map[string]client.ObjectList{
		"ServiceImport": &mcsv1beta1.ServiceImportList{}, "EndpointSlice": &discoveryv1.EndpointSliceList{}, "Service": &corev1.ServiceList{},
	} {
		w, err := c.Watch(ctx, list, client.InNamespace(ns))
		if err != nil {
			t.Fatalf("watching %ss in %s: %v", kind, member, err)
		}
		wg.Go(func() {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						// A closed watch would hide churn: say so rather than pass quietly.
						if ctx.Err() == nil {
							ch.record(kind+" watch", "", watch.Error)
						}
						return
					}
					if o, ok := ev.Object.(client.Object); ok {
						ch.record(kind+"/"+o.GetName(), o.GetUID(), ev.Type)
					}
				}
			}
		})
	}
	return ch
}

func (c *churn) record(name string, uid types.UID, typ watch.EventType) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch typ {
	case watch.Deleted, watch.Error:
		c.deleted = append(c.deleted, fmt.Sprintf("%s %s", typ, name))
	default:
		if first, ok := c.uids[name]; !ok {
			c.uids[name] = uid
		} else if first != uid {
			c.changed = append(c.changed, name)
		}
	}
}

// check fails t if anything was deleted or recreated, except names with a prefix in allowed.
func (c *churn) check(t *testing.T, member string, allowed ...string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var bad []string
	for _, d := range append(append([]string{}, c.deleted...), c.changed...) {
		ok := false
		for _, a := range allowed {
			ok = ok || strings.Contains(d, a)
		}
		if !ok {
			bad = append(bad, d)
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("%s: objects deleted or recreated needlessly: %v", member, bad)
	}
}

// holds checks, for d, once a second, that every member's import of key stays as want.
func (f *fabric) holds(t *testing.T, d time.Duration, key types.NamespacedName, want wantImport, members ...string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		for _, m := range members {
			if _, msg := checkImport(t.Context(), f.members[m], key, want); msg != "" {
				t.Fatalf("the import of %s in %s changed while it should hold: %s", key, m, msg)
			}
		}
	}
}

// TestFaults injects the faults DESIGN §5 names: an importing agent killed and restarted, and
// the hub's API server down for 30s while exports change (with an agent starting meanwhile).
// Consumers must never see an import disappear or be recreated, and everything converges after.
func TestFaults(t *testing.T) {
	f := newFabric(t, "east", "west", "north")
	east := f.members["east"]
	for _, m := range []string{"east", "west", "north"} {
		create(t, f.members[m], namespace("shop"))
	}
	web := types.NamespacedName{Namespace: "shop", Name: "web"}
	late := types.NamespacedName{Namespace: "shop", Name: "late"}
	create(t, east, clusterIPService("shop", "web", corev1.ServicePort{Name: "http", Port: 80}), export("shop", "web"))
	eastWeb := f.serve(t, "east", web)
	webWant := wantImport{typ: mcsv1beta1.ClusterSetIP, ports: []string{"http:80/TCP"}, endpoints: map[string][]string{"east": {eastWeb}}}
	for _, m := range []string{"west", "north"} {
		f.waitImport(t, m, web, webWant)
	}
	westChurn, northChurn := watchChurn(t, f, "west", "shop"), watchChurn(t, f, "north", "shop")

	t.Run("an importing agent killed and restarted: nothing disappears", func(t *testing.T) {
		f.stop["west"]()
		f.restart(t, "west")
		// The restarted agent has synced and reconciled once it imports a new export.
		create(t, east, clusterIPService("shop", "probe", corev1.ServicePort{Name: "http", Port: 80}), export("shop", "probe"))
		probe := types.NamespacedName{Namespace: "shop", Name: "probe"}
		f.waitImport(t, "west", probe, wantImport{typ: mcsv1beta1.ClusterSetIP, ports: []string{"http:80/TCP"},
			endpoints: map[string][]string{"east": {f.serve(t, "east", probe)}}})
		f.waitImport(t, "west", web, webWant)
		westChurn.check(t, "west")
	})

	t.Run("hub down for 30s while exports change: imports hold, then converge without churn", func(t *testing.T) {
		hubCP := f.env.Cluster("hub")
		if err := hubCP.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		// Exports change in east meanwhile: web's session affinity (its slices keep their
		// names; a port change would rename them by design, see sliceName), a new export, and
		// probe unexported.
		svc := &corev1.Service{}
		if err := east.Get(t.Context(), web, svc); err != nil {
			t.Fatal(err)
		}
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		if err := east.Update(t.Context(), svc); err != nil {
			t.Fatal(err)
		}
		create(t, east, clusterIPService("shop", "late", corev1.ServicePort{Name: "http", Port: 80}), export("shop", "late"))
		if err := east.Delete(t.Context(), export("shop", "probe")); err != nil {
			t.Fatal(err)
		}
		// And west's agent restarts while the hub is unreachable: it must wait, not exit, and
		// leave what it imported in place.
		f.stop["west"]()
		f.restart(t, "west")

		f.holds(t, 30*time.Second-time.Since(stopped), web, webWant, "west", "north")
		if err := hubCP.StartAPIServer(t.Context()); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		lateWant := wantImport{typ: mcsv1beta1.ClusterSetIP, ports: []string{"http:80/TCP"}, endpoints: map[string][]string{"east": {f.serve(t, "east", late)}}}
		for _, m := range []string{"west", "north"} {
			f.waitImport(t, m, late, lateWant)
			f.waitNoImport(t, m, types.NamespacedName{Namespace: "shop", Name: "probe"})
			eventually(t, "web's new session affinity in "+m, func(ctx context.Context) string {
				si := &mcsv1beta1.ServiceImport{}
				if err := f.members[m].Get(ctx, web, si); err != nil {
					return err.Error()
				}
				if si.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
					return "session affinity " + string(si.Spec.SessionAffinity)
				}
				return ""
			})
			f.waitImport(t, m, web, webWant)
		}
		// The hub informers catch up as soon as the hub is back (kube.WaitForServerOnReads),
		// not after client-go's reflector backoff, which reaches 30–60 s in such an outage.
		converged := time.Since(back)
		t.Logf("west and north converged %.1fs after the hub's API server was back", converged.Seconds())
		if converged > 30*time.Second {
			t.Errorf("west and north took %s to converge after the hub came back, want at most 30s", converged)
		}
		// probe's removal is wanted: its import and what it owns go. Nothing else may.
		westChurn.check(t, "west", "probe")
		northChurn.check(t, "north", "probe")
	})
}

// TestAgentStartsWithoutHub starts an agent while the hub's API server is down for longer than
// controller-runtime's default cache-sync timeout (2 minutes, after which an agent that set up
// its hub controllers at once would exit): the agent keeps running, what it imported stays, and
// it catches up once the hub is back.
func TestAgentStartsWithoutHub(t *testing.T) {
	const outage = 2*time.Minute + 15*time.Second
	f := newFabric(t, "east", "west")
	east := f.members["east"]
	for _, m := range []string{"east", "west"} {
		create(t, f.members[m], namespace("shop"))
	}
	web := types.NamespacedName{Namespace: "shop", Name: "web"}
	create(t, east, clusterIPService("shop", "web", corev1.ServicePort{Name: "http", Port: 80}), export("shop", "web"))
	webWant := wantImport{typ: mcsv1beta1.ClusterSetIP, ports: []string{"http:80/TCP"}, endpoints: map[string][]string{"east": {f.serve(t, "east", web)}}}
	f.waitImport(t, "west", web, webWant)
	westChurn := watchChurn(t, f, "west", "shop")

	f.stop["west"]()
	hubCP := f.env.Cluster("hub")
	if err := hubCP.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan error, 1)
	go func() {
		exited <- agent.RunController(ctx, agent.ControllerOptions{
			Member: f.env.Cluster("west").RESTConfig(), Identity: "west", HealthProbeBindAddress: "0", MetricsBindAddress: "0",
			CredentialPollInterval: 100 * time.Millisecond,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-exited; err != nil {
			t.Errorf("west's agent: %v", err)
		}
	})
	for end := time.Now().Add(outage); time.Now().Before(end); {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("west's agent exited while the hub was down: %v", err)
		case <-time.After(5 * time.Second):
		}
		if _, msg := checkImport(t.Context(), f.members["west"], web, webWant); msg != "" {
			t.Fatalf("west's import changed while the hub was down: %s", msg)
		}
	}

	if err := hubCP.StartAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	late := types.NamespacedName{Namespace: "shop", Name: "late"}
	create(t, east, clusterIPService("shop", "late", corev1.ServicePort{Name: "http", Port: 80}), export("shop", "late"))
	f.waitImport(t, "west", late, wantImport{typ: mcsv1beta1.ClusterSetIP, ports: []string{"http:80/TCP"}, endpoints: map[string][]string{"east": {f.serve(t, "east", late)}}})
	f.waitImport(t, "west", web, webWant)
	westChurn.check(t, "west")
}
