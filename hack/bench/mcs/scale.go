package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/bench/stats"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/memlimit"
	"github.com/octopus-mcs/octopus/internal/servicediscovery"
)

// Namespaces of the scale run: the bulk exports, and the probes timed one at a time.
const (
	scaleNS = "scale"
	probeNS = "probe"
)

type scaleOptions struct {
	members, services, probes int
	// synthetic clusters publish on the hub but run nothing: the benchmark writes what their
	// agents would (servicediscovery.Publication) before t0, so that the real members import
	// a fleet's worth of services with fewer API servers competing for the machine.
	synthetic         int
	probeGap, timeout time.Duration
	converge          time.Duration
	agentBin          string
	agentArgs         []string
	agentLogDir       string
	// agentMemoryLimit, if not 0, runs every agent in a memory cgroup of this many bytes, as
	// a pod's limits.memory would (the agent then sets its soft limit from it).
	agentMemoryLimit int64
	memberQPS        float64
}

// agentProc is one member's agent running as a child process.
type agentProc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	// cgroup is the memory cgroup it runs in, with -agent-memory-limit; nil without.
	cgroup *memlimit.Cgroup
	// peakRSS is the largest VmRSS sampled, in kB.
	peakRSS atomic.Int64
}

// runScale measures a cold start: every member's Services and ServiceExports (and the
// namespaces) exist before any agent runs, and so do the synthetic clusters' publications on
// the hub; then all agents start at once (t0), and the run waits until every member holds, for
// every service exported anywhere, the ServiceImport with spec.ips and an imported
// EndpointSlice with an endpoint. Meanwhile it times single probe exports from c1 to c2,
// samples each agent process's RSS, and counts the hub's write requests.
func runScale(ctx context.Context, o scaleOptions) error {
	if o.members < 1 || o.services < 1 || o.probes < 0 || o.synthetic < 0 {
		return errors.New("scale needs at least 1 real cluster and 1 service per cluster")
	}
	if o.synthetic*o.services > maxSynthetic {
		return fmt.Errorf("-synthetic × -services may be at most %d (the ClusterIPs of 198.18.0.0/15)", maxSynthetic)
	}
	// Ends the probe goroutine and the watches on an early return.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	begin := time.Now()
	progress("starting hub + %d control planes", o.members)
	env, names, info, cleanup, err := startEnv(ctx, o.members)
	if err != nil {
		return err
	}
	defer cleanup()
	members := names[1:]
	clients := map[string]client.Client{}
	for _, n := range members {
		c, err := client.New(env.Cluster(n).RESTConfig(), client.Options{Scheme: kube.Scheme})
		if err != nil {
			return err
		}
		clients[n] = c
		if _, err := cluster.Join(ctx, env.Cluster(n).RESTConfig(), cluster.JoinOptions{BrokerInfo: info, ClusterID: n, PodCIDRs: []string{env.Cluster(n).PodCIDR.String()}}); err != nil {
			return fmt.Errorf("joining %s: %w", n, err)
		}
		for _, ns := range []string{scaleNS, probeNS} {
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				return fmt.Errorf("creating namespace %s in %s: %w", ns, n, err)
			}
		}
	}
	progress("control planes up and joined (%s); creating %d Services + ServiceExports per cluster", since(begin), o.services)
	created := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(members))
	for i, n := range members {
		wg.Go(func() { errs[i] = createExports(ctx, clients[n], n, o.services) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i := range o.probes {
		if err := createServed(ctx, clients[members[0]], probeNS, svcName(i), i); err != nil {
			return fmt.Errorf("creating a probe Service: %w", err)
		}
	}
	progress("created %d exports in %s", o.members*o.services, since(created))
	if o.synthetic > 0 {
		published := time.Now()
		if err := publishSynthetic(ctx, env.Cluster("hub").RESTConfig(), info.Namespace, o.synthetic, o.services); err != nil {
			return err
		}
		progress("published %d synthetic clusters' %d exports on the hub in %s", o.synthetic, o.synthetic*o.services, since(published))
		// The synthetic clusters' agents would each watch every record and slice on the hub:
		// the hub serves as many watchers here, so that it works as it would for the fleet.
		for range o.synthetic {
			stop, err := watchHub(ctx, env.Cluster("hub").RESTConfig(), info.Namespace)
			if err != nil {
				return fmt.Errorf("starting a hub watcher for a synthetic cluster: %w", err)
			}
			defer stop()
		}
	}

	total := (o.members + o.synthetic) * o.services
	counters := make([]*importCounter, len(members))
	for i, n := range members {
		counters[i] = newImportCounter()
		stopWatch, err := watchImports(ctx, env.Cluster(n).RESTConfig(), counters[i])
		if err != nil {
			return fmt.Errorf("watching %s: %w", n, err)
		}
		defer stopWatch()
	}
	// Probes go from the first member to the second; with one real member (the others
	// synthetic, the fair shape of issue 34), to its own import: the same export → hub →
	// import path, through one agent.
	probeTo := members[min(1, len(members)-1)]
	seenB, seenA := newSightings(), newSightings()
	stopProbeWatch, err := watch(ctx, env.Cluster(probeTo).RESTConfig(), probeNS, seenB, env.Cluster(members[0]).RESTConfig(), seenA, triggerExport)
	if err != nil {
		return err
	}
	defer stopProbeWatch()

	hubCfg := env.Cluster("hub").RESTConfig()
	writesBefore, err := hubWrites(ctx, hubCfg)
	if err != nil {
		return err
	}
	memberBefore, err := memberWrites(ctx, env, members)
	if err != nil {
		return err
	}
	pidsDir := filepath.Join(env.Dir, "pids")
	cpuBefore, err := sampleCPU(pidsDir, nil)
	if err != nil {
		return err
	}

	// t0: all agents start.
	agentDir := o.agentLogDir
	if agentDir == "" {
		agentDir = filepath.Join(env.Dir, "agents") // removed with the environment
	}
	if err := os.MkdirAll(agentDir, 0o755); err != nil {
		return err
	}
	t0 := time.Now()
	var agents []*agentProc
	defer func() { stopAgents(agents) }()
	for _, n := range members {
		a, err := startAgentProc(o, n, env.Cluster(n), agentDir)
		if err != nil {
			return err
		}
		agents = append(agents, a)
	}
	progress("started %d agents in %s; logs in %s", len(agents), since(t0), agentDir)
	samplerCtx, stopSampler := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() { sampleRSS(samplerCtx, agents) })
	defer func() { stopSampler(); sampler.Wait() }()

	// Probes, one at a time, while the bulk converges. Each waits a gap first: an export made
	// as the agents start is older than them, and so part of their backlog by design.
	converged := make(chan struct{})
	var probeLat []time.Duration
	var probesDuring, probesTimedOut int
	var timedOutAt []string // when each timed-out probe started, from t0: early ones wait for the agents' first sync
	var probeErr error
	var probeWG sync.WaitGroup
	probeWG.Go(func() {
		for i := range o.probes {
			select {
			case <-time.After(o.probeGap):
			case <-ctx.Done():
				probeErr = ctx.Err()
				return
			}
			name := svcName(i)
			start := time.Now()
			if err := clients[members[0]].Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: probeNS, Name: name}}); err != nil {
				probeErr = fmt.Errorf("creating probe ServiceExport %s: %w", name, err)
				return
			}
			got, err := seenB.wait(ctx, name, o.timeout)
			switch {
			case ctx.Err() != nil:
				probeErr = ctx.Err()
				return
			case err != nil:
				// Counted at the timeout: a lower bound that still drags p99 up.
				probesTimedOut++
				probeLat = append(probeLat, o.timeout)
				timedOutAt = append(timedOutAt, "t0+"+start.Sub(t0).Round(time.Second).String())
			default:
				probeLat = append(probeLat, got.Sub(start))
			}
			select {
			case <-converged:
			default:
				// Still converging when this probe completed (polled every second).
				probesDuring++
			}
		}
	})

	// Cold start: wait for every member to hold every import.
	perCluster := make([]time.Duration, len(members))
	deadline := time.After(o.converge)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for polls := 1; ; polls++ {
		all := true
		var counts []string
		for i, c := range counters {
			n, at := c.complete()
			if n >= total && perCluster[i] == 0 {
				perCluster[i] = at.Sub(t0)
			}
			all = all && n >= total
			counts = append(counts, strconv.Itoa(n))
		}
		if all {
			break
		}
		select {
		case <-tick.C:
			if polls%5 != 0 {
				break
			}
			progress("t0+%s: imports complete per cluster (of %d): %s; agent RSS max %d MiB", since(t0), total, strings.Join(counts, " "), maxRSS(agents)/1024)
		case <-deadline:
			return fmt.Errorf("cold start did not converge within %s (counts %s of %d); agent logs in %s", o.converge, strings.Join(counts, " "), total, agentDir)
		case <-ctx.Done():
			return ctx.Err()
		}
		for _, a := range agents {
			select {
			case <-a.done:
				hint := ""
				if o.agentMemoryLimit > 0 {
					hint = fmt.Sprintf(" (it ran with a %d MiB memory limit: an OOM kill leaves no line in its log, see dmesg)", o.agentMemoryLimit>>20)
				}
				return fmt.Errorf("agent of %s exited during the run%s: see %s", a.name, hint, filepath.Join(agentDir, a.name+".log"))
			default:
			}
		}
	}
	coldStart := slices.Max(perCluster)
	agentPids := make([]int, 0, len(agents))
	for _, a := range agents {
		agentPids = append(agentPids, a.cmd.Process.Pid)
	}
	cpuEnd, err := sampleCPU(pidsDir, agentPids)
	if err != nil {
		return err
	}
	close(converged)
	progress("cold start converged in %s; waiting for the remaining probes", coldStart.Round(time.Millisecond))
	probeWG.Wait()
	if probeErr != nil {
		return probeErr
	}
	// Let trailing status writes land before counting.
	time.Sleep(5 * time.Second)
	writesAfter, err := hubWrites(ctx, hubCfg)
	if err != nil {
		return err
	}
	memberAfter, err := memberWrites(ctx, env, members)
	if err != nil {
		return err
	}
	rssAtEnd, hwm, cgroupPeak := make([]int64, len(agents)), make([]int64, len(agents)), make([]int64, len(agents))
	for i, a := range agents {
		rssAtEnd[i], hwm[i] = readRSS(a.cmd.Process.Pid)
		if a.cgroup != nil {
			if cgroupPeak[i], err = a.cgroup.Peak(); err != nil {
				return err
			}
		}
	}

	// What the agents exported during the run; the synthetic records were on the hub before.
	exports := o.members*o.services + o.probes
	fmt.Printf("## MCS scale: hub + %d clusters × %d exported services (+%d probes)\n\n", o.members+o.synthetic, o.services, o.probes)
	if o.synthetic > 0 {
		fmt.Printf("%d of the clusters are synthetic: their %d records and slices were written to the hub before t0, as their agents would have published them; "+
			"the %d real members import all %d services.\n\n", o.synthetic, o.synthetic*o.services, o.members, total)
	}
	if o.agentMemoryLimit > 0 {
		fmt.Printf("every agent ran in a memory cgroup limited to %d MiB, like a pod's limits.memory\n\n", o.agentMemoryLimit>>20)
	}
	mode := fmt.Sprintf("this program's agent mode (agent.RunController, member client %g QPS)", o.memberQPS)
	if o.agentBin != "" {
		mode = o.agentBin + " controller (its built-in client rate limits and workers)"
		if len(o.agentArgs) > 0 {
			mode = fmt.Sprintf("%s controller %s", o.agentBin, strings.Join(o.agentArgs, " "))
		}
	}
	fmt.Printf("agents: one process per cluster, %s\n\n", mode)
	fmt.Println("| metric | value | target |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| cold start: all %d imports (spec.ips + slice) in every cluster | %s | ≤ 60 s |\n", total, coldStart.Round(time.Millisecond))
	slices.Sort(perCluster)
	fmt.Printf("| cold start: first cluster complete | %s | |\n", perCluster[0].Round(time.Millisecond))
	if len(probeLat) > 0 {
		fmt.Printf("| single export c1→%s p50 / p99 / max (%d probes, %d during convergence, %d timed out at %s) | %s / %s / %s | p99 ≤ 2 s |\n",
			probeTo, len(probeLat), probesDuring, probesTimedOut, o.timeout, ms(stats.PercentileOf(probeLat, 50)), ms(stats.PercentileOf(probeLat, 99)), ms(slices.Max(probeLat)))
		if len(timedOutAt) > 0 {
			fmt.Printf("| probes that timed out, started at | %s | |\n", strings.Join(timedOutAt, ", "))
		}
	}
	spent, sys := cpuSpent(cpuBefore, cpuEnd)
	fmt.Printf("| CPU time from t0 until the last member held every import | %s | |\n", cpuRow(spent, sys, len(members)*total))
	fmt.Printf("| agent peak RSS (VmHWM) max / median over %d processes | %d / %d MiB | ≤ 200 MB |\n", len(agents), slices.Max(hwm)/1024, stats.Median(hwm)/1024)
	fmt.Printf("| agent RSS at the end max / median | %d / %d MiB | |\n", slices.Max(rssAtEnd)/1024, stats.Median(rssAtEnd)/1024)
	if o.agentMemoryLimit > 0 {
		fmt.Printf("| agent memory cgroup peak (what limits.memory enforces) max / median | %d / %d MiB | ≤ 200 MB |\n", slices.Max(cgroupPeak)>>20, stats.Median(cgroupPeak)>>20)
	}
	live := make([]int64, len(agents))
	for i, a := range agents {
		if live[i], err = liveHeap(filepath.Join(agentDir, a.name+".log")); err != nil {
			return err
		}
	}
	fmt.Printf("| agent live heap after GC, largest max / median (gctrace) | %d / %d MiB | |\n", slices.Max(live), stats.Median(live))
	w := writesAfter.sub(writesBefore)
	fmt.Printf("| hub write requests per export (excluding heartbeat Leases) | %.2f (%d / %d) | |\n", float64(w.total-w.leases)/float64(exports), w.total-w.leases, exports)
	fmt.Printf("| hub write requests, all (incl. %d Lease renewals) | %d | |\n", w.leases, w.total)
	// Every cluster imports every export, its own included; the members' writes also hold
	// the probes' 2 creates each (Service made before t0, ServiceExport after) and the
	// exports' status patches.
	imports := o.members * (total + o.probes)
	mw := memberAfter.sub(memberBefore)
	fmt.Printf("| member write requests per import, all members (excluding Leases) | %.2f (%d / %d) | |\n", float64(mw.total-mw.leases)/float64(imports), mw.total-mw.leases, imports)
	fmt.Println()
	printWrites("hub writes by verb and resource (excluding Leases):", w)
	fmt.Println()
	printWrites("member writes by verb and resource, all members (excluding Leases):", mw)
	return nil
}

