// Command lab measures the lab (`octopus lab up`, package internal/lab) side by side in one
// run: the bring-up time of lab.Up for hub + 2 and hub + 4 clusters and the time until every
// cluster is connected across the set (agents heartbeating to the hub, every gateway's tunnel
// to every other cluster Connected), the memory of every process the lab runs by kind, and
// the start-to-Ready latency of pods created one at a time, broken down into what a watch
// sees on the way (scheduled, pod IP, container running, Ready). Every round is a fresh lab:
// lab.Up, measurements, Stop and Down. The nodes are real (kubelet and containerd); the
// stand-in node agent they replaced was measured beside them in docs/benchmarks.md.
//
// It needs root and takes the machine-wide lab lock the tests take (only one lab network can
// exist per machine), so it waits for lab tests that are running. Run it from the repository
// root; it builds octopus-agent, octopus-echo and octopus-dns into a temporary directory.
//
//	sudo go run ./hack/bench/lab -rounds 5 -clusters 2,4 -pods 20
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/go-logr/logr"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/bench/stats"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/heartbeat"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/procfs"
	"github.com/octopus-mcs/octopus/internal/progress"
)

type config struct {
	sizes        []int
	rounds       int
	pods         int
	podClusters  int
	readyTimeout time.Duration
	podTimeout   time.Duration
	verbose      bool
}

func main() {
	var c config
	sizes := flag.String("clusters", "2,4", "member-cluster counts to bring up (hub + N each), comma-separated")
	flag.IntVar(&c.rounds, "rounds", 5, "fresh labs per cluster count; the summary is the median over rounds")
	flag.IntVar(&c.pods, "pods", 20, "pods of each kind created one after another per round (0: skip)")
	flag.IntVar(&c.podClusters, "pods-in", 2, "measure pod latency only in the rounds with this many clusters (0: in all)")
	flag.DurationVar(&c.readyTimeout, "ready-timeout", 3*time.Minute, "how long to wait for cross-cluster readiness before recording it as not reached")
	flag.DurationVar(&c.podTimeout, "pod-timeout", time.Minute, "how long one pod may take to become Ready before the run fails")
	flag.BoolVar(&c.verbose, "v", false, "show lab.Up's progress steps")
	flag.Parse()
	logf.SetLogger(logr.Discard())
	var err error
	c.sizes, err = parseSizes(*sizes)
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = run(ctx, c)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lab benchmark:", err)
		os.Exit(1)
	}
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > lab.MaxClusters {
			return nil, fmt.Errorf("-clusters %q: want comma-separated counts from 1 to %d", s, lab.MaxClusters)
		}
		out = append(out, n)
	}
	return out, nil
}

// setup is one lab shape: its member-cluster count.
type setup struct {
	n int
}

func (s setup) String() string { return fmt.Sprintf("hub + %d", s.n) }

// setups lists every measured shape in the order of the tables.
func (c config) setups() []setup {
	var out []setup
	for _, n := range c.sizes {
		out = append(out, setup{n: n})
	}
	return out
}

// roundResult is what one fresh lab measured.
type roundResult struct {
	up, ready, down time.Duration // ready is 0 when not reached within -ready-timeout
	memory          map[string]usage
	pods            map[string][]podTimes // by podKind name
}

