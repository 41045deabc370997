// Command mcs measures how fast an exported service reaches another cluster: the time from a
// ServiceExport's creation in cluster A until cluster B holds both its ServiceImport and an
// imported EndpointSlice with an endpoint. It starts real control planes (a hub and N member
// clusters), joins them and runs each member's agent controller in this process, then exports
// services in A one at a time and watches B. With -trigger endpoint it times the other change
// users wait for: an endpoint becoming ready in an exported headless service of A, until B's
// imported slice holds it.
//
// Side by side it measures the baseline every such path pays twice (A→hub, hub→B): a write in
// A seen by a watch on A.
//
//	go run ./hack/bench/mcs -exports 200 -rounds 3
//	go run ./hack/bench/mcs -exports 200 -rounds 3 -trigger endpoint
//
// With -scale it instead measures a cold start of many clusters with many exports each, running
// every member's agent as its own process (see scale.go):
//
//	go run ./hack/bench/mcs -scale -clusters 10 -services 1000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/bench/stats"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func main() {
	// The scale mode re-executes this binary as each member's agent (see runAgent).
	if len(os.Args) > 1 && os.Args[1] == agentSubcommand {
		os.Exit(runAgent(os.Args[2:]))
	}
	exports := flag.Int("exports", 200, "services exported one after another per round")
	rounds := flag.Int("rounds", 3, "rounds, each in a fresh namespace; the summary is the median over rounds")
	members := flag.Int("clusters", 3, "member clusters besides the hub (A is the first, B the second)")
	trigger := flag.String("trigger", triggerExport, "what a round times: \""+triggerExport+"\" (a ServiceExport created) or \""+triggerEndpoint+"\" (a ready endpoint added to an exported headless service)")
	timeout := flag.Duration("timeout", 30*time.Second, "how long one export may take to propagate before the run fails; with -scale, a probe not seen by then counts as this long")
	var so scaleOptions
	scale := flag.Bool("scale", false, "measure a cold start of -clusters clusters with -services exports each instead of one-by-one latency")
	flag.IntVar(&so.services, "services", 1000, "scale: exported services per cluster")
	flag.IntVar(&so.synthetic, "synthetic", 0, "scale: clusters that only publish on the hub (written by the benchmark before t0, no API server or agent); the -clusters real members import theirs too")
	flag.IntVar(&so.probes, "probes", 50, "scale: single exports timed one at a time (cluster 1 to cluster 2) while the cold start converges")
	flag.DurationVar(&so.probeGap, "probe-gap", time.Second, "scale: pause before each probe (the first counts from the agents' start), to spread them over the convergence")
	flag.DurationVar(&so.converge, "converge-timeout", 30*time.Minute, "scale: how long the cold start may take before the run fails")
	flag.StringVar(&so.agentBin, "agent-bin", "", "scale: run this octopus-agent binary's `controller` command as the agents (with its built-in rate limits and workers) instead of this program's agent mode")
	flag.Func("agent-arg", "scale, with -agent-bin: one more argument for every agent's `controller` command, e.g. --kube-api-qps=200 (repeatable)", func(v string) error {
		so.agentArgs = append(so.agentArgs, v)
		return nil
	})
	flag.StringVar(&so.agentLogDir, "agent-log-dir", "", "scale: keep the agents' logs in this directory (by default they go with the environment)")
	flag.Func("agent-memory-limit", "scale: run every agent in a memory cgroup with this limit, e.g. 200Mi, as a pod's limits.memory (needs root)", func(v string) error {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return err
		}
		so.agentMemoryLimit = q.Value()
		return nil
	})
	flag.Float64Var(&so.memberQPS, "agent-member-qps", 100, "scale, without -agent-bin: client QPS of each agent towards its member cluster (burst twice that); 0 means the agent's default (agent.DefaultKubeAPIQPS)")
	flag.Parse()
	logf.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if *scale {
		so.members, so.timeout = *members, *timeout
		err = runScale(ctx, so)
	} else {
		err = run(ctx, *members, *exports, *rounds, *timeout, *trigger)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcs benchmark:", err)
		os.Exit(1)
	}
}

// What a latency round times.
const (
	triggerExport   = "export"
	triggerEndpoint = "endpoint"
)