func printWrites(title string, w writeCounts) {
	fmt.Println(title)
	keys := make([]string, 0, len(w.byKey))
	for k := range w.byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if w.byKey[k] != 0 {
			fmt.Printf("- %s: %d\n", k, w.byKey[k])
		}
	}
}

// memberWrites sums the write requests of every member's API server.
func memberWrites(ctx context.Context, env *controlplane.Environment, members []string) (writeCounts, error) {
	sum := writeCounts{byKey: map[string]int64{}}
	for _, n := range members {
		w, err := hubWrites(ctx, env.Cluster(n).RESTConfig())
		if err != nil {
			return writeCounts{}, fmt.Errorf("member %s: %w", n, err)
		}
		sum.total += w.total
		sum.leases += w.leases
		for k, v := range w.byKey {
			sum.byKey[k] += v
		}
	}
	return sum, nil
}

// createExports creates n Services and their ServiceExports in namespace scale of cluster name,
// named after it so that every exported service is distinct. Eight writers at a time.
func createExports(ctx context.Context, c client.Client, name string, n int) error {
	return inParallel(n, 8, func(i int) error {
		svc := fmt.Sprintf("%s-%04d", name, i)
		if err := createServed(ctx, c, scaleNS, svc, i); err != nil {
			return fmt.Errorf("in %s: %w", name, err)
		}
		if err := c.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: scaleNS, Name: svc}}); err != nil {
			return fmt.Errorf("creating ServiceExport %s in %s: %w", svc, name, err)
		}
		return nil
	})
}

