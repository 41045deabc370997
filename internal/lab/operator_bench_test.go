package lab_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/internal/bench/stats"
	"github.com/octopus-mcs/octopus/internal/dnsconfig"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/manifests/release"
	"github.com/octopus-mcs/octopus/internal/operator"
	"github.com/octopus-mcs/octopus/internal/procfs"
	"github.com/octopus-mcs/octopus/internal/testenv"
	"github.com/octopus-mcs/octopus/internal/version"
)

var (
	fabricJoinRounds = flag.Int("rounds", 5, "BenchmarkFabricJoin: rounds, each joining cluster2 once through a Fabric and once with `octopus join`; BenchmarkSecondaryThroughput: rounds of throughput measurements")
	fabricJoinBudget = flag.Duration("budget", 0, "BenchmarkFabricJoin: wall-clock budget from the benchmark's start (lock wait included); "+
		"no round starts that the last one's duration says would not fit, and the lab is torn down at the latest when it ends (0: none)")
)

const (
	// joinPoll is how often the benchmark looks at the Fabric, the hub and the TCP path: the
	// resolution of every figure.
	joinPoll = 200 * time.Millisecond
	// joinTimeout bounds one join, from t0 until every milestone was seen (the lab test's
	// Fabrics were Ready after about a minute on a loaded machine).
	joinTimeout = 6 * time.Minute
	// leaveTimeout bounds one leave.
	leaveTimeout = 4 * time.Minute
	// benchMember joins and leaves every round; benchPeer stays joined throughout.
	benchMember, benchPeer = "cluster2", "cluster1"
)

