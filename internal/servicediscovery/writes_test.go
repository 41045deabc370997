package servicediscovery_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/internal/servicediscovery"
)

// writeCounter counts the successful write requests an agent sends to its member cluster in
// one namespace, per object and subresource ("serviceimports/web", "serviceimports/web/status",
// …): what the API server had to store, as the client saw it answered.
type writeCounter struct {
	ns string

	mu sync.Mutex
	n  map[string]int
}

func newWriteCounter(ns string) *writeCounter { return &writeCounter{ns: ns, n: map[string]int{}} }

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// config is cfg with every request counted.
func (w *writeCounter) config(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && resp.StatusCode < 300 && req.Method != http.MethodGet {
				w.count(req.URL.Path)
			}
			return resp, err
		})
	})
	return out
}

func (w *writeCounter) count(path string) {
	_, obj, ok := strings.Cut(path, "/namespaces/"+w.ns+"/")
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n[obj]++
}

// byResource sums the counts per resource[/subresource], and returns the objects written more
// than once.
func (w *writeCounter) byResource() (map[string]int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sum := map[string]int{}
	var again []string
	for obj, n := range w.n {
		parts := strings.Split(obj, "/")
		res := parts[0]
		if len(parts) > 2 {
			res += "/" + parts[2]
		}
		sum[res] += n
		if n > 1 {
			again = append(again, fmt.Sprintf("%s ×%d", obj, n))
		}
	}
	slices.Sort(again)
	return sum, again
}

// publishSynthetic writes to the hub what cluster id would publish for n services of ns, as
// its agent would (servicediscovery.Publication): ClusterSetIP services, or headless ones.
func publishSynthetic(t *testing.T, f *fabric, id, ns string, n int, headless bool) []string {
	t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%03d", id, i)
		names = append(names, name)
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: fmt.Sprintf("198.18.0.%d", i+1),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		}}
		if headless {
			svc.Spec.ClusterIP = corev1.ClusterIPNone
		}
		local := discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-local", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{fmt.Sprintf("192.0.2.%d", i+1)}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(80)), Protocol: new(corev1.ProtocolTCP)}},
		}
		export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.Now()}}
		rec, sls, err := servicediscovery.Publication(f.ns, id, export, svc, []discoveryv1.EndpointSlice{local})
		if err != nil {
			t.Fatalf("publication of %s: %v", name, err)
		}
		create(t, f.hub, rec)
		for _, s := range sls {
			create(t, f.hub, s)
		}
	}
	return names
}

// incomplete returns how many of names are not yet fully imported into ns of c: the import
// with its spec.ips (ClusterSetIP) and status.clusters, and a slice with an endpoint.
func incomplete(ctx context.Context, c client.Client, ns string, names []string) (int, error) {
	sis := &mcsv1beta1.ServiceImportList{}
	if err := c.List(ctx, sis, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	sls := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, sls, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	done := map[string]bool{}
	for _, si := range sis.Items {
		done[si.Name] = len(si.Status.Clusters) == 1 && (si.Spec.Type == mcsv1beta1.Headless || len(si.Spec.IPs) > 0)
	}
	sliced := map[string]bool{}
	for _, s := range sls.Items {
		if len(s.Endpoints) > 0 {
			sliced[s.Labels[mcsv1beta1.LabelServiceName]] = true
		}
	}
	left := 0
	for _, n := range names {
		if !done[n] || !sliced[n] {
			left++
		}
	}
	return left, nil
}

func waitImported(t *testing.T, c client.Client, ns string, names []string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d imports in %s", len(names), ns), func(ctx context.Context) string {
		left, err := incomplete(ctx, c, ns, names)
		if err != nil {
			return err.Error()
		}
		if left > 0 {
			return fmt.Sprintf("%d of %d not complete", left, len(names))
		}
		return ""
	})
}

// settle is how long a test waits after convergence for writes that should not come: the
// echoes of the last writes arrive within milliseconds, and a reconcile they would wake runs
// at once.
const settle = 3 * time.Second