// publishSynthetic writes to the hub what clusters s01…sNN would publish for n exported
// ClusterIP services each, as servicediscovery.Publication makes it. Their ClusterIPs are from
// 198.18.0.0/15 (RFC 2544's benchmarking range): nothing ever sends to them, and they cannot
// collide with the real members' service CIDRs.
// maxSynthetic is how many synthetic services get distinct ClusterIPs: 250 per /24 of
// 198.18.0.0/15.
const maxSynthetic = 512 * 250

func publishSynthetic(ctx context.Context, hubCfg *rest.Config, hubNamespace string, clusters, n int) error {
	cfg := rest.CopyConfig(hubCfg)
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return err
	}
	created := metav1.Now()
	return inParallel(clusters*n, 32, func(j int) error {
		id := fmt.Sprintf("s%02d", j/n+1)
		name := fmt.Sprintf("%s-%04d", id, j%n)
		export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: scaleNS, Name: name, CreationTimestamp: created}}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: scaleNS, Name: name}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: fmt.Sprintf("198.18.%d.%d", j/250, j%250+1),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		}}
		rec, sls, err := servicediscovery.Publication(hubNamespace, id, export, svc, []discoveryv1.EndpointSlice{*readyEndpoint(scaleNS, name, j)})
		if err != nil {
			return err
		}
		objs := []client.Object{rec}
		for _, s := range sls {
			objs = append(objs, s)
		}
		for _, obj := range objs {
			if err := c.Create(ctx, obj); err != nil {
				return fmt.Errorf("publishing %s's %T %s on the hub: %w", id, obj, obj.GetName(), err)
			}
		}
		return nil
	})
}