// BenchmarkFabricJoin measures issue 18's comparison on one lab of real nodes (kubelet,
// containerd) brought up unjoined: the time from `kubectl apply` of a member Fabric to
// Ready=True and to the first cross-cluster TCP connection, beside the same with `octopus
// join --agent charts` and, for issue 16's charts vs process mode, with `octopus join --agent
// process`, median over -rounds rounds (default 5). It prints per-round figures
// and medians as Markdown to stdout and its progress to stderr.
//
//	go test -run '^$' -bench FabricJoin -benchtime 1x -timeout 0 ./internal/lab/ -args -rounds 5   # as root
//
// Set up once: the hub deployed (hub.Deploy, as `octopus hub deploy`; the hub's side is not
// what is measured), cluster1 joined with `octopus join --agent charts` and left joined as the
// peer, an echo pod on cluster1's worker and a client pod on cluster2's worker. Each round
// joins cluster2 the three ways, rotating which goes first, so that a change of the machine's
// load touches all alike:
//   - operator: the octopus-operator chart installed and its pod holding the leader Lease
//     (an operator that was installed earlier, as a user has it), the broker-info Secret
//     present; t0 is `kubectl apply` of the member Fabric; then `kubectl delete fabric` until
//     the Fabric is gone (its finalizer leaves) and the hub has no Cluster for it;
//   - CLI: the operator chart uninstalled first, because `octopus join` goes through the
//     operator wherever its Deployment exists (operator.Installed looks at the Deployment
//     only, so scaling it to 0 would make join wait for a Fabric no one reconciles); t0 is
//     the start of `octopus join`; then `octopus leave`;
//   - process: the operator chart uninstalled as for the CLI; t0 is the start of `octopus
//     join --agent process`, which joins and starts the agent's controller as a detached
//     process on this machine (it reaches the API server as the CLI does) and returns; that
//     mode starts no gateway or route agent, so the benchmark then starts them as the lab
//     runs them where nodes cannot run the chart (Lab.StartComponentProcesses: supervised
//     processes in the nodes' namespaces, the same settings as the chart's values), as a
//     user of that mode had to; the time to the first request includes theirs. Then the
//     processes are stopped (SIGTERM: the gateways hand over and clean up) and `octopus
//     leave` stops the controller and leaves.
//
// Both paths install the same member chart with the same values (the gateway nodes are the
// ones the lab labelled, so the Fabric has no cloudPrepareConfig) and name the pod CIDR (the
// lab's kube-controller-manager is no pod, so join cannot discover it); the process mode
// runs the same binaries with the same flags as processes, and its join deploys octopus-dns
// itself. For both the
// benchmark records, from t0, when the cluster is connected by the operator's own Ready
// criteria, watched by the benchmark (cluster2's Peer on the hub Connected to cluster1, and
// octopus-dns available), and the first TCP echo from cluster2's pod to cluster1's pod by pod
// IP, a new attempt every joinPoll; for the operator also when the Fabric reported Joined,
// ComponentsReady and Ready, for the CLI when the command returned.
func BenchmarkFabricJoin(b *testing.B) {
	begin := time.Now()
	if *fabricJoinRounds < 1 {
		b.Fatal("-rounds: want at least 1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	if *fabricJoinBudget > 0 {
		ctx, cancel = context.WithDeadline(context.Background(), begin.Add(*fabricJoinBudget))
	}
	defer cancel()
	// Built before the lab lock is taken, so that the lock is held only while the lab runs.
	binDir := testenv.BinDir(b)
	bins := buildCommands(b, "octopus-agent", "octopus-echo", "octopus-dns", "octopus", "octopus-operator")
	_, containerd, err := controlplane.EnsureNodeRuntime(ctx, testenv.RepoRoot(b), os.Stderr)
	if err != nil {
		b.Fatal(err)
	}
	testenv.LabNetwork(b)
	fmt.Fprintf(os.Stderr, "BenchmarkFabricJoin: the lab lock taken %.0fs after the start; load average %s\n", time.Since(begin).Seconds(), procfs.LoadAverage())
	up := time.Now()
	l, _ := startLab(ctx, b, lab.Options{
		Clusters: 2, Unjoined: true,
		BinDir: binDir, AgentBinary: bins["octopus-agent"], ContainerdBinDir: containerd,
	})
	if !l.Charts() {
		b.Fatal("the lab's nodes have no Octopus image: the charts could not run")
	}
	fmt.Fprintf(os.Stderr, "lab up in %.1fs\n", time.Since(up).Seconds())
	fj := setUpFabricJoin(ctx, b, l, binDir, bins["octopus"])

	var rounds []joinRound
	loadBefore := procfs.LoadAverage()
	b.ResetTimer()
measure:
	for r := range *fabricJoinRounds {
		if last := len(rounds); last > 0 && *fabricJoinBudget > 0 {
			if d, _ := ctx.Deadline(); time.Until(d) < rounds[last-1].took*5/4 {
				fmt.Fprintf(os.Stderr, "stopping after %d rounds: round %d would not fit in -budget\n", last, r+1)
				break
			}
		}
		start := time.Now()
		round := joinRound{first: joinWays[r%len(joinWays)]}
		for i := range joinWays {
			var err error
			switch way := joinWays[(r+i)%len(joinWays)]; way {
			case wayOperator:
				round.operator, err = fj.operatorJoin(ctx, r+1)
			case wayCharts:
				round.cli, err = fj.cliJoin(ctx, r+1)
			case wayProcess:
				round.process, err = fj.processJoin(ctx, r+1)
			}
			if err != nil {
				// The rounds done so far are still reported.
				b.Errorf("round %d: %v", r+1, err)
				break measure
			}
		}
		round.took = time.Since(start)
		rounds = append(rounds, round)
		fmt.Fprintf(os.Stderr, "round %d done in %.0fs: operator Ready %s, TCP %s; CLI ready %s, TCP %s; process ready %s, TCP %s\n", r+1, round.took.Seconds(),
			secs(round.operator.ready), secs(round.operator.tcp), secs(round.cli.connected), secs(round.cli.tcp),
			secs(round.process.connected), secs(round.process.tcp))
	}
	b.StopTimer()
	writeFabricJoinReport(os.Stdout, rounds, loadBefore, procfs.LoadAverage())
	b.ReportMetric(median(rounds, func(r joinRound) time.Duration { return r.operator.ready }).Seconds(), "operator-ready-s")
	b.ReportMetric(median(rounds, func(r joinRound) time.Duration { return r.cli.connected }).Seconds(), "cli-ready-s")
	b.ReportMetric(median(rounds, func(r joinRound) time.Duration { return r.operator.tcp }).Seconds(), "operator-tcp-s")
	b.ReportMetric(median(rounds, func(r joinRound) time.Duration { return r.cli.tcp }).Seconds(), "cli-tcp-s")
	b.ReportMetric(median(rounds, func(r joinRound) time.Duration { return r.process.connected }).Seconds(), "process-ready-s")
	b.ReportMetric(median(rounds, func(r joinRound) time.Duration { return r.process.tcp }).Seconds(), "process-tcp-s")
}

// The ways a round joins cluster2.
const (
	wayOperator = "operator"
	wayCharts   = "CLI"
	wayProcess  = "process"
)

var joinWays = []string{wayOperator, wayCharts, wayProcess}

// joinTimes are the milestones of one join of cluster2, each from its t0.
type joinTimes struct {
	// returned: `octopus join` returned (CLI and process).
	returned time.Duration
	// joined, components, ready: the Fabric's Joined, ComponentsReady and Ready turned True
	// (operator only).
	joined, components, ready time.Duration
	// connected: cluster2's Peer Connected to cluster1 and octopus-dns available, what the
	// operator's Ready requires beyond the install, as the benchmark sees it.
	connected time.Duration
	// tcp: the first TCP echo from cluster2's pod to cluster1's pod.
	tcp time.Duration
	// leave: `kubectl delete fabric` or `octopus leave` until the cluster had left.
	leave time.Duration
}

// joinRound is one round: a join through the operator, one with the CLI (--agent charts) and
// one with the CLI's process mode.
type joinRound struct {
	first                  string // the way that went first
	operator, cli, process joinTimes
	took                   time.Duration
}

// fabricJoinLab is BenchmarkFabricJoin's lab once set up.
type fabricJoinLab struct {
	l          *lab.Lab
	k          kubectlRunner
	octopus    string // the CLI
	cliEnv     []string
	brokerInfo string // the file `octopus join` reads
	hubNS      string
	kubeconfig string // cluster2's
	podCIDR    string // cluster2's
	cfg        *rest.Config
	member     client.Client // cluster2, admin
	hub        client.Client // the hub, admin
	src, dst   xpod          // cluster2's client pod, cluster1's echo pod
}

// setUpFabricJoin deploys the hub, joins cluster1 with the CLI and starts the two pods.
func setUpFabricJoin(ctx context.Context, b *testing.B, l *lab.Lab, binDir, octopus string) *fabricJoinLab {
	b.Helper()
	start := time.Now()
	hubCP := l.Env.Cluster(lab.HubName)
	info, err := hub.Deploy(ctx, hubCP.RESTConfig(), hub.DeployOptions{})
	if err != nil {
		b.Fatalf("deploying the hub: %v", err)
	}
	dir := b.TempDir()
	member := l.Env.Cluster(benchMember)
	fj := &fabricJoinLab{
		l:       l,
		k:       kubectlRunner{bin: filepath.Join(binDir, "kubectl"), ctx: ctx},
		octopus: octopus,
		// The CLI keeps its state (detached agents, which --agent charts has none of) under
		// XDG_STATE_HOME: not in root's home.
		cliEnv:     append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(dir, "state")),
		brokerInfo: filepath.Join(dir, "broker-info"),
		hubNS:      info.Namespace,
		kubeconfig: member.Kubeconfig,
		podCIDR:    member.PodCIDR.String(),
		cfg:        member.RESTConfig(),
		member:     kubeClient(b, member.Kubeconfig),
		hub:        kubeClient(b, hubCP.Kubeconfig),
	}
	if err := info.WriteFile(fj.brokerInfo); err != nil {
		b.Fatal(err)
	}
	peer := l.Env.Cluster(benchPeer)
	out, err := fj.cli(ctx, "join", fj.brokerInfo, "--cluster-id", benchPeer, "--pod-cidr", peer.PodCIDR.String(),
		"--kubeconfig", peer.Kubeconfig, "--agent", "charts", "--wait")
	if err != nil {
		b.Fatalf("joining %s: %v\n%s", benchPeer, err, out)
	}
	waitFor(b, 3*time.Minute, benchPeer+"'s gateway to publish its Peer", func() error {
		return fj.peerState(ctx, benchPeer, "")
	})
	worker := func(c string) string {
		for _, n := range l.Network.Cluster(c).Nodes {
			if !n.Gateway {
				return n.Name
			}
		}
		b.Fatalf("%s has no worker node", c)
		return ""
	}
	// Both on workers: the path crosses the route agent's routes to the gateway on each side.
	fj.dst = startEchoPod(ctx, b, clientset(b, peer.Kubeconfig), l, benchPeer, worker(benchPeer))
	fj.src = startEchoPod(ctx, b, clientset(b, member.Kubeconfig), l, benchMember, worker(benchMember))
	if err := fj.unreachable(); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "set up in %.1fs: hub deployed, %s joined, pods %s (%s) -> %s (%s)\n", time.Since(start).Seconds(),
		benchPeer, fj.src.name, fj.src.ip, fj.dst.name, fj.dst.ip)
	return fj
}