func run(ctx context.Context, members, exports, rounds int, timeout time.Duration, trigger string) error {
	if members < 2 || exports < 1 || rounds < 1 {
		return errors.New("need at least 2 clusters, 1 export and 1 round")
	}
	if trigger != triggerExport && trigger != triggerEndpoint {
		return fmt.Errorf("-trigger %q: use %q or %q", trigger, triggerExport, triggerEndpoint)
	}
	env, names, info, cleanup, err := startEnv(ctx, members)
	if err != nil {
		return err
	}
	defer cleanup()
	agentCtx, stopAgents := context.WithCancel(ctx)
	var agents sync.WaitGroup
	defer func() { stopAgents(); agents.Wait() }()
	for _, n := range names[1:] {
		cp := env.Cluster(n)
		if _, err := cluster.Join(ctx, cp.RESTConfig(), cluster.JoinOptions{BrokerInfo: info, ClusterID: n, PodCIDRs: []string{cp.PodCIDR.String()}}); err != nil {
			return fmt.Errorf("joining %s: %w", n, err)
		}
		agents.Go(func() {
			if err := agent.RunController(agentCtx, agent.ControllerOptions{Member: cp.RESTConfig(), Identity: n, HealthProbeBindAddress: "0", MetricsBindAddress: "0", CredentialPollInterval: 100 * time.Millisecond}); err != nil {
				fmt.Fprintf(os.Stderr, "agent of %s: %v\n", n, err)
			}
		})
	}
	a, b := env.Cluster(names[1]), env.Cluster(names[2])
	fmt.Printf("clusters: hub + %d; %s changes per round: %d; A=%s, B=%s\n", members, trigger, exports, a.Name, b.Name)
	var p50s, p99s, base50s, base99s []time.Duration
	for r := range rounds {
		lat, base, err := round(ctx, a.RESTConfig(), b.RESTConfig(), fmt.Sprintf("bench-%d", r), names[1:], exports, timeout, env, trigger)
		if err != nil {
			return fmt.Errorf("round %d: %w", r+1, err)
		}
		p50, p99 := stats.PercentileOf(lat, 50), stats.PercentileOf(lat, 99)
		b50, b99 := stats.PercentileOf(base, 50), stats.PercentileOf(base, 99)
		fmt.Printf("round %d: propagation p50 %s p99 %s max %s | baseline (watch on A) p50 %s p99 %s\n",
			r+1, ms(p50), ms(p99), ms(slices.Max(lat)), ms(b50), ms(b99))
		p50s, p99s, base50s, base99s = append(p50s, p50), append(p99s, p99), append(base50s, b50), append(base99s, b99)
	}
	fmt.Printf("median over %d rounds: propagation p50 %s p99 %s | baseline p50 %s p99 %s\n",
		rounds, ms(stats.PercentileOf(p50s, 50)), ms(stats.PercentileOf(p99s, 50)), ms(stats.PercentileOf(base50s, 50)), ms(stats.PercentileOf(base99s, 50)))
	return nil
}

// startEnv starts a hub and members member clusters (c1, c2, …) and deploys the hub. names
// starts with "hub"; cleanup stops the control planes and removes their state.
func startEnv(ctx context.Context, members int) (env *controlplane.Environment, names []string, info *hub.BrokerInfo, cleanup func(), err error) {
	root, err := os.Getwd()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	bin, err := controlplane.EnsureBinaries(ctx, root, os.Stderr)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("control-plane binaries (run from the repository root): %w", err)
	}
	dir, err := os.MkdirTemp("", "octopus-bench-mcs-")
	if err != nil {
		return nil, nil, nil, nil, err
	}
	names = []string{"hub"}
	opts := []controlplane.ClusterOptions{}
	for i := range members {
		names = append(names, fmt.Sprintf("c%d", i+1))
	}
	for i, n := range names {
		svc, pod := testenv.CIDRs(i)
		opts = append(opts, controlplane.ClusterOptions{Name: n, ServiceCIDR: svc, PodCIDR: pod})
	}
	env, err = controlplane.Start(ctx, controlplane.Options{BinDir: bin, Dir: filepath.Join(dir, "env"), Progress: io.Discard}, opts...)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, nil, nil, fmt.Errorf("starting control planes: %w", err)
	}
	cleanup = func() { _ = env.Stop(); _ = os.RemoveAll(dir) }
	info, err = hub.Deploy(ctx, env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		cleanup()
		return nil, nil, nil, nil, fmt.Errorf("deploying the hub: %w", err)
	}
	return env, names, info, cleanup, nil
}