// watchHub lists and watches the hub's records and slices in ns as an agent's import side
// does, until the returned function is called.
func watchHub(ctx context.Context, hubCfg *rest.Config, ns string) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	c, err := cache.New(hubCfg, cache.Options{Scheme: kube.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		cancel()
		return nil, err
	}
	for _, obj := range []client.Object{&mcsv1beta1.ServiceImport{}, &discoveryv1.EndpointSlice{}} {
		if _, err := c.GetInformer(ctx, obj); err != nil {
			cancel()
			return nil, err
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.Start(ctx) })
	if !c.WaitForCacheSync(ctx) {
		cancel()
		wg.Wait()
		return nil, errors.New("a hub watcher's cache did not sync")
	}
	return func() { cancel(); wg.Wait() }, nil
}

// inParallel calls fn for 0…n-1 from workers goroutines; a worker stops at its first error.
func inParallel(n, workers int, fn func(i int) error) error {
	work := make(chan int)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range errs {
		wg.Go(func() {
			for i := range work {
				if errs[w] == nil {
					errs[w] = fn(i)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return errors.Join(errs...)
}

// importCounter counts the services a cluster holds completely: ServiceImport with spec.ips and
// an imported EndpointSlice with an endpoint.
type importCounter struct {
	mu    sync.Mutex
	si    map[string]bool
	slice map[string]bool
	n     int
	last  time.Time
}

func newImportCounter() *importCounter {
	return &importCounter{si: map[string]bool{}, slice: map[string]bool{}}
}

func (c *importCounter) mark(name string, slice bool) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	m, other := c.si, c.slice
	if slice {
		m, other = c.slice, c.si
	}
	if m[name] {
		return
	}
	m[name] = true
	if other[name] {
		c.n++
		c.last = now
	}
}

// complete returns how many services are complete and when the last one became so.
func (c *importCounter) complete() (int, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.last
}

func watchImports(ctx context.Context, cfg *rest.Config, cnt *importCounter) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop := func() { cancel(); wg.Wait() }
	c, err := cache.New(cfg, cache.Options{Scheme: kube.Scheme, DefaultNamespaces: map[string]cache.Config{scaleNS: {}}})
	if err != nil {
		cancel()
		return nil, err
	}
	handlers := map[client.Object]func(any){
		&mcsv1beta1.ServiceImport{}: func(o any) {
			if si, ok := o.(*mcsv1beta1.ServiceImport); ok && len(si.Spec.IPs) > 0 {
				cnt.mark(si.Name, false)
			}
		},
		&discoveryv1.EndpointSlice{}: func(o any) {
			s, ok := o.(*discoveryv1.EndpointSlice)
			if ok && s.Labels[mcsv1beta1.LabelSourceCluster] != "" && len(s.Endpoints) > 0 {
				cnt.mark(s.Labels[mcsv1beta1.LabelServiceName], true)
			}
		},
	}
	for obj, h := range handlers {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			stop()
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: h, UpdateFunc: func(_, o any) { h(o) }}); err != nil {
			stop()
			return nil, err
		}
	}
	wg.Go(func() { _ = c.Start(ctx) })
	if !c.WaitForCacheSync(ctx) {
		stop()
		return nil, errors.New("import watch caches did not sync")
	}
	return stop, nil
}

// agentSubcommand is the argument that makes this program run one member's agent controller
// (agent.RunController, what `octopus-agent controller` runs) with a chosen client rate limit.
const agentSubcommand = "agent"

func runAgent(args []string) int {
	fs := flag.NewFlagSet(agentSubcommand, flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "member cluster kubeconfig")
	identity := fs.String("identity", "", "heartbeat identity")
	qps := fs.Float64("member-qps", 0, "client QPS towards the member cluster (burst twice that); 0 keeps the agent's default")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	member, err := agent.MemberConfig(*kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if *qps > 0 {
		member.QPS, member.Burst = float32(*qps), int(2**qps)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := agent.RunController(ctx, agent.ControllerOptions{Member: member, Identity: *identity, HealthProbeBindAddress: "0", MetricsBindAddress: "0", CredentialPollInterval: 100 * time.Millisecond}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func startAgentProc(o scaleOptions, name string, cp *controlplane.ControlPlane, dir string) (*agentProc, error) {
	var argv []string
	if o.agentBin != "" {
		argv = append([]string{o.agentBin, "controller", "--kubeconfig=" + cp.Kubeconfig, "--leader-elect=false", "--metrics-bind-address=0"}, o.agentArgs...)
	} else {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		argv = []string{self, agentSubcommand, "-kubeconfig=" + cp.Kubeconfig, "-identity=" + name, fmt.Sprintf("-member-qps=%g", o.memberQPS)}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	var cg *memlimit.Cgroup
	if o.agentMemoryLimit > 0 {
		var err error
		if cg, err = memlimit.NewCgroup(o.agentMemoryLimit); err != nil {
			return nil, fmt.Errorf("-agent-memory-limit: %w", err)
		}
		cmd = cg.Command(context.Background(), argv[0], argv[1:]...)
	}
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	// The runtime's GC trace in the log gives the live heap after each collection (liveHeap).
	cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
	// Dies with the benchmark rather than running on.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting the agent of %s: %w", name, err)
	}
	a := &agentProc{name: name, cmd: cmd, done: make(chan struct{}), cgroup: cg}
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		if cg != nil {
			if err := cg.Remove(); err != nil {
				progress("%v", err)
			}
		}
		close(a.done)
	}()
	return a, nil
}

// stopAgents sends SIGTERM to every agent and waits; SIGKILL after 10 s.
func stopAgents(agents []*agentProc) {
	for _, a := range agents {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, a := range agents {
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
			_ = a.cmd.Process.Kill()
			<-a.done
		}
	}
}

func sampleRSS(ctx context.Context, agents []*agentProc) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		for _, a := range agents {
			if rss, _ := readRSS(a.cmd.Process.Pid); rss > a.peakRSS.Load() {
				a.peakRSS.Store(rss)
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

func maxRSS(agents []*agentProc) int64 {
	var m int64
	for _, a := range agents {
		m = max(m, a.peakRSS.Load())
	}
	return m
}

// readRSS returns VmRSS and VmHWM (peak resident set) of pid in kB, 0 if unreadable.
func readRSS(pid int) (rss, hwm int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if k == "VmRSS" {
			rss = n
		} else {
			hwm = n
		}
	}
	return rss, hwm
}

// liveHeap returns the largest heap left live after a garbage collection, in MiB (the runtime's "MB"), from the
// runtime's gctrace lines in an agent's log ("gc 12 @3.1s 2%: … 60->61->32 MB, …"): what the
// agent really holds, where RSS also counts garbage awaiting the next collection.
func liveHeap(logPath string) (int64, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var peak int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "gc ") {
			continue
		}
		_, sizes, ok := strings.Cut(line, " ms cpu, ")
		if !ok {
			continue
		}
		sizes, _, _ = strings.Cut(sizes, " MB")
		parts := strings.Split(sizes, "->")
		if n, err := strconv.ParseInt(parts[len(parts)-1], 10, 64); err == nil {
			peak = max(peak, n)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading %s: %w", logPath, err)
	}
	if peak == 0 {
		return 0, fmt.Errorf("no gctrace lines in %s", logPath)
	}
	return peak, nil
}

// writeCounts is the hub API server's apiserver_request_total summed over write verbs.
type writeCounts struct {
	total, leases int64
	byKey         map[string]int64
}

func (w writeCounts) sub(before writeCounts) writeCounts {
	d := writeCounts{total: w.total - before.total, leases: w.leases - before.leases, byKey: map[string]int64{}}
	for k, v := range w.byKey {
		d.byKey[k] = v - before.byKey[k]
	}
	return d
}

// hubWrites reads the hub's /metrics and sums apiserver_request_total over the verbs that write.
func hubWrites(ctx context.Context, cfg *rest.Config) (writeCounts, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return writeCounts{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/metrics", nil)
	if err != nil {
		return writeCounts{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return writeCounts{}, fmt.Errorf("reading the hub's /metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return writeCounts{}, fmt.Errorf("reading the hub's /metrics (status %s): %w", resp.Status, err)
	}
	return parseWrites(string(body))
}

var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "APPLY": true, "DELETECOLLECTION": true}

// parseWrites sums the write verbs of apiserver_request_total in a Prometheus text exposition.
func parseWrites(text string) (writeCounts, error) {
	w := writeCounts{byKey: map[string]int64{}}
	found := false
	for line := range strings.SplitSeq(text, "\n") {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		found = true
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			return writeCounts{}, fmt.Errorf("unparsable metrics line %q", line)
		}
		l := map[string]string{}
		for kv := range strings.SplitSeq(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(v, `"`)
		}
		if !writeVerbs[l["verb"]] {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return writeCounts{}, fmt.Errorf("metrics line %q: %w", line, err)
		}
		w.total += int64(n)
		if l["resource"] == "leases" {
			w.leases += int64(n)
			continue
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		w.byKey[key] += int64(n)
	}
	if !found {
		return writeCounts{}, errors.New("the hub's /metrics has no apiserver_request_total")
	}
	return w, nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().UTC().Format("15:04:05")+" "+format+"\n", args...)
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }
