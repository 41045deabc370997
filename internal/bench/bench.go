// Package bench measures the network between joined clusters as a workload sees it: TCP
// throughput over several streams and request/response latency, pod → pod and pod → exported
// Service, in both directions, each side by side with the same path inside the client's own
// cluster. It deploys a server (behind an exported Service) and a client pod in every cluster,
// in a namespace of its own, and runs the load generator of the project's own echo image in the
// client pods (`octopus-echo bench`, package load), reading the results back through exec.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/bench/load"
	"github.com/octopus-mcs/octopus/internal/progress"
	"github.com/octopus-mcs/octopus/internal/workload"
)

// Options configure a bench run.
type Options struct {
	// Clusters are the clusters to measure between; at least two. Required.
	Clusters []workload.Cluster
	// Kind is what to measure. Required.
	Kind Kind
	// Namespace is created in every cluster and deleted at the end. Optional, default
	// octopus-bench-<random>; it must not exist yet.
	Namespace string
	// Image runs the servers and the load generator. Optional, default DefaultImage.
	Image string
	// Duration is how long each run measures. Optional, default 10s.
	Duration time.Duration
	// Streams is the number of parallel TCP streams of a throughput run. Optional, default 4.
	Streams int
	// Size is the request size of a latency run, bytes. Optional, default 64.
	Size int
	// Repeat is how many runs each measurement takes; the median is reported. Optional,
	// default 1.
	Repeat int
	// ReadyTimeout bounds the wait for the pods to be ready and, separately, for each cluster
	// to import the others' bench Services. Optional, default 3m.
	ReadyTimeout time.Duration
	// ReachTimeout bounds how long a client tries to reach a server before a measurement
	// (tunnels and kube-proxy converge within seconds). Optional, default 30s.
	ReachTimeout time.Duration
	// Progress receives step lines. Optional.
	Progress io.Writer
}

// Defaults of Options.
const (
	DefaultDuration     = 10 * time.Second
	DefaultStreams      = 4
	DefaultSize         = 64
	DefaultReadyTimeout = 3 * time.Minute
	DefaultReachTimeout = 30 * time.Second
)

// member is one cluster during a run.
type member struct {
	*workload.Member
	server server
	// globalnet is set when the cluster joined with globalnet addressing: its server pod is
	// reached from other clusters by the global IP of a headless export.
	globalnet bool
	// secondary is set when the cluster joined with secondary addressing: its imports have no
	// ClusterSet IP (DNS answers with the exporting pods' net1 addresses, docs/architecture.md
	// §6s), so its pod-to-service path across clusters is not measured.
	secondary bool
	// nodes are the nodes of the server and client pods, by pod name.
	nodes map[string]string
	// clientIP6 is the client pod's IPv6 address in a dual-stack cluster with direct
	// addressing (workload.SecondIPv6); invalid elsewhere. A pair whose client and server both
	// have one is measured in each family (workload.PairFamilies).
	clientIP6 netip.Addr
	// clusterSetIPs are the ClusterSet IPs of the other clusters' bench Services here, by
	// cluster ID.
	clusterSetIPs map[string]workload.ImportIPs
}

// direct says whether the cluster uses direct addressing, the only one bench (like verify)
// measures IPv6 in.
func (m *member) direct() bool { return !m.globalnet && !m.secondary }

// families are the families the pair from → to is measured in (workload.PairFamilies).
func families(from, to *member) []string {
	return workload.PairFamilies(from.clientIP6, to.server.podIP6)
}

type runner struct {
	opts    Options
	ns      string
	members []*member
	p       *progress.Reporter
	// execIn runs argv in from's client pod; nil is workload.Exec (tests replace it).
	execIn func(ctx context.Context, from *member, argv []string) (string, error)
}

// Run deploys the pods, waits for them, measures every path for every ordered pair of
// clusters and its in-cluster baseline, one measurement at a time (concurrent ones would
// compete for the same CPUs and links), and deletes the namespace again, also when ctx is
// cancelled. The error is for runs that could not measure at all; a failed measurement is
// in the report (Report.Failed).
func Run(ctx context.Context, opts Options) (*Report, error) {
	if len(opts.Clusters) < 2 {
		return nil, fmt.Errorf("bench needs at least two clusters, got %d: pass --kubeconfig once per cluster", len(opts.Clusters))
	}
	if opts.Kind != KindThroughput && opts.Kind != KindLatency {
		return nil, fmt.Errorf("unknown kind %q: want %s or %s", opts.Kind, KindThroughput, KindLatency)
	}
	if opts.Namespace == "" {
		opts.Namespace = "octopus-bench-" + utilrand.String(5)
	}
	if opts.Image == "" {
		opts.Image = DefaultImage
	}
	opts.Duration = orDefault(opts.Duration, DefaultDuration)
	opts.ReadyTimeout = orDefault(opts.ReadyTimeout, DefaultReadyTimeout)
	opts.ReachTimeout = orDefault(opts.ReachTimeout, DefaultReachTimeout)
	opts.Streams = orDefault(opts.Streams, DefaultStreams)
	opts.Size = orDefault(opts.Size, DefaultSize)
	opts.Repeat = orDefault(opts.Repeat, 1)

	r := &runner{opts: opts, ns: opts.Namespace, p: &progress.Reporter{W: opts.Progress}}
	report := &Report{Kind: opts.Kind, Namespace: r.ns, Duration: metav1.Duration{Duration: opts.Duration}, Repeat: opts.Repeat}
	if opts.Kind == KindThroughput {
		report.Streams = opts.Streams
	} else {
		report.Size = opts.Size
	}
	members, err := workload.Connect(ctx, opts.Clusters)
	if err != nil {
		return nil, err
	}
	for _, m := range members {
		mem := &member{Member: m, nodes: map[string]string{}}
		addressing, err := workload.Addressing(ctx, m.Client)
		if err != nil {
			// The data plane may well work with the hub down: measure it as direct addressing.
			r.p.Step("Could not read the addressing of %s from its Cluster on the hub (%v); measuring it as direct addressing", m.ID, err)
		}
		mem.globalnet, mem.secondary = addressing == v1alpha1.AddressingGlobalnet, addressing == v1alpha1.AddressingSecondary
		r.members = append(r.members, mem)
		report.Clusters = append(report.Clusters, m.ID)
	}
	defer workload.Cleanup(ctx, members, r.ns, r.p)
	if err := r.deploy(ctx); err != nil {
		return report, err
	}
	if err := r.waitReady(ctx); err != nil {
		return report, err
	}
	// Only the clusters whose imports get a ClusterSet IP are waited for.
	var withVIPs []*workload.Member
	for _, m := range r.members {
		if !m.secondary {
			withVIPs = append(withVIPs, m.Member)
		}
	}
	ips := workload.WaitImports(ctx, r.p, withVIPs, r.ns, serviceName, opts.ReadyTimeout, "bench Services", "pod-to-service measurements",
		func(from, to string) bool { return len(families(r.member(from), r.member(to))) == 2 })
	for _, m := range r.members {
		m.clusterSetIPs = ips[m.ID]
	}
	report.Rows, report.Notes = r.measureAll(ctx)
	report.Families = familyRatios(report.Rows)
	if err := ctx.Err(); err != nil {
		return report, fmt.Errorf("measurements interrupted: %w", err)
	}
	return report, nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

func (r *runner) deploy(ctx context.Context) error {
	start := time.Now()
	r.p.Step("Deploying bench pods in namespace %s of %s", r.ns, strings.Join(r.ids(), ", "))
	for _, m := range r.members {
		objs := objects(r.ns, m.ID, r.opts.Image)
		if m.globalnet {
			objs = append(objs, globalnetObjects(r.ns, m.ID)...)
		}
		if err := workload.CreateAll(ctx, m.Member, objs, r.opts.ReadyTimeout, "bench", "--namespace"); err != nil {
			return err
		}
	}
	r.p.Done(start, "created a server, its exported Service %s and a client pod in each cluster", serviceName("<cluster>"))
	return nil
}

// waitReady waits for the pods and the Services' cluster IPs, and records the servers'
// addresses.
func (r *runner) waitReady(ctx context.Context) error {
	start := time.Now()
	r.p.Step("Waiting for the bench pods to be ready")
	pending, err := workload.Poll(ctx, r.p, r.opts.ReadyTimeout, func(ctx context.Context) (bool, string) {
		var waiting []string
		for _, m := range r.members {
			for _, name := range []string{serverName, clientName} {
				pod, why := workload.ReadyPod(ctx, m.Member, r.ns, name)
				if pod == nil {
					waiting = append(waiting, why)
					continue
				}
				m.nodes[name] = pod.Spec.NodeName
				if name != serverName {
					if m.direct() {
						m.clientIP6 = workload.SecondIPv6(pod)
					}
					continue
				}
				if m.direct() {
					m.server.podIP6 = workload.SecondIPv6(pod)
				}
				ip, err := netip.ParseAddr(pod.Status.PodIP)
				if err != nil {
					waiting = append(waiting, fmt.Sprintf("%s/%s (pod IP %q)", m.ID, name, pod.Status.PodIP))
					continue
				}
				m.server.podIP = ip
				if m.globalnet {
					global, why := workload.GlobalIP(ctx, m.Client, r.ns, workload.PodGlobalIPName(serverName))
					if !global.IsValid() {
						waiting = append(waiting, fmt.Sprintf("%s/%s (global IP: %s)", m.ID, name, why))
						continue
					}
					m.server.globalIP = global
				}
				// A malformed network-status annotation is the secondary network's problem;
				// the pod IP still measures what it can.
				m.server.secondaryIP, _ = secondaryAddr(pod.Annotations)
			}
			svc := &corev1.Service{}
			if err := m.Client.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: serviceName(m.ID)}, svc); err != nil {
				waiting = append(waiting, fmt.Sprintf("%s/%s (%v)", m.ID, serviceName(m.ID), err))
				continue
			}
			if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil {
				m.server.clusterIP = ip
			}
			if m.direct() {
				m.server.clusterIP6 = workload.ServiceIPv6(svc)
			}
		}
		return len(waiting) == 0, "pods " + strings.Join(waiting, ", ")
	})
	if err != nil {
		return fmt.Errorf("waiting for the bench pods: %w; still not ready: %s (see `kubectl -n %s describe pods` in that cluster)", err, pending, r.ns)
	}
	r.p.Done(start, "bench pods ready")
	return nil
}