func run(ctx context.Context, c config) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: the lab creates network namespaces and links (run it with sudo)")
	}
	if c.rounds < 1 {
		return errors.New("-rounds: want at least 1")
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "octopus-bench-lab-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if tmp, err = filepath.EvalSymlinks(tmp); err != nil {
		return err
	}
	binDir := filepath.Join(tmp, "bin")
	// All of `make build`: real nodes make the project's image of them (lab.Options.AgentBinary).
	fmt.Fprintln(os.Stderr, "building octopus, octopus-agent, octopus-echo and octopus-dns")
	build := exec.CommandContext(ctx, "go", "build", "-o", binDir+"/", "./cmd/octopus", "./cmd/octopus-agent", "./cmd/octopus-echo", "./cmd/octopus-dns")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the lab's binaries (run from the repository root): %w", err)
	}
	k8sBin, err := controlplane.EnsureBinaries(ctx, root, os.Stderr)
	if err != nil {
		return fmt.Errorf("control-plane binaries (run `make k8s-binaries` from the repository root): %w", err)
	}
	_, containerdBin, err := controlplane.EnsureNodeRuntime(ctx, root, os.Stderr)
	if err != nil {
		return fmt.Errorf("the kubelet and containerd (run `make k8s-binaries` from the repository root): %w", err)
	}
	unlock, err := lockLab(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	load := procfs.LoadAverage()
	started := time.Now()

	results := map[setup][]roundResult{}
	// Rounds alternate between the setups, so that a change of the machine's load during the
	// run touches all of them alike.
	for r := range c.rounds {
		for _, s := range c.setups() {
			res, err := oneRound(ctx, c, s, r, lab.Options{
				Clusters: s.n, Dir: filepath.Join(tmp, "lab"), BinDir: k8sBin,
				AgentBinary: filepath.Join(binDir, "octopus-agent"), ContainerdBinDir: containerdBin,
			})
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", s, r+1, err)
			}
			results[s] = append(results[s], res)
		}
	}
	fmt.Printf("Run of %s, %d rounds per setup; load average before the run: %s, after: %s.\n\n",
		time.Since(started).Round(time.Second), c.rounds, load, procfs.LoadAverage())
	printBringUp(os.Stdout, c.setups(), results)
	printMemory(os.Stdout, c.setups(), results)
	printPods(os.Stdout, c.setups(), results)
	return nil
}

// oneRound brings up a fresh lab, measures it and removes it.
func oneRound(ctx context.Context, c config, s setup, r int, opts lab.Options) (res roundResult, err error) {
	n := s.n
	if c.verbose {
		opts.Progress = &progress.Reporter{W: os.Stderr}
	}
	start := time.Now()
	l, err := lab.Up(ctx, opts)
	if err != nil {
		return res, fmt.Errorf("lab.Up: %w", err)
	}
	res.up = time.Since(start)
	stopped := false
	teardown := func() error {
		stopped = true
		t := time.Now()
		err := errors.Join(l.Stop(), lab.Down(opts.Dir))
		res.down = time.Since(t)
		return err
	}
	defer func() {
		if !stopped {
			err = errors.Join(err, teardown())
		}
	}()

	hc, err := client.New(l.Env.Cluster(lab.HubName).RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		return res, err
	}
	if err := waitConnected(ctx, hc, n, c.readyTimeout); err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		fmt.Fprintf(os.Stderr, "%s round %d: %v\n", s, r+1, err)
	} else {
		res.ready = time.Since(start)
	}

	// The lab at rest (its CoreDNS and octopus-dns pods included), before the benchmark's pods.
	if res.memory, err = labMemory(opts.Dir, l.Network.ID); err != nil {
		return res, err
	}
	if c.pods > 0 && (c.podClusters == 0 || c.podClusters == n) {
		cs, err := kubernetes.NewForConfig(l.Env.Cluster(lab.ClusterName(1)).RESTConfig())
		if err != nil {
			return res, err
		}
		res.pods = map[string][]podTimes{}
		for i, k := range podKinds {
			t, err := podLatencies(ctx, cs, "bench", k, fmt.Sprintf("p%d", i), c.pods, c.podTimeout)
			if err != nil {
				return res, fmt.Errorf("%s: %w", k.name, err)
			}
			res.pods[k.name] = t
		}
	}
	if err := teardown(); err != nil {
		return res, fmt.Errorf("stopping the lab: %w", err)
	}
	leftNs, leftLinks, err := labnet.Leftovers(l.Network.ID)
	if err != nil {
		return res, fmt.Errorf("checking what Stop and Down left: %w", err)
	}
	if len(leftNs)+len(leftLinks) > 0 {
		return res, fmt.Errorf("stop and Down left namespaces %v and links %v: the next round would not start clean (run `octopus lab down --dir %s`)", leftNs, leftLinks, opts.Dir)
	}
	fmt.Fprintf(os.Stderr, "%s round %d: up %s, cross-cluster ready %s, stop+down %s, lab RSS %s PSS %s%s\n",
		s, r+1, secs(res.up), readyString(res.ready), secs(res.down), mib(total(res.memory).RSS), mib(total(res.memory).PSS), podSummary(res.pods))
	return res, nil
}