// operatorJoin is one join through the operator, then its leave.
func (fj *fabricJoinLab) operatorJoin(ctx context.Context, round int) (joinTimes, error) {
	var jt joinTimes
	if err := fj.installOperator(ctx); err != nil {
		return jt, err
	}
	raw, err := os.ReadFile(fj.brokerInfo)
	if err != nil {
		return jt, fmt.Errorf("reading broker-info: %w", err)
	}
	if err := operator.PutBrokerInfo(ctx, fj.member, "broker-info", raw); err != nil {
		return jt, err
	}
	if err := fj.unreachable(); err != nil {
		return jt, err
	}
	fabric := fmt.Sprintf(`apiVersion: octopus.io/v1alpha1
kind: Fabric
metadata: {name: %s}
spec:
  joinConfig:
    clusterID: %s
    brokerInfoSecretRef: {name: broker-info}
    podCIDRs: [%q]
`, v1alpha1.FabricName, benchMember, fj.podCIDR)
	fmt.Fprintf(os.Stderr, "round %d, operator: kubectl apply of the member Fabric\n", round)
	t0 := time.Now()
	if _, err := fj.k.output(fj.kubeconfig, fabric, "apply", "-f", "-"); err != nil {
		return jt, fmt.Errorf("applying the Fabric: %w", err)
	}
	jctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	condition := func(typ string) func(context.Context) error {
		return func(ctx context.Context) error {
			f := &v1alpha1.Fabric{}
			if err := fj.member.Get(ctx, client.ObjectKey{Name: v1alpha1.FabricName}, f); err != nil {
				return err
			}
			if f.Status.ObservedGeneration != f.Generation || !conditionIs(f, typ, metav1.ConditionTrue, "") {
				return fmt.Errorf("the Fabric is not %s=True yet", typ)
			}
			return nil
		}
	}
	err = milestones(jctx, t0, fmt.Sprintf("round %d, operator", round), map[string]milestone{
		"Joined":          {at: &jt.joined, check: condition(v1alpha1.FabricJoined)},
		"ComponentsReady": {at: &jt.components, check: condition(v1alpha1.FabricComponentsReady)},
		"Ready":           {at: &jt.ready, check: condition(v1alpha1.FabricReady)},
		"connected":       {at: &jt.connected, check: fj.connected},
		"TCP":             {at: &jt.tcp, tcp: true},
	}, fj.src, fj.dst)
	if err != nil {
		return jt, fmt.Errorf("joining through the operator: %w", err)
	}

	t1 := time.Now()
	if _, err := fj.k.output(fj.kubeconfig, "", "delete", "fabric", v1alpha1.FabricName, "--wait=false"); err != nil {
		return jt, fmt.Errorf("deleting the Fabric: %w", err)
	}
	err = poll(ctx, leaveTimeout, func(ctx context.Context) error {
		err := fj.member.Get(ctx, client.ObjectKey{Name: v1alpha1.FabricName}, &v1alpha1.Fabric{})
		switch {
		case err == nil:
			return errors.New("the Fabric is still there")
		case !apierrors.IsNotFound(err):
			return err
		}
		return fj.hubForgot(ctx)
	})
	if err != nil {
		return jt, fmt.Errorf("leaving through the operator: %w", err)
	}
	jt.leave = time.Since(t1)
	fmt.Fprintf(os.Stderr, "round %d, operator: left %.1fs after kubectl delete fabric\n", round, jt.leave.Seconds())
	return jt, nil
}

// cliJoin is one `octopus join --agent charts`, then `octopus leave`.
func (fj *fabricJoinLab) cliJoin(ctx context.Context, round int) (joinTimes, error) {
	var jt joinTimes
	if err := fj.withoutOperator(ctx); err != nil {
		return jt, err
	}
	fmt.Fprintf(os.Stderr, "round %d, CLI: octopus join\n", round)
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, fj.octopus, "join", fj.brokerInfo, "--cluster-id", benchMember, "--pod-cidr", fj.podCIDR,
		"--kubeconfig", fj.kubeconfig, "--agent", "charts")
	var out strings.Builder
	cmd.Env, cmd.Stdout, cmd.Stderr = fj.cliEnv, &out, &out
	if err := cmd.Start(); err != nil {
		return jt, fmt.Errorf("starting octopus join: %w", err)
	}
	joined := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		jt.returned = time.Since(t0)
		joined <- err
	}()
	jctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	err := milestones(jctx, t0, fmt.Sprintf("round %d, CLI", round), map[string]milestone{
		"connected": {at: &jt.connected, check: fj.connected},
		"TCP":       {at: &jt.tcp, tcp: true},
	}, fj.src, fj.dst)
	// The command returns long before the tunnel is up; wait for it anyway, so that its
	// figure and output are there to read.
	if jerr := <-joined; jerr != nil {
		return jt, fmt.Errorf("octopus join: %w\n%s", jerr, out.String())
	}
	fmt.Fprintf(os.Stderr, "  %6.1fs octopus join returned\n", jt.returned.Seconds())
	if err != nil {
		return jt, fmt.Errorf("joining with the CLI: %w\noctopus join:\n%s", err, out.String())
	}

	t1 := time.Now()
	if err := fj.leave(ctx); err != nil {
		return jt, err
	}
	jt.leave = time.Since(t1)
	fmt.Fprintf(os.Stderr, "round %d, CLI: left %.1fs after octopus leave started\n", round, jt.leave.Seconds())
	return jt, nil
}