// step is one row of a run: path from from's client to to's server in family, beside the
// baseline from's client to its own server in baseFamily.
type step struct {
	path               Path
	family, baseFamily string
	from, to           *member
}

// plan lists the rows of a run in report order: for each path, every ordered pair of
// clusters in each of its families (workload.PairFamilies), IPv4 and then IPv6 right after it
// so that the two are compared under the same load. The baseline is in the row's family; a
// dual-stack client's family-less baseline (towards an IPv4-only cluster) is its IPv4 one, its
// primary family. It also returns the notes of what is not measured (workload.FamilyNote).
func plan(members []*member) ([]step, []string) {
	var notes []string
	for _, from := range members {
		for _, to := range members {
			if n := workload.FamilyNote("measured", "bench", from.ID, to.ID, from.clientIP6, to.server.podIP6); from != to && n != "" {
				notes = append(notes, n)
			}
		}
	}
	var steps []step
	for _, path := range Paths {
		for _, from := range members {
			for _, to := range members {
				if from == to {
					continue
				}
				for _, family := range families(from, to) {
					base := family
					if base == "" && from.clientIP6.IsValid() {
						base = workload.FamilyIPv4
					}
					steps = append(steps, step{path: path, family: family, baseFamily: base, from: from, to: to})
				}
			}
		}
	}
	return steps, notes
}

// measureAll measures the rows of plan, each baseline once per client cluster, path and
// family, and returns them with plan's notes. The rows of one path and direction (its two
// families, when it has two) are measured together with their baselines, in rounds (run).
func (r *runner) measureAll(ctx context.Context) ([]Row, []string) {
	steps, notes := plan(r.members)
	for _, n := range notes {
		r.p.Step("%s", n)
	}
	baselines := map[string]*job{}
	var rows []Row
	for len(steps) > 0 && ctx.Err() == nil {
		// plan puts the families of a path and direction next to each other.
		n := 1
		for n < len(steps) && steps[n].path == steps[0].path && steps[n].from == steps[0].from && steps[n].to == steps[0].to {
			n++
		}
		group := steps[:n]
		steps = steps[n:]
		var jobs []*job
		cross := make([]*job, len(group))
		base := make([]*job, len(group))
		for i, s := range group {
			key := string(s.path) + "/" + s.from.ID + "/" + s.baseFamily
			if baselines[key] == nil {
				baselines[key] = r.newJob(s.path, s.baseFamily, s.from, s.from)
				jobs = append(jobs, baselines[key])
			}
			base[i], cross[i] = baselines[key], r.newJob(s.path, s.family, s.from, s.to)
			jobs = append(jobs, cross[i])
		}
		r.run(ctx, jobs)
		for i, s := range group {
			row := Row{Path: s.path, Family: s.family, From: s.from.ID, To: s.to.ID, CrossCluster: cross[i].m, InCluster: base[i].m}
			row.Ratio = ratio(row.CrossCluster, row.InCluster)
			rows = append(rows, row)
		}
	}
	return rows, notes
}