// waitConnected waits until every member's agent heartbeats to the hub and every cluster's
// active gateway reports its tunnel to every other cluster Connected.
func waitConnected(ctx context.Context, hc client.Client, members int, timeout time.Duration) error {
	var why string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		statuses, err := cluster.CollectStatus(ctx, hc, v1alpha1.DefaultHubNamespace, time.Now())
		if err != nil {
			why = err.Error()
			return false, nil //nolint:nilerr // the hub was just deployed; keep polling until the timeout
		}
		connected := 0
		for _, s := range statuses {
			if s.State == heartbeat.StateConnected {
				connected++
			}
		}
		if connected < members {
			why = fmt.Sprintf("%d of %d agents connected", connected, members)
			return false, nil
		}
		peers := &v1alpha1.PeerList{}
		if err := hc.List(ctx, peers, client.InNamespace(v1alpha1.DefaultHubNamespace)); err != nil {
			why = err.Error()
			return false, nil //nolint:nilerr // as above
		}
		tunnels := 0
		for _, p := range peers.Items {
			for _, c := range p.Status.Connections {
				if c.State == v1alpha1.ConnectionConnected {
					tunnels++
				}
			}
		}
		why = fmt.Sprintf("%d peers, %d of %d tunnels Connected", len(peers.Items), tunnels, members*(members-1))
		return len(peers.Items) == members && tunnels == members*(members-1), nil
	})
	if err != nil {
		return fmt.Errorf("cross-cluster readiness not reached in %s (%s): %w", timeout, why, err)
	}
	return nil
}

// lockLab takes the machine-wide lab lock of internal/testenv (LabNetwork), held until the
// returned function runs. The flock dies with the process, so a crash never wedges it.
// testenv itself is not imported: it would link package testing into this program.
func lockLab(ctx context.Context) (func(), error) {
	path := filepath.Join(os.TempDir(), "octopus-lab-network.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the lab lock %s: %w", path, err)
	}
	fd := int(f.Fd())
	if syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		fmt.Fprintf(os.Stderr, "waiting for the lab lock %s (a lab test is running)\n", path)
		for syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			select {
			case <-ctx.Done():
				f.Close()
				return nil, ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
	return func() {
		_ = syscall.Flock(fd, syscall.LOCK_UN)
		f.Close()
	}, nil
}