// withoutOperator is where a CLI round starts: the operator uninstalled and benchMember not
// reachable from benchPeer.
func (fj *fabricJoinLab) withoutOperator(ctx context.Context) error {
	if err := fj.uninstallOperator(ctx); err != nil {
		return err
	}
	return fj.unreachable()
}

// leave runs `octopus leave` on benchMember and waits until the hub forgot it.
func (fj *fabricJoinLab) leave(ctx context.Context) error {
	if out, err := fj.cli(ctx, "leave", "--kubeconfig", fj.kubeconfig); err != nil {
		return fmt.Errorf("octopus leave: %w\n%s", err, out)
	}
	if err := poll(ctx, leaveTimeout, fj.hubForgot); err != nil {
		return fmt.Errorf("after octopus leave: %w", err)
	}
	return nil
}

// processJoin is one `octopus join --agent process` with the lab's gateway and route agent
// processes started after it (what that mode leaves to the user), then their stop and
// `octopus leave`.
func (fj *fabricJoinLab) processJoin(ctx context.Context, round int) (joinTimes, error) {
	var jt joinTimes
	if err := fj.withoutOperator(ctx); err != nil {
		return jt, err
	}
	fmt.Fprintf(os.Stderr, "round %d, process: octopus join --agent process\n", round)
	suffix := fmt.Sprintf("-round%d", round)
	t0 := time.Now()
	out, err := fj.cli(ctx, "join", fj.brokerInfo, "--cluster-id", benchMember, "--pod-cidr", fj.podCIDR,
		"--kubeconfig", fj.kubeconfig, "--agent", "process")
	jt.returned = time.Since(t0)
	if err != nil {
		return jt, fmt.Errorf("octopus join --agent process: %w\n%s", err, out)
	}
	fmt.Fprintf(os.Stderr, "  %6.1fs octopus join --agent process returned\n", jt.returned.Seconds())
	if err := fj.l.StartComponentProcesses(benchMember, suffix); err != nil {
		return jt, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = fj.l.StopComponentProcesses(benchMember, suffix, 10*time.Second)
		}
	}()
	jctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	err = milestones(jctx, t0, fmt.Sprintf("round %d, process", round), map[string]milestone{
		"connected": {at: &jt.connected, check: fj.connected},
		"TCP":       {at: &jt.tcp, tcp: true},
	}, fj.src, fj.dst)
	if err != nil {
		return jt, fmt.Errorf("joining in process mode: %w\noctopus join:\n%s", err, out)
	}

	// The gateways first: running, they would publish their Peer again after leave removed it.
	t1 := time.Now()
	stopped = true
	if err := fj.l.StopComponentProcesses(benchMember, suffix, 10*time.Second); err != nil {
		return jt, fmt.Errorf("stopping %s's gateway and route agent processes: %w", benchMember, err)
	}
	if err := fj.leave(ctx); err != nil {
		return jt, err
	}
	jt.leave = time.Since(t1)
	fmt.Fprintf(os.Stderr, "round %d, process: left %.1fs after the processes were stopped and octopus leave started\n", round, jt.leave.Seconds())
	return jt, nil
}