// round times n changes of trigger's kind in A, in namespace ns, one after another, and returns
// for each the time until B held the result, and until A's own watch saw the change. For
// triggerExport a change is a ServiceExport created (B holds the import with its ClusterSet IP
// and a slice with an endpoint); for triggerEndpoint it is a ready endpoint added to an exported
// headless service (B's imported slice holds an endpoint).
func round(ctx context.Context, cfgA, cfgB *rest.Config, ns string, clusters []string, n int, timeout time.Duration, env *controlplane.Environment, trigger string) (lat, base []time.Duration, err error) {
	ca, err := client.New(cfgA, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, nil, err
	}
	for _, c := range clusters {
		mc, err := client.New(env.Cluster(c).RESTConfig(), client.Options{Scheme: kube.Scheme})
		if err != nil {
			return nil, nil, err
		}
		if err := mc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, nil, fmt.Errorf("creating namespace %s in %s: %w", ns, c, err)
		}
	}
	// The Services exist beforehand, and for an endpoint trigger their exports and B's imports
	// too: what is measured is the change alone.
	for i := range n {
		if trigger == triggerEndpoint {
			// Headless and selectorless: the benchmark writes its endpoints.
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svcName(i)}, Spec: corev1.ServiceSpec{
				ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
			if err := ca.Create(ctx, svc); err != nil {
				return nil, nil, fmt.Errorf("creating Service %s: %w", svc.Name, err)
			}
			continue
		}
		if err := createServed(ctx, ca, ns, svcName(i), i); err != nil {
			return nil, nil, err
		}
	}
	if trigger == triggerEndpoint {
		if err := exportAndWait(ctx, ca, cfgB, ns, n); err != nil {
			return nil, nil, err
		}
	}

	seenB := newSightings()
	seenA := newSightings()
	stopWatch, err := watch(ctx, cfgB, ns, seenB, cfgA, seenA, trigger)
	if err != nil {
		return nil, nil, err
	}
	defer stopWatch()

	for i := range n {
		name := svcName(i)
		var change client.Object = &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if trigger == triggerEndpoint {
			change = readyEndpoint(ns, name, i)
		}
		start := time.Now()
		if err := ca.Create(ctx, change); err != nil {
			return nil, nil, fmt.Errorf("creating %T %s: %w", change, name, err)
		}
		got, err := seenB.wait(ctx, name, timeout)
		if err != nil {
			return nil, nil, fmt.Errorf("the %s change of %s did not reach B: %w", trigger, name, err)
		}
		exp, err := seenA.wait(ctx, name, timeout)
		if err != nil {
			return nil, nil, fmt.Errorf("the %s change of %s not seen by A's watch: %w", trigger, name, err)
		}
		lat, base = append(lat, got.Sub(start)), append(base, exp.Sub(start))
	}
	return lat, base, nil
}

// exportAndWait exports the n services of ns in A and waits until B holds all n imports.
func exportAndWait(ctx context.Context, ca client.Client, cfgB *rest.Config, ns string, n int) error {
	for i := range n {
		if err := ca.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svcName(i)}}); err != nil {
			return fmt.Errorf("creating ServiceExport %s: %w", svcName(i), err)
		}
	}
	cb, err := client.New(cfgB, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		list := &mcsv1beta1.ServiceImportList{}
		if err := cb.List(ctx, list, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("listing B's imports: %w", err)
		}
		if len(list.Items) == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster B holds %d of the %d headless imports after 5 minutes", len(list.Items), n)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// readyEndpoint is a local EndpointSlice of Service name in A with one ready endpoint, as the
// EndpointSlice controller would write it when a pod became ready. Its address is from TEST-NET-1
// (RFC 5737): nothing is ever sent to it.
func readyEndpoint(ns, name string, i int) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-local", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "bench.octopus.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{fmt.Sprintf("192.0.2.%d", i%250+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(80)), Protocol: new(corev1.ProtocolTCP)}},
	}
}

// createServed creates the selectorless ClusterIP Service name in ns with one ready endpoint
// (readyEndpoint's): an export publishes its ready endpoints, so a Service without any would
// have nothing to import.
func createServed(ctx context.Context, c client.Client, ns, name string, i int) error {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if err := c.Create(ctx, svc); err != nil {
		return fmt.Errorf("creating Service %s/%s: %w", ns, name, err)
	}
	if err := c.Create(ctx, readyEndpoint(ns, name, i)); err != nil {
		return fmt.Errorf("creating the endpoints of Service %s/%s: %w", ns, name, err)
	}
	return nil
}

func svcName(i int) string { return fmt.Sprintf("svc-%04d", i) }