// job is one measurement in the making: path from from's client to to's server in family.
type job struct {
	path     Path
	family   string
	from, to *member
	// name is the job in step lines: "throughput pod-to-pod/IPv6 east->west".
	name string
	m    Measurement
	// stopped is set once the measurement cannot go on: not applicable or failed.
	stopped bool
	// start is when the server first answered.
	start time.Time
	// tps or lats are the results of the runs, in the order of m.Runs.
	tps  []load.ThroughputResult
	lats []load.LatencyResult
}

func (r *runner) newJob(path Path, family string, from, to *member) *job {
	return &job{
		path: path, family: family, from: from, to: to,
		name: fmt.Sprintf("%s %s %s->%s", r.opts.Kind, label(path, family), from.ID, to.ID),
		m:    Measurement{From: from.ID, To: to.ID, Family: family, ClientNode: from.nodes[clientName], ServerNode: to.nodes[serverName]},
	}
}

// measure makes one measurement on its own (run).
func (r *runner) measure(ctx context.Context, path Path, family string, from, to *member) Measurement {
	j := r.newJob(path, family, from, to)
	r.run(ctx, []*job{j})
	return j.m
}

// run makes the measurements of jobs together: each first waits until its server answers,
// then they take turns, one run each per round, for Repeat rounds, and each keeps its median
// run. Measurements that are compared (a path's two families, each with its baseline) so meet
// the same load: on a shared machine the load drifts over the minutes a measurement takes,
// and measured one after the other the first family would meet other minutes than the second.
// Round i of each is Runs[i], so per-round ratios can be taken too (FamilyRatio).
func (r *runner) run(ctx context.Context, jobs []*job) {
	for _, j := range jobs {
		r.prepare(ctx, j)
	}
	for range r.opts.Repeat {
		for _, j := range jobs {
			if !j.stopped && ctx.Err() == nil {
				r.runOnce(ctx, j)
			}
		}
	}
	for _, j := range jobs {
		if j.stopped || len(j.m.Runs) == 0 {
			continue
		}
		i := medianIndex(j.m.Runs)
		if len(j.tps) > 0 {
			j.m.Throughput = &j.tps[i]
		} else {
			j.m.Latency = &j.lats[i]
		}
		r.p.Done(j.start, "%s (%s, node %s to %s): %s", j.name, j.m.Address, j.m.ClientNode, j.m.ServerNode, cell(j.m))
	}
}

// prepare picks the job's address and waits until its server answers; a job that cannot be
// measured is stopped with why.
func (r *runner) prepare(ctx context.Context, j *job) {
	ip, err := address(j.path, j.family, j.from != j.to, j.from.secondary, j.to.server, j.from.clusterSetIPs[j.to.ID])
	if errors.Is(err, ErrNotApplicable) {
		j.m.NotApplicable, j.stopped = err.Error(), true
		r.p.Step("%s: %s", j.name, j.m.NotApplicable)
		return
	}
	if err != nil {
		r.stop(j, err.Error())
		return
	}
	j.m.Address = netip.AddrPortFrom(ip, port(r.opts.Kind)).String()
	j.start = time.Now()
	if err := r.reach(ctx, j.from, j.m.Address); err != nil {
		r.stop(j, err.Error())
	}
}