// installOperator installs the operator chart unless it is there, and returns once its pod
// holds the leader Lease: the operator path starts from a running operator, as for a user
// who installed it beforehand, and the chart's install is not what is measured.
func (fj *fabricJoinLab) installOperator(ctx context.Context) error {
	installed, err := operator.Installed(ctx, fj.member)
	if err != nil {
		return err
	}
	if !installed {
		_, err := release.Install(ctx, fj.cfg, release.Options{
			Chart: charts.Operator, Namespace: v1alpha1.OperatorNamespace, AppVersion: version.Version,
			Wait: true, Timeout: 4 * time.Minute,
		})
		if err != nil {
			return fmt.Errorf("installing the operator chart: %w", err)
		}
	}
	return poll(ctx, 2*time.Minute, func(ctx context.Context) error {
		pods := &corev1.PodList{}
		if err := fj.member.List(ctx, pods, client.InNamespace(v1alpha1.OperatorNamespace)); err != nil {
			return err
		}
		lease := &coordinationv1.Lease{}
		if err := fj.member.Get(ctx, client.ObjectKey{Namespace: v1alpha1.OperatorNamespace, Name: operator.LeaseName}, lease); err != nil {
			return fmt.Errorf("the operator's Lease: %w", err)
		}
		holder := ""
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		// controller-runtime's identity is the hostname (the pod's name), "_", a UUID.
		for _, p := range pods.Items {
			if podReady(&p) && strings.HasPrefix(holder, p.Name+"_") {
				return nil
			}
		}
		return fmt.Errorf("no ready operator pod holds Lease %s (holder %q)", operator.LeaseName, holder)
	})
}

// uninstallOperator removes the operator chart and waits until its pod is gone.
func (fj *fabricJoinLab) uninstallOperator(ctx context.Context) error {
	if err := release.Uninstall(ctx, fj.cfg, charts.Operator, v1alpha1.OperatorNamespace, 2*time.Minute); err != nil {
		return err
	}
	return poll(ctx, 2*time.Minute, func(ctx context.Context) error {
		if ok, err := operator.Installed(ctx, fj.member); err != nil {
			return err
		} else if ok {
			return errors.New("the operator's Deployment is still there")
		}
		pods := &corev1.PodList{}
		if err := fj.member.List(ctx, pods, client.InNamespace(v1alpha1.OperatorNamespace)); err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d operator pod(s) left", len(pods.Items))
		}
		return nil
	})
}

// connected is nil once what the operator's GatewaysConnected and ServiceDiscoveryReady require
// holds: cluster2's Peer on the hub with every connection, cluster1's included, Connected, and
// octopus-dns with an available replica.
func (fj *fabricJoinLab) connected(ctx context.Context) error {
	if err := fj.peerState(ctx, benchMember, benchPeer); err != nil {
		return err
	}
	d := &appsv1.Deployment{}
	if err := fj.member.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: dnsconfig.ServiceName}, d); err != nil {
		return err
	}
	if d.Status.AvailableReplicas == 0 {
		return errors.New("octopus-dns has no available replica")
	}
	return nil
}

// peerState is nil when cluster's Peer is on the hub and, unless remote is empty, connected to
// remote with no connection down.
func (fj *fabricJoinLab) peerState(ctx context.Context, cluster, remote string) error {
	peers := &v1alpha1.PeerList{}
	if err := fj.hub.List(ctx, peers, client.InNamespace(fj.hubNS), client.MatchingLabels{v1alpha1.ClusterLabel: cluster}); err != nil {
		return err
	}
	if len(peers.Items) == 0 {
		return fmt.Errorf("%s has no Peer on the hub", cluster)
	}
	if remote == "" {
		return nil
	}
	var seen bool
	for _, c := range peers.Items[0].Status.Connections {
		if c.State != v1alpha1.ConnectionConnected {
			return fmt.Errorf("%s: connection to %s %s", cluster, c.ClusterID, c.State)
		}
		seen = seen || c.ClusterID == remote
	}
	if !seen {
		return fmt.Errorf("%s's Peer lists no connection to %s", cluster, remote)
	}
	return nil
}

// hubForgot is nil once the hub has neither a Cluster nor a Peer of cluster2.
func (fj *fabricJoinLab) hubForgot(ctx context.Context) error {
	err := fj.hub.Get(ctx, client.ObjectKey{Namespace: fj.hubNS, Name: benchMember}, &v1alpha1.Cluster{})
	switch {
	case err == nil:
		return fmt.Errorf("the hub still has Cluster %s", benchMember)
	case !apierrors.IsNotFound(err):
		return err
	}
	if fj.peerState(ctx, benchMember, "") == nil {
		return fmt.Errorf("the hub still has %s's Peer", benchMember)
	}
	return nil
}