func printBringUp(w io.Writer, setups []setup, results map[setup][]roundResult) {
	fmt.Fprintln(w, "| lab | lab.Up median (min–max) | to cross-cluster ready, from lab.Up's start | Stop + Down median (min–max) |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, n := range setups {
		var up, ready, down []time.Duration
		for _, r := range results[n] {
			up, down = append(up, r.up), append(down, r.down)
			if r.ready > 0 {
				ready = append(ready, r.ready)
			}
		}
		readyCell := "not reached"
		if len(ready) > 0 {
			readyCell = spread(ready)
			if len(ready) < len(up) {
				readyCell += fmt.Sprintf(" (%d of %d rounds)", len(ready), len(up))
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", n, spread(up), readyCell, spread(down))
	}
	fmt.Fprintln(w)
}

func printMemory(w io.Writer, setups []setup, results map[setup][]roundResult) {
	fmt.Fprint(w, "| process kind |")
	sep := "|---|"
	for _, n := range setups {
		fmt.Fprintf(w, " %s: procs | RSS | PSS |", n)
		sep += "---|---|---|"
	}
	fmt.Fprintln(w, "\n"+sep)
	row := func(label string, get func(map[string]usage) usage) {
		fmt.Fprintf(w, "| %s |", label)
		for _, n := range setups {
			var procs, rss, pss []int64
			for _, r := range results[n] {
				u := get(r.memory)
				procs, rss, pss = append(procs, int64(u.Procs)), append(rss, u.RSS), append(pss, u.PSS)
			}
			fmt.Fprintf(w, " %d | %s | %s |", stats.Median(procs), mib(stats.Median(rss)), mib(stats.Median(pss)))
		}
		fmt.Fprintln(w)
	}
	for _, k := range kinds {
		row(k, func(m map[string]usage) usage { return m[k] })
	}
	row("**whole lab**", total)
	fmt.Fprintln(w)
}

func printPods(w io.Writer, setups []setup, results map[setup][]roundResult) {
	fmt.Fprintln(w, "| lab | pod | create → Ready p50 | p99 | max | p50 of create → scheduled | → pod IP | → container running |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, n := range setups {
		for _, k := range podKinds {
			var p50, p99, mx, sched, addr, run []time.Duration
			for _, r := range results[n] {
				t, ok := r.pods[k.name]
				if !ok {
					continue
				}
				ready := field(t, func(p podTimes) time.Duration { return p.ready })
				p50, p99, mx = append(p50, stats.PercentileOf(ready, 50)), append(p99, stats.PercentileOf(ready, 99)), append(mx, slices.Max(ready))
				sched = append(sched, stats.PercentileOf(field(t, func(p podTimes) time.Duration { return p.scheduled }), 50))
				addr = append(addr, stats.PercentileOf(field(t, func(p podTimes) time.Duration { return p.addressed }), 50))
				run = append(run, stats.PercentileOf(field(t, func(p podTimes) time.Duration { return p.running }), 50))
			}
			if len(p50) == 0 {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", n, k.name,
				ms(stats.PercentileOf(p50, 50)), ms(stats.PercentileOf(p99, 50)), ms(stats.PercentileOf(mx, 50)),
				ms(stats.PercentileOf(sched, 50)), ms(stats.PercentileOf(addr, 50)), ms(stats.PercentileOf(run, 50)))
		}
	}
}

func field(t []podTimes, f func(podTimes) time.Duration) []time.Duration {
	out := make([]time.Duration, len(t))
	for i, p := range t {
		out[i] = f(p)
	}
	return out
}

func total(m map[string]usage) usage {
	var t usage
	for _, u := range m {
		t.Procs, t.RSS, t.PSS = t.Procs+u.Procs, t.RSS+u.RSS, t.PSS+u.PSS
	}
	return t
}

func podSummary(pods map[string][]podTimes) string {
	var b strings.Builder
	for _, k := range podKinds {
		if t, ok := pods[k.name]; ok {
			ready := field(t, func(p podTimes) time.Duration { return p.ready })
			fmt.Fprintf(&b, "; %s: Ready p50 %s p99 %s", k.name, ms(stats.PercentileOf(ready, 50)), ms(stats.PercentileOf(ready, 99)))
		}
	}
	return b.String()
}

// spread is "median (min–max)" of d.
func spread(d []time.Duration) string {
	return fmt.Sprintf("%s (%s–%s)", secs(stats.PercentileOf(d, 50)), secs(slices.Min(d)), secs(slices.Max(d)))
}

func readyString(d time.Duration) string {
	if d == 0 {
		return "not reached"
	}
	return secs(d)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
func ms(d time.Duration) string   { return fmt.Sprintf("%d ms", d.Milliseconds()) }
func mib(b int64) string          { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