// runOnce runs the load generator once for j and records the run.
func (r *runner) runOnce(ctx context.Context, j *job) {
	out, err := r.exec(ctx, j.from, r.argv(r.opts.Kind, j.m.Address, r.opts.Duration))
	var tp *load.ThroughputResult
	var lat *load.LatencyResult
	if err == nil {
		tp, lat, err = parseResult(r.opts.Kind, out)
	}
	if err != nil {
		r.stop(j, fmt.Sprintf("measuring %s from %s: %v", j.m.Address, j.from.ID, err))
		return
	}
	if tp != nil {
		j.tps = append(j.tps, *tp)
	}
	if lat != nil {
		j.lats = append(j.lats, *lat)
	}
	j.m.Runs = append(j.m.Runs, headline(tp, lat))
}

// stop fails j with why; the runs it made stay in the report.
func (r *runner) stop(j *job, why string) {
	j.m.Error, j.stopped = why, true
	r.p.Step("%s: %s", j.name, why)
}

// reach tries short latency runs from the client to the server's echo port until one
// succeeds, so that a measurement does not start while the path is still converging and a
// dead path fails with the client's reason.
func (r *runner) reach(ctx context.Context, from *member, addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	echo := netip.AddrPortFrom(ap.Addr(), echoPort).String()
	deadline := time.Now().Add(r.opts.ReachTimeout)
	for {
		_, err := r.exec(ctx, from, r.argv(KindLatency, echo, 200*time.Millisecond))
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s does not answer from %s within %s: %w (`octopus verify` checks the paths between the clusters)", echo, from.ID, r.opts.ReachTimeout, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// argv is the load generator's command line in the client pod.
func (r *runner) argv(k Kind, addr string, d time.Duration) []string {
	argv := []string{"octopus-echo", "bench", string(k), "--target", addr, "--duration", d.String()}
	if k == KindThroughput {
		return append(argv, "--streams", strconv.Itoa(r.opts.Streams))
	}
	return append(argv, "--size", strconv.Itoa(r.opts.Size))
}

// exec runs argv in from's client pod; the bound leaves the load generator time to dial
// (5 s) and finish after its duration. An exec that never started is tried again
// (retryUnstarted).
func (r *runner) exec(ctx context.Context, from *member, argv []string) (string, error) {
	return retryUnstarted(ctx, execAttempts, time.Second, func() (string, error) {
		if r.execIn != nil {
			return r.execIn(ctx, from, argv)
		}
		return workload.Exec(ctx, from.Member, r.ns, clientName, r.opts.Duration+30*time.Second, argv...)
	}, func(err error) { r.p.Step("exec in %s's client pod did not start, trying again: %v", from.ID, err) })
}

// execAttempts bounds the tries of one exec that does not start.
const execAttempts = 3

// retryUnstarted runs run up to attempts times while it fails without the command having run
// (workload.CommandRan): on a loaded node the runtime can time out starting an exec ("failed
// to exec in container: failed to load task: context deadline exceeded"), which says nothing
// of the path being measured. A command that ran and failed is not run again; onRetry hears of
// each retry.
func retryUnstarted(ctx context.Context, attempts int, pause time.Duration, run func() (string, error), onRetry func(error)) (string, error) {
	for i := 1; ; i++ {
		out, err := run()
		if err == nil || workload.CommandRan(err) || i >= attempts || ctx.Err() != nil {
			return out, err
		}
		onRetry(err)
		select {
		case <-ctx.Done():
			return out, err
		case <-time.After(pause):
		}
	}
}

// parseResult reads the load generator's JSON line.
func parseResult(k Kind, out string) (*load.ThroughputResult, *load.LatencyResult, error) {
	out = strings.TrimSpace(out)
	if k == KindThroughput {
		var tp load.ThroughputResult
		if err := json.Unmarshal([]byte(out), &tp); err != nil || tp.Seconds <= 0 {
			return nil, nil, fmt.Errorf("unexpected output of the load generator %q (is the image %s's?)", out, DefaultImage)
		}
		return &tp, nil, nil
	}
	var lat load.LatencyResult
	if err := json.Unmarshal([]byte(out), &lat); err != nil || lat.Requests == 0 {
		return nil, nil, fmt.Errorf("unexpected output of the load generator %q (is the image %s's?)", out, DefaultImage)
	}
	return nil, &lat, nil
}

// member is the member of cluster id.
func (r *runner) member(id string) *member {
	for _, m := range r.members {
		if m.ID == id {
			return m
		}
	}
	return nil
}

func (r *runner) ids() []string {
	ids := make([]string, len(r.members))
	for i, m := range r.members {
		ids[i] = m.ID
	}
	return ids
}