// unreachable checks that cluster2's pod cannot reach cluster1's before a join: otherwise the
// first TCP connection would measure what an earlier round left behind.
func (fj *fabricJoinLab) unreachable() error {
	if err := tryTCPEcho(fj.src, fj.dst, 2*time.Second); err == nil {
		return fmt.Errorf("%s reaches %s's pod %s before joining: a leave left the path up", benchMember, benchPeer, fj.dst.ip)
	}
	return nil
}

// cli runs the octopus CLI and returns its combined output.
func (fj *fabricJoinLab) cli(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, fj.octopus, args...)
	cmd.Env = fj.cliEnv
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// milestone is one thing a join reaches: check holds, or (tcp) a TCP echo gets through.
type milestone struct {
	at    *time.Duration
	check func(context.Context) error
	tcp   bool
}

// milestones waits until every milestone was reached, each watched on its own every joinPoll,
// stores when each was first reached (from t0) and reports it on stderr as it happens.
func milestones(ctx context.Context, t0 time.Time, what string, ms map[string]milestone, src, dst xpod) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for name, m := range ms {
		wg.Go(func() {
			var d time.Duration
			var err error
			if m.tcp {
				d, err = firstTCPEcho(ctx, t0, src, dst)
			} else {
				d, err = firstSuccess(ctx, t0, m.check)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				return
			}
			*m.at = d
			fmt.Fprintf(os.Stderr, "  %6.1fs %s: %s\n", d.Seconds(), what, name)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// firstSuccess calls check every joinPoll until it returns nil and returns when, from t0.
func firstSuccess(ctx context.Context, t0 time.Time, check func(context.Context) error) (time.Duration, error) {
	tick := time.NewTicker(joinPoll)
	defer tick.Stop()
	for {
		err := check(ctx)
		if err == nil {
			return time.Since(t0), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w; last: %w", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// firstTCPEcho starts a TCP echo from src to dst every joinPoll, each in its own goroutine, and
// returns when the first one got through, from t0. Attempts overlap because a SYN lost before
// the tunnel is up is retransmitted only a second later: a new attempt each poll keeps the
// figure's resolution at joinPoll.
func firstTCPEcho(ctx context.Context, t0 time.Time, src, dst xpod) (time.Duration, error) {
	done := make(chan time.Time, 1)
	var mu sync.Mutex
	var last error
	tick := time.NewTicker(joinPoll)
	defer tick.Stop()
	for {
		go func() {
			err := tryTCPEcho(src, dst, 2*time.Second)
			if err == nil {
				select {
				case done <- time.Now():
				default:
				}
				return
			}
			mu.Lock()
			last = err
			mu.Unlock()
		}()
		select {
		case at := <-done:
			return at.Sub(t0), nil
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			return 0, fmt.Errorf("%w; last: %w", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// tryTCPEcho connects from src's network namespace to dst's TCP echo port and gets a line back.
func tryTCPEcho(src, dst xpod, timeout time.Duration) error {
	conn, err := labnet.DialTCP(src.netns, netip.AddrPortFrom(dst.ip, echoPort), timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	const line = "octopus-bench-fabric-join\n"
	if _, err := io.WriteString(conn, line); err != nil {
		return err
	}
	got := make([]byte, len(line))
	if _, err := io.ReadFull(conn, got); err != nil {
		return err
	}
	if string(got) != line {
		return fmt.Errorf("echo answered %q", got)
	}
	return nil
}

// poll calls check every joinPoll until it returns nil or timeout passes.
func poll(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := firstSuccess(ctx, time.Now(), check)
	return err
}

// writeFabricJoinReport writes the rounds and their medians as Markdown.
func writeFabricJoinReport(w io.Writer, rounds []joinRound, loadBefore, loadAfter string) {
	fmt.Fprintf(w, "\nBenchmarkFabricJoin: %d round(s); load average before the rounds %s, after %s\n\n", len(rounds), loadBefore, loadAfter)
	fmt.Fprintln(w, "| round (first) | path | command returned | Joined | ComponentsReady | connected (Peer + DNS) | **Ready** | **first TCP** | leave |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for i, r := range rounds {
		o, c, p := r.operator, r.cli, r.process
		fmt.Fprintf(w, "| %d (%s) | operator: `kubectl apply` | — | %s | %s | %s | **%s** | **%s** | %s |\n", i+1, r.first,
			secs(o.joined), secs(o.components), secs(o.connected), secs(o.ready), secs(o.tcp), secs(o.leave))
		fmt.Fprintf(w, "| | CLI: `octopus join` (charts) | %s | — | — | %s | **%s** | **%s** | %s |\n",
			secs(c.returned), secs(c.connected), secs(c.connected), secs(c.tcp), secs(c.leave))
		fmt.Fprintf(w, "| | process: `octopus join --agent process` + gateway/route agent processes | %s | — | — | %s | **%s** | **%s** | %s |\n",
			secs(p.returned), secs(p.connected), secs(p.connected), secs(p.tcp), secs(p.leave))
	}
	if len(rounds) == 0 {
		return
	}
	med := func(f func(joinRound) time.Duration) string { return secs(median(rounds, f)) }
	fmt.Fprintf(w, "\n| median of %d | command returned | Joined | ComponentsReady | connected (Peer + DNS) | **Ready** | **first TCP** | leave |\n", len(rounds))
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	fmt.Fprintf(w, "| operator | — | %s | %s | %s | **%s** | **%s** | %s |\n",
		med(func(r joinRound) time.Duration { return r.operator.joined }),
		med(func(r joinRound) time.Duration { return r.operator.components }),
		med(func(r joinRound) time.Duration { return r.operator.connected }),
		med(func(r joinRound) time.Duration { return r.operator.ready }),
		med(func(r joinRound) time.Duration { return r.operator.tcp }),
		med(func(r joinRound) time.Duration { return r.operator.leave }))
	fmt.Fprintf(w, "| CLI | %s | — | — | %s | **%s** | **%s** | %s |\n",
		med(func(r joinRound) time.Duration { return r.cli.returned }),
		med(func(r joinRound) time.Duration { return r.cli.connected }),
		med(func(r joinRound) time.Duration { return r.cli.connected }),
		med(func(r joinRound) time.Duration { return r.cli.tcp }),
		med(func(r joinRound) time.Duration { return r.cli.leave }))
	fmt.Fprintf(w, "| process | %s | — | — | %s | **%s** | **%s** | %s |\n",
		med(func(r joinRound) time.Duration { return r.process.returned }),
		med(func(r joinRound) time.Duration { return r.process.connected }),
		med(func(r joinRound) time.Duration { return r.process.connected }),
		med(func(r joinRound) time.Duration { return r.process.tcp }),
		med(func(r joinRound) time.Duration { return r.process.leave }))
	ratio := func(op, cli func(joinRound) time.Duration) string {
		var rs []float64
		for _, r := range rounds {
			rs = append(rs, op(r).Seconds()/cli(r).Seconds())
		}
		return fmt.Sprintf("%.2f×", stats.Median(rs))
	}
	fmt.Fprintf(w, "\nRatio operator ÷ CLI (median of the per-round ratios): Ready %s, first TCP %s, connected (Peer + DNS, same criteria) %s, leave %s\n",
		ratio(func(r joinRound) time.Duration { return r.operator.ready }, func(r joinRound) time.Duration { return r.cli.connected }),
		ratio(func(r joinRound) time.Duration { return r.operator.tcp }, func(r joinRound) time.Duration { return r.cli.tcp }),
		ratio(func(r joinRound) time.Duration { return r.operator.connected }, func(r joinRound) time.Duration { return r.cli.connected }),
		ratio(func(r joinRound) time.Duration { return r.operator.leave }, func(r joinRound) time.Duration { return r.cli.leave }))
	fmt.Fprintf(w, "\nRatio charts ÷ process (median of the per-round ratios): first TCP %s, connected (Peer + DNS) %s, command returned %s, leave %s\n",
		ratio(func(r joinRound) time.Duration { return r.cli.tcp }, func(r joinRound) time.Duration { return r.process.tcp }),
		ratio(func(r joinRound) time.Duration { return r.cli.connected }, func(r joinRound) time.Duration { return r.process.connected }),
		ratio(func(r joinRound) time.Duration { return r.cli.returned }, func(r joinRound) time.Duration { return r.process.returned }),
		ratio(func(r joinRound) time.Duration { return r.cli.leave }, func(r joinRound) time.Duration { return r.process.leave }))
	fmt.Fprintln(w, "\nThe CLI's and the process mode's Ready is their connected column: the same criteria as the operator's Ready, seen by the benchmark.")
}

// median is the median of f over the rounds.
func median(rounds []joinRound, f func(joinRound) time.Duration) time.Duration {
	var v []time.Duration
	for _, r := range rounds {
		v = append(v, f(r))
	}
	return stats.Median(v)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