// quiescent waits until controller's reconciles in this process stop (the count is the
// process's: on a loaded machine the agents of earlier tests, and this agent's start, can still
// be finishing theirs after the warm-up import) and returns their number.
func quiescent(t *testing.T, controller string) float64 {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	last := servicediscovery.ReconcileTotal(t, controller)
	for {
		time.Sleep(settle)
		now := servicediscovery.ReconcileTotal(t, controller)
		if now == last {
			return now
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s reconciles still running after a minute (%v, then %v)", controller, last, now)
		}
		last = now
	}
}

// TestImportWrites counts the member writes per import (docs/service-discovery.md, "Fleet
// scale"): a ClusterSetIP import is the derived Service, the ServiceImport with its spec.ips,
// its status and its slice, each written once; a headless import the same without the
// Service. An agent restarted in the middle of a cold start writes only what the first one
// had not.
func TestImportWrites(t *testing.T) {
	f := newFabric(t, "west")
	f.stop["west"]() // replaced by agents whose writes are counted
	west := f.members["west"]
	cfg := f.env.Cluster("west").RESTConfig()

	t.Run("each object of a new import is written once", func(t *testing.T) {
		w := newWriteCounter("fleet")
		stop := startAgent(t, "west", w.config(cfg), f.opts)
		defer stop()
		// One import first: once it is there, the agent's start (its initial lists, which
		// reconcile the cluster's own Services for export) is behind it.
		create(t, west, namespace("warm"))
		waitImported(t, west, "warm", publishSynthetic(t, f, "s0", "warm", 1, false))
		exportsBefore := quiescent(t, "serviceexport")
		create(t, west, namespace("fleet"))
		vip := publishSynthetic(t, f, "s1", "fleet", 6, false)
		headless := publishSynthetic(t, f, "s2", "fleet", 3, true)
		waitImported(t, west, "fleet", append(slices.Clone(vip), headless...))
		time.Sleep(settle)
		// Nothing is exported here: the derived Services and imported slices must not wake
		// the export controller (before, each of them did).
		if n := servicediscovery.ReconcileTotal(t, "serviceexport") - exportsBefore; n != 0 {
			t.Errorf("the import woke %v export reconciles, want none", n)
		}
		got, again := w.byResource()
		want := map[string]int{
			"services":              len(vip),
			"serviceimports":        len(vip) + len(headless),
			"serviceimports/status": len(vip) + len(headless),
			"endpointslices":        len(vip) + len(headless),
		}
		for res, n := range want {
			if got[res] != n {
				t.Errorf("%s: %d writes, want %d (all: %v)", res, got[res], n, got)
			}
		}
		if len(again) > 0 {
			t.Errorf("objects written more than once: %v", again)
		}
	})

	t.Run("an agent restarted during a cold start rewrites nothing", func(t *testing.T) {
		create(t, west, namespace("cold"))
		names := publishSynthetic(t, f, "s3", "cold", 60, false)
		w := newWriteCounter("cold")
		stop := startAgent(t, "west", w.config(cfg), f.opts)
		eventually(t, "a part of the cold start", func(ctx context.Context) string {
			left, err := incomplete(ctx, west, "cold", names)
			if err != nil {
				return err.Error()
			}
			if left > len(names)-10 {
				return fmt.Sprintf("%d of %d complete", len(names)-left, len(names))
			}
			return ""
		})
		stop()
		left, err := incomplete(t.Context(), west, "cold", names)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stopped the agent with %d of %d imports complete", len(names)-left, len(names))
		stop = startAgent(t, "west", w.config(cfg), f.opts)
		defer stop()
		waitImported(t, west, "cold", names)
		time.Sleep(settle)
		got, again := w.byResource()
		if len(again) > 0 {
			t.Errorf("objects written again after the restart: %v", again)
		}
		total := 0
		for _, n := range got {
			total += n
		}
		if total > 4*len(names) {
			t.Errorf("%d writes for %d imports, want at most %d: %v", total, len(names), 4*len(names), got)
		}
	})
}