// sightings records when each service became complete in a watch.
type sightings struct {
	mu     sync.Mutex
	si     map[string]time.Time
	slice  map[string]time.Time
	done   map[string]time.Time
	notify chan struct{}
}

func newSightings() *sightings {
	return &sightings{si: map[string]time.Time{}, slice: map[string]time.Time{}, done: map[string]time.Time{}, notify: make(chan struct{}, 1)}
}

// mark records part of name seen now: "si" and "slice" complete it together, "done" alone.
func (s *sightings) mark(name, part string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch part {
	case "si":
		if _, ok := s.si[name]; !ok {
			s.si[name] = now
		}
	case "slice":
		if _, ok := s.slice[name]; !ok {
			s.slice[name] = now
		}
	case "done":
		if _, ok := s.done[name]; !ok {
			s.done[name] = now
		}
	}
	if _, ok := s.done[name]; !ok {
		si, ok1 := s.si[name]
		sl, ok2 := s.slice[name]
		if ok1 && ok2 {
			s.done[name] = later(si, sl)
		}
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (s *sightings) wait(ctx context.Context, name string, timeout time.Duration) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		t, ok := s.done[name]
		s.mu.Unlock()
		if ok {
			return t, nil
		}
		// One waiter at a time, and mark leaves a token in notify: no sighting is missed.
		select {
		case <-s.notify:
		case <-deadline:
			return time.Time{}, fmt.Errorf("not within %s", timeout)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// watch starts informers on B (imports and imported slices in ns) and on A (exports, or for
// triggerEndpoint local slices, in ns), feeding seenB and seenA, and returns once they have
// synced.
func watch(ctx context.Context, cfgB *rest.Config, ns string, seenB *sightings, cfgA *rest.Config, seenA *sightings, trigger string) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop := func() { cancel(); wg.Wait() }
	start := func(cfg *rest.Config, handlers map[client.Object]func(obj any)) error {
		c, err := cache.New(cfg, cache.Options{Scheme: kube.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
		if err != nil {
			return err
		}
		for obj, h := range handlers {
			inf, err := c.GetInformer(ctx, obj)
			if err != nil {
				return err
			}
			if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: h, UpdateFunc: func(_, o any) { h(o) }}); err != nil {
				return err
			}
		}
		wg.Go(func() { _ = c.Start(ctx) })
		if !c.WaitForCacheSync(ctx) {
			return errors.New("watch caches did not sync")
		}
		return nil
	}
	importedSlice := func(o any) (string, bool) {
		s, ok := o.(*discoveryv1.EndpointSlice)
		if !ok || s.Labels[mcsv1beta1.LabelSourceCluster] == "" || len(s.Endpoints) == 0 {
			return "", false
		}
		return s.Labels[mcsv1beta1.LabelServiceName], true
	}
	onB := map[client.Object]func(any){
		&mcsv1beta1.ServiceImport{}: func(o any) {
			// Usable once it has its ClusterSet IP.
			if si, ok := o.(*mcsv1beta1.ServiceImport); ok && len(si.Spec.IPs) > 0 {
				seenB.mark(si.Name, "si")
			}
		},
		&discoveryv1.EndpointSlice{}: func(o any) {
			if name, ok := importedSlice(o); ok {
				seenB.mark(name, "slice")
			}
		},
	}
	onA := map[client.Object]func(any){
		&mcsv1beta1.ServiceExport{}: func(o any) {
			if se, ok := o.(*mcsv1beta1.ServiceExport); ok {
				seenA.mark(se.Name, "done")
			}
		},
	}
	if trigger == triggerEndpoint {
		// A headless import has no IP: its slice with the endpoint is the whole result.
		onB = map[client.Object]func(any){&discoveryv1.EndpointSlice{}: func(o any) {
			if name, ok := importedSlice(o); ok {
				seenB.mark(name, "done")
			}
		}}
		onA = map[client.Object]func(any){&discoveryv1.EndpointSlice{}: func(o any) {
			if s, ok := o.(*discoveryv1.EndpointSlice); ok && s.Labels[mcsv1beta1.LabelSourceCluster] == "" && len(s.Endpoints) > 0 {
				seenA.mark(s.Labels[discoveryv1.LabelServiceName], "done")
			}
		}}
	}
	err := start(cfgB, onB)
	if err == nil {
		err = start(cfgA, onA)
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("watching: %w", err)
	}
	return stop, nil
}

func ms(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
