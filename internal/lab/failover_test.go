package lab_test

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/lab/realnode"
	"github.com/octopus-mcs/octopus/internal/routeagent"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// probeInterval is how often the UDP prober sends, so interruptions are measured to ~10 ms.
const probeInterval = 10 * time.Millisecond

// echoPort is octopus-echo's TCP and UDP echo port.
const echoPort = 9000

// cutOffs repeats the cut-off phase, each time on the node that took over the last time: the
// deposed gateway's standing by again is what each repetition after the first relies on.
var cutOffs = flag.Int("cut-offs", 1, "TestGatewayFailover: how many times the active gateway node is cut off and plugged back in")

// failoverLab is the lab of TestGatewayFailover and what the phases share.
type failoverLab struct {
	l               *lab.Lab
	dual            bool // the clusters are dual-stack (lab.IPFamilyDual)
	dir             string
	stop            func() // stops and removes the lab (startStoppableLab)
	hub             client.Client
	c1, c2          *labnet.ClusterNet
	cs1, cs2        kubernetes.Interface
	client, server  xpod // client in cluster2's worker, server in cluster1's worker
	active, standby labnet.NodeNet
	gateways1       []labnet.NodeNet
	remotePodCIDR   netip.Prefix // cluster2's pod CIDR, as routed in cluster1
	serverEcho      netip.AddrPort
	serverHTTP      netip.AddrPort
	activeGateways2 string
}

// TestGatewayFailover runs, on one lab of real nodes (a hub and two clusters with two gateway
// nodes and one worker each, wireguard, mesh, the components installed by the member chart),
// the checks of the chart-installed gateways (chartChecks, charts_test.go) and of their
// failover. The failover checks probe, every 10 ms over UDP, from a pod on cluster2's worker to
// a pod on cluster1's worker while they inject faults into cluster1's active gateway and the hub:
//   - the active gateway node's underlay link is cut and restored: the tunnel health marks the
//     connection down on both sides, the Lease does not move (nothing detects an underlay
//     loss yet), and traffic recovers once the link is back;
//   - the active gateway node's cables (LAN and underlay) are pulled: the standby takes over
//     (its liveness probes time out, the Lease goes unrenewed) and traffic recovers; plugged
//     back in, the old node's gateway stands by, without a restart, and nothing moves back
//     (-cut-offs N does this N times, alternating between the two gateway nodes);
//   - the hub's API server is down for 60 s: an established TCP connection keeps working, new
//     ones succeed, and afterwards nothing has flapped (same Peers, keys, Lease holders and
//     gateway processes; no probe gap);
//   - the (now) active gateway is killed for good (not restarted): the standby notices (liveness
//     probes refused, Lease not renewed) and takes the Lease over long before it expires,
//     publishes a Peer with a new key, cluster2 re-points, cluster1's route agents follow and
//     traffic recovers; the interruption is measured.
//
// The order is read-only checks, restorable faults, then what cannot be undone (the killed
// gateway, leave); a failed check makes the ones after it run on a new lab (runOnSharedLab).
func TestGatewayFailover(t *testing.T) {
	testenv.LabNetwork(t)
	binDir := testenv.BinDir(t)
	bins := buildCommands(t, "octopus-agent", "octopus-echo", "octopus-dns", "octopus")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute+time.Duration(*cutOffs)*time.Minute)
	defer cancel()
	// Dual-stack, so that issue 35's proofs (checkDualStack) share this lab: mesh, wireguard,
	// direct addressing, the member chart.
	opts := lab.Options{BinDir: binDir, AgentBinary: bins["octopus-agent"], IPFamily: lab.IPFamilyDual}
	up := func(t *testing.T) (*failoverLab, func()) {
		f := newFailoverLab(ctx, t, opts)
		return f, f.stop
	}
	checks := []labCheck[*failoverLab]{
		{"pods", func(t *testing.T, f *failoverLab) { chartPods(ctx, t, f) }},
		{"verify", func(t *testing.T, f *failoverLab) { chartVerify(ctx, t, f, bins["octopus"]) }},
		{"dual stack", func(t *testing.T, f *failoverLab) { checkDualStack(ctx, t, f.l, bins["octopus"]) }},
		{"bench families", func(t *testing.T, f *failoverLab) { checkBenchFamilies(ctx, t, f.l, bins["octopus"]) }},
		{"underlay cut", func(t *testing.T, f *failoverLab) { f.underlayCut(ctx, t) }},
	}
	for range *cutOffs {
		checks = append(checks, labCheck[*failoverLab]{"gateway node cut off", func(t *testing.T, f *failoverLab) { f.nodeCutOff(ctx, t) }})
	}
	checks = append(checks,
		labCheck[*failoverLab]{"gateway container killed", func(t *testing.T, f *failoverLab) { chartGatewayContainerKilled(ctx, t, f) }},
		labCheck[*failoverLab]{"relabel", func(t *testing.T, f *failoverLab) { chartRelabel(ctx, t, f) }},
		labCheck[*failoverLab]{"upgrade", func(t *testing.T, f *failoverLab) { upgradeMemberChart(ctx, t, f) }},
		labCheck[*failoverLab]{"hub down 60s", func(t *testing.T, f *failoverLab) { f.hubDown(ctx, t) }},
		labCheck[*failoverLab]{"gateway killed", func(t *testing.T, f *failoverLab) { f.gatewayKilled(ctx, t) }},
		labCheck[*failoverLab]{"leave", func(t *testing.T, f *failoverLab) { chartLeave(ctx, t, f, bins["octopus"]) }},
	)
	runOnSharedLab(t, up, checks...)
}

// cutOffBound is the longest interruption a cut-off of the active gateway node may cause: the
// Lease's expiry after its last renewal, which bounds a takeover even when the fast one fails.
func cutOffBound() time.Duration {
	return lab.GatewayTimings.LeaseDuration + lab.GatewayTimings.RenewDeadline
}

// newFailoverLab brings up, with opts, a hub and two clusters with two gateway nodes and one
// worker each, starts an echo pod on each worker (the server in cluster1, the client in
// cluster2: traffic crosses a route agent's route, both gateways and the tunnel), waits until
// HTTP flows between them and finds each cluster's active gateway.
func newFailoverLab(ctx context.Context, t *testing.T, opts lab.Options) *failoverLab {
	t.Helper()
	opts.Clusters, opts.GatewaysPerCluster, opts.NodesPerCluster = 2, 2, 3
	l, dir, stop := startStoppableLab(ctx, t, opts)

	f := &failoverLab{l: l, dual: opts.IPFamily == lab.IPFamilyDual, dir: dir, stop: stop, c1: &l.Network.Clusters[0], c2: &l.Network.Clusters[1]}
	f.hub = kubeClient(t, l.Env.Cluster(lab.HubName).Kubeconfig)
	f.cs1, f.cs2 = clientset(t, l.Env.Cluster(f.c1.Name).Kubeconfig), clientset(t, l.Env.Cluster(f.c2.Name).Kubeconfig)
	for _, n := range f.c1.Nodes {
		if n.Gateway {
			f.gateways1 = append(f.gateways1, n)
		}
	}
	if len(f.gateways1) != 2 || f.c1.Nodes[2].Gateway {
		t.Fatalf("cluster1 nodes %+v: want two gateways and a worker", f.c1.Nodes)
	}
	f.remotePodCIDR = l.Env.Cluster(f.c2.Name).PodCIDR.Masked()

	f.server = startEchoPod(ctx, t, f.cs1, l, f.c1.Name, f.c1.Nodes[2].Name)
	f.client = startEchoPod(ctx, t, f.cs2, l, f.c2.Name, f.c2.Nodes[2].Name)
	f.serverHTTP = netip.AddrPortFrom(f.server.ip, 8080)
	f.serverEcho = netip.AddrPortFrom(f.server.ip, echoPort)
	f.waitHTTP(t, 90*time.Second)

	holder := waitGatewayHolder(ctx, t, f.cs1, "", 30*time.Second)
	for _, n := range f.gateways1 {
		if n.Name == holder {
			f.active = n
		} else {
			f.standby = n
		}
	}
	if f.active.Name == "" {
		t.Fatalf("cluster1's gateway Lease is held by %q, not one of its gateway nodes", holder)
	}
	f.activeGateways2 = waitGatewayHolder(ctx, t, f.cs2, "", 30*time.Second)
	t.Logf("active gateways: %s in %s, %s in %s; standby in %s: %s", f.active.Name, f.c1.Name, f.activeGateways2, f.c2.Name, f.c1.Name, f.standby.Name)
	return f
}

// underlayCut sets the active gateway node's underlay link down and up again.
func (f *failoverLab) underlayCut(ctx context.Context, t *testing.T) {
	probe := startUDPProbe(t, f.client.netns, f.serverEcho)
	defer probe.stop()
	probe.waitFlowing(t, 30*time.Second)

	link := f.active.UnderlayLink()
	cut := time.Now()
	ipLink(t, f.active.Netns, link, "down")
	restored := false
	defer func() {
		if !restored {
			ipLink(t, f.active.Netns, link, "up")
		}
	}()
	// The tunnel's health check (probes every status interval, down within 3) notices on both
	// sides.
	for _, side := range []struct{ peer, remote string }{{f.c1.Name, f.c2.Name}, {f.c2.Name, f.c1.Name}} {
		waitFor(t, 60*time.Second, side.peer+"'s Peer to report "+side.remote+" not connected", func() error {
			c, err := f.connection(ctx, side.peer, side.remote)
			if err != nil {
				return err
			}
			if c.State == v1alpha1.ConnectionConnected {
				return fmt.Errorf("still %s (loss %d%%)", c.State, c.LossPercent)
			}
			t.Logf("%s -> %s marked %s %.1fs after the cut: %s", side.peer, side.remote, c.State, time.Since(cut).Seconds(), c.Message)
			return nil
		})
	}
	if last := probe.lastAnswered(); last.After(cut.Add(time.Second)) {
		t.Fatalf("a probe sent %.1fs after the underlay cut was answered: the cut did not cut the data path", last.Sub(cut).Seconds())
	}
	// Nothing detects an underlay loss yet: the gateway still reaches its API server over the
	// LAN, so it keeps renewing the Lease (and answers the standby's liveness probes over the
	// LAN), and no standby takes over. Wait out two Lease
	// durations to be sure: a wait for nothing to happen. When gateways learn to give up the
	// Lease on a dead underlay, this is where the test must change (and the docs with it).
	time.Sleep(2 * lab.GatewayTimings.LeaseDuration)
	if h := waitGatewayHolder(ctx, t, f.cs1, "", 5*time.Second); h != f.active.Name {
		t.Fatalf("the Lease moved from %s to %s after an underlay cut: failover on underlay loss exists now; update this test and the docs", f.active.Name, h)
	}
	t.Logf("Lease still held by %s %.0fs after its underlay was cut: no failover on underlay loss (known gap)", f.active.Name, time.Since(cut).Seconds())

	up := time.Now()
	ipLink(t, f.active.Netns, link, "up")
	restored = true
	probe.waitAnsweredAfter(t, up, 60*time.Second)
	t.Logf("traffic recovered %.2fs after the underlay link came back up", probe.firstAnsweredAfter(up).Sub(up).Seconds())
	for _, side := range []struct{ peer, remote string }{{f.c1.Name, f.c2.Name}, {f.c2.Name, f.c1.Name}} {
		waitFor(t, 60*time.Second, side.peer+"'s Peer to report "+side.remote+" connected again", func() error {
			c, err := f.connection(ctx, side.peer, side.remote)
			if err != nil {
				return err
			}
			if c.State != v1alpha1.ConnectionConnected {
				return fmt.Errorf("%s: %s", c.State, c.Message)
			}
			return nil
		})
	}
}

// nodeCutOff pulls both cables (LAN and underlay) of cluster1's active gateway node: the
// standby takes over, and the cut node's gateway stands by once it is back, without taking
// the Lease back. The active and standby swap.
func (f *failoverLab) nodeCutOff(ctx context.Context, t *testing.T) {
	probe := startUDPProbe(t, f.client.netns, f.serverEcho)
	defer probe.stop()
	probe.waitFlowing(t, 30*time.Second)
	old := f.peer(ctx, t, f.c1.Name)
	deposed := f.gatewayLog(ctx, t, f.active.Name)

	cables := f.l.Network.Cables(*f.c1, f.active)
	cut := time.Now()
	for _, c := range cables {
		ipLink(t, c.Netns, c.Link, "down")
	}
	restored := false
	restore := func() {
		for _, c := range cables {
			ipLink(t, c.Netns, c.Link, "up")
		}
		restored = true
	}
	defer func() {
		if !restored {
			restore()
		}
	}()
	// The standby's liveness probes to the cut node time out and the Lease goes unrenewed
	// (the node cannot reach its API server either).
	waitGatewayHolder(ctx, t, f.cs1, f.standby.Name, 60*time.Second)
	t.Logf("%s took the Lease %.1fs after %s was cut off", f.standby.Name, time.Since(cut).Seconds(), f.active.Name)
	// Each step of the takeover is timed, so that a slow one says which step was slow: the
	// new active's Peer on the hub (the remote gateway re-points to it), then the ConfigMap
	// naming it (the route agents move to it).
	waitFor(t, 60*time.Second, f.c1.Name+"'s Peer to name "+f.standby.Name, func() error {
		p := f.peer(ctx, t, f.c1.Name)
		if p.Spec.Hostname != f.standby.Name || p.Spec.PublicKey == old.Spec.PublicKey {
			return fmt.Errorf("hostname %s, key %q (old %q)", p.Spec.Hostname, p.Spec.PublicKey, old.Spec.PublicKey)
		}
		return nil
	})
	t.Logf("%s's Peer named %s %.1fs after the cut", f.c1.Name, f.standby.Name, time.Since(cut).Seconds())
	waitFor(t, 60*time.Second, f.c1.Name+"'s gateway ConfigMap to name "+f.standby.Name, func() error {
		cm, err := f.cs1.CoreV1().ConfigMaps(v1alpha1.SystemNamespace).Get(ctx, v1alpha1.GatewayConfigMapName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := routeagent.ActiveGateway(cm); got != f.standby.Name {
			return fmt.Errorf("it names %q", got)
		}
		return nil
	})
	t.Logf("%s's gateway ConfigMap named %s %.1fs after the cut", f.c1.Name, f.standby.Name, time.Since(cut).Seconds())
	probe.waitAnsweredAfter(t, cut, 90*time.Second)
	time.Sleep(2 * time.Second)
	gap, lost, sent := probe.longestGap(cut.Add(-time.Second), time.Now())
	t.Logf("MEASURED interruption when the active gateway node is cut off: %.2fs (%d of %d 10 ms probes lost)", gap.Seconds(), lost, sent)
	// Detecting a silent node takes 3 liveness probes that each time out (1 s) on top of what
	// a killed process costs, ~3.3 s on an idle machine (docs/benchmarks.md). The bound is
	// what the configured timings allow without a fast takeover: the Lease's expiry after the
	// last renewal. Beyond it, the takeover did not happen as designed (CI once saw 30 s: a
	// deposed gateway waiting out the kubelet's crash-loop back-off).
	if bound := cutOffBound(); gap > bound {
		f.logTails(t, 30)
		t.Errorf("cutting off the active gateway node interrupted the data path for %s, want at most %s (Lease %s + renew deadline %s)",
			gap, bound, lab.GatewayTimings.LeaseDuration, lab.GatewayTimings.RenewDeadline)
	}

	// Plugged back in, the old node's gateway learns that it lost the Lease and stands by, in
	// the same process: a restarted container would wait out the kubelet's crash-loop
	// back-off (doubling with every lost Lease), with no standby on its node meanwhile. The
	// Lease and the Peer stay with the new active, and traffic keeps flowing.
	back := time.Now()
	restore()
	waitFor(t, 30*time.Second, f.active.Name+"'s deposed gateway to stand by again without a restart", func() error {
		return deposed.standsByAgain(ctx, t)
	})
	time.Sleep(5 * time.Second)
	if h := waitGatewayHolder(ctx, t, f.cs1, "", 5*time.Second); h != f.standby.Name {
		f.logTails(t, 60)
		t.Fatalf("the Lease went back to %s after its node was plugged in again", h)
	}
	if p := f.peer(ctx, t, f.c1.Name); p.Spec.Hostname != f.standby.Name {
		t.Fatalf("%s's Peer names %s after the cut-off node came back, want %s", f.c1.Name, p.Spec.Hostname, f.standby.Name)
	}
	// A few probes lost at random on a loaded machine are not an interruption; a failback
	// would be: a new Peer that the remote gateway re-points to, which takes at least a status
	// interval to publish.
	if gap, lost, _ := probe.longestGap(back, time.Now()); gap > lab.GatewayTimings.StatusInterval {
		t.Fatalf("plugging the old gateway node back in interrupted the data path: %d probes lost, longest gap %s (want at most the status interval %s)",
			lost, gap, lab.GatewayTimings.StatusInterval)
	}
	f.waitHTTP(t, 30*time.Second)
	f.active, f.standby = f.standby, f.active
}

// gatewayKilled kills cluster1's active gateway process for good and measures the
// interruption.
func (f *failoverLab) gatewayKilled(ctx context.Context, t *testing.T) {
	what := "SIGKILL of the active gateway process for good"
	if f.l.Charts() {
		what = "the active gateway node unlabelled and its pod deleted (the kubelet's SIGTERM)"
	}
	f.measureGatewayKill(ctx, t, what, false, func() {
		if err := f.l.StopGateway(ctx, f.active.Name); err != nil {
			t.Fatal(err)
		}
	})
	// The killed gateway stays dead: StopGateway lets neither the supervisor nor the
	// DaemonSet bring it back.
	time.Sleep(2 * time.Second)
	if f.l.Charts() {
		if p, err := lab.GatewayPod(ctx, f.cs1, f.active.Name); err == nil {
			t.Fatalf("the stopped gateway on %s has a pod again: %s", f.active.Name, p.Name)
		}
	} else if _, err := os.Stat(filepath.Join(f.dir, "pids", lab.GatewayProcessName(f.active.Name)+".pid")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stopped gateway on %s has a pidfile (restarted?): %v", f.active.Name, err)
	}
	f.active, f.standby = f.standby, labnet.NodeNet{}
}

// measureGatewayKill runs kill, which kills cluster1's active gateway, while probing: the
// standby takes the Lease over, publishes a Peer with a new key, the worker's route agent
// re-points, and traffic recovers. It measures the interruption, which must stay under 3 s, and
// returns the gateway that is active afterwards. With mayResume, the killed gateway comes back
// (the kubelet restarts its container at once) and may resume as the Lease's holder before the
// standby takes over: a client-go style Lease lets its holder renew, so either recovers traffic.
func (f *failoverLab) measureGatewayKill(ctx context.Context, t *testing.T, what string, mayResume bool, kill func()) labnet.NodeNet {
	probe := startUDPProbe(t, f.client.netns, f.serverEcho)
	defer probe.stop()
	probe.waitFlowing(t, 30*time.Second)
	old := f.peer(ctx, t, f.c1.Name)
	if old.Spec.Hostname != f.active.Name || old.Spec.PublicKey == "" {
		t.Fatalf("%s's Peer: hostname %q key %q, want the active gateway %s with a key", f.c1.Name, old.Spec.Hostname, old.Spec.PublicKey, f.active.Name)
	}

	killed := time.Now()
	kill()
	next := f.standby
	waitFor(t, 60*time.Second, f.c1.Name+"'s Peer re-published with a new key", func() error {
		p := &v1alpha1.Peer{}
		if err := f.hub.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: f.c1.Name}, p); err != nil {
			return err
		}
		if p.Spec.PublicKey == old.Spec.PublicKey || p.Spec.PublicKey == "" {
			return fmt.Errorf("hostname %s, key %q (old %q)", p.Spec.Hostname, p.Spec.PublicKey, old.Spec.PublicKey)
		}
		switch {
		case p.Spec.Hostname == f.standby.Name:
			next = f.standby
		case mayResume && p.Spec.Hostname == f.active.Name:
			next = f.active
		default:
			return fmt.Errorf("published by %s, want %s", p.Spec.Hostname, f.standby.Name)
		}
		return nil
	})
	if h := waitGatewayHolder(ctx, t, f.cs1, next.Name, 30*time.Second); h != next.Name {
		t.Fatalf("Lease holder %q", h)
	}
	// The lab's processes share one clock, so the acquireTime the new holder wrote dates the
	// takeover more precisely than this test's polling.
	acquired := "?"
	if lease, err := f.cs1.CoordinationV1().Leases(v1alpha1.SystemNamespace).Get(ctx, v1alpha1.GatewayLeaseName, metav1.GetOptions{}); err == nil && lease.Spec.AcquireTime != nil {
		acquired = fmt.Sprintf("%.2fs", lease.Spec.AcquireTime.Sub(killed).Seconds())
	}
	if next.Name == f.active.Name {
		t.Logf("the restarted gateway on %s resumed as the Lease's holder before %s took over", next.Name, f.standby.Name)
	}
	t.Logf("%s holds the Lease and re-published %s's Peer %.1fs after %s was killed (acquireTime: %s after the kill)",
		next.Name, f.c1.Name, time.Since(killed).Seconds(), f.active.Name, acquired)
	// The worker's route agent re-points the route to cluster2 at the active gateway.
	worker := f.c1.Nodes[2]
	want := "via " + next.LANAddr.Addr().String() + " "
	waitFor(t, 60*time.Second, worker.Name+"'s route to "+f.remotePodCIDR.String()+" via "+next.Name, func() error {
		out, err := exec.Command("ip", "-n", worker.Netns, "route", "show", f.remotePodCIDR.String()).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		if !strings.Contains(string(out), want) {
			return fmt.Errorf("route %q, want one %q", strings.TrimSpace(string(out)), want)
		}
		return nil
	})
	probe.waitAnsweredAfter(t, killed, 90*time.Second)
	// Keep probing a little so the gap is closed by a steady flow, not a lucky packet.
	time.Sleep(2 * time.Second)
	gap, lost, sent := probe.longestGap(killed.Add(-time.Second), time.Now())
	t.Logf("MEASURED failover interruption: %.2fs (longest gap between answered 10 ms UDP probes; %d of %d lost) after %s (lab gateway timings %+v; takeover after 3 failed probes and 1s unrenewed)",
		gap.Seconds(), lost, sent, what, lab.GatewayTimings)
	// Runs measure ~1–1.5 s (docs/benchmarks.md). The test asserts only that the fast
	// takeover happened: without it the standby waits for the Lease to expire, so a gap of a
	// whole Lease duration means it did not.
	if gap > lab.GatewayTimings.LeaseDuration {
		t.Errorf("failover interrupted the data path for %s, want less than the Lease duration %s (the fast takeover did not happen?)",
			gap, lab.GatewayTimings.LeaseDuration)
	}
	if gap > 2*time.Second {
		// Above the design's target: show what the gateways and route agents did meanwhile.
		f.logTails(t, 30)
	}
	f.waitHTTP(t, 30*time.Second)
	return next
}

// hubDown stops the hub's API server for 60 s while traffic flows.
func (f *failoverLab) hubDown(ctx context.Context, t *testing.T) {
	probe := startUDPProbe(t, f.client.netns, f.serverEcho)
	defer probe.stop()
	probe.waitFlowing(t, 30*time.Second)
	conn, err := labnet.DialTCP(f.client.netns, f.serverEcho, 5*time.Second)
	if err != nil {
		t.Fatalf("connecting %s -> %s: %v", f.client.name, f.serverEcho, err)
	}
	defer conn.Close()
	// A round trip may take 10 s: it shows that the connection lives, while the UDP probes
	// below measure any interruption (CI failed a 3 s bound at load 46 with nothing else
	// known; a failure now says what the probes and the Leases saw).
	roundTrip := func(i int) error { return echoRoundTrip(conn, fmt.Sprintf("established %d\n", i), 10*time.Second) }
	if err := roundTrip(0); err != nil {
		t.Fatalf("established connection before the outage: %v", err)
	}
	before := map[string]*v1alpha1.Peer{f.c1.Name: f.peer(ctx, t, f.c1.Name), f.c2.Name: f.peer(ctx, t, f.c2.Name)}
	pids := f.gatewayPIDs(t)
	holders := map[string]string{f.c1.Name: waitGatewayHolder(ctx, t, f.cs1, "", 5*time.Second), f.c2.Name: waitGatewayHolder(ctx, t, f.cs2, "", 5*time.Second)}

	hub := f.l.Env.Cluster(lab.HubName)
	down := time.Now()
	if err := hub.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	started := false
	defer func() {
		if !started {
			_ = hub.StartAPIServer(ctx)
		}
	}()
	newConns := 0
	for i := 1; time.Since(down) < 60*time.Second; i++ {
		if err := roundTrip(i); err != nil {
			gap, lost, sent := probe.longestGap(down, time.Now())
			t.Logf("probes since the outage began: longest gap %s, %d of %d lost; Lease holders %s, %s (before: %v)", gap, lost, sent,
				waitGatewayHolder(ctx, t, f.cs1, "", 5*time.Second), waitGatewayHolder(ctx, t, f.cs2, "", 5*time.Second), holders)
			f.logTails(t, 30)
			t.Fatalf("established connection %.1fs into the hub outage: %v", time.Since(down).Seconds(), err)
		}
		if i%5 == 0 {
			got, err := tryHTTPGet(f.client.netns, f.serverHTTP)
			if err != nil || !strings.Contains(got, "pod="+f.server.name) {
				t.Fatalf("new connection %.1fs into the hub outage: %q, %v", time.Since(down).Seconds(), got, err)
			}
			newConns++
		}
		time.Sleep(time.Second)
	}
	if err := hub.StartAPIServer(ctx); err != nil {
		t.Fatalf("starting the hub's API server again: %v", err)
	}
	started = true
	t.Logf("hub API server down %.1fs: the established connection echoed every second and %d new connections succeeded", time.Since(down).Seconds(), newConns)

	// Give the gateways time to resync against the hub (several status intervals), then
	// check that nothing flapped.
	time.Sleep(15 * time.Second)
	if err := roundTrip(-1); err != nil {
		gap, lost, sent := probe.longestGap(down, time.Now())
		t.Logf("probes since the outage began: longest gap %s, %d of %d lost; Lease holders %s, %s", gap, lost, sent,
			waitGatewayHolder(ctx, t, f.cs1, "", 5*time.Second), waitGatewayHolder(ctx, t, f.cs2, "", 5*time.Second))
		f.logTails(t, 30)
		t.Fatalf("established connection after the hub came back: %v", err)
	}
	gap, lost, sent := probe.longestGap(down, time.Now())
	t.Logf("during and after the hub outage: longest probe gap %s, %d of %d probes lost", gap, lost, sent)
	// A second's worth of lost probes would be a real interruption; a few lost ones are what a
	// busy machine drops anyway (the replies that miss their deadline).
	if time.Duration(lost)*probeInterval > time.Second {
		t.Errorf("the data path lost %d probes (%s) during the hub outage, longest gap %s; want no interruption", lost, time.Duration(lost)*probeInterval, gap)
	}
	for name, b := range before {
		a := f.peer(ctx, t, name)
		if a.UID != b.UID || a.Generation != b.Generation || a.Spec.PublicKey != b.Spec.PublicKey || a.Spec.Hostname != b.Spec.Hostname {
			t.Errorf("%s's Peer changed across the hub outage: uid %s→%s generation %d→%d key %q→%q host %s→%s",
				name, b.UID, a.UID, b.Generation, a.Generation, b.Spec.PublicKey, a.Spec.PublicKey, b.Spec.Hostname, a.Spec.Hostname)
		}
	}
	if got := f.gatewayPIDs(t); fmt.Sprint(got) != fmt.Sprint(pids) {
		t.Errorf("gateway processes changed across the hub outage (restarted): %v → %v", pids, got)
	}
	for name, cs := range map[string]kubernetes.Interface{f.c1.Name: f.cs1, f.c2.Name: f.cs2} {
		if h := waitGatewayHolder(ctx, t, cs, "", 5*time.Second); h != holders[name] {
			t.Errorf("%s's gateway Lease moved from %s to %s across the hub outage", name, holders[name], h)
		}
	}
}

// gatewayRun is one run of a node's gateway: its log (from offset on: a process's log holds
// its earlier runs too), and for the member chart's pod the container's restart count when the
// run was found.
type gatewayRun struct {
	f        *failoverLab
	node     string
	log      string
	offset   int
	restarts int32
}

// gatewayLog finds the current run of cluster1's gateway on node: the lab's process log, or
// the chart pod's container log on the node's disk (readable while the node is cut off).
func (f *failoverLab) gatewayLog(ctx context.Context, t *testing.T, node string) gatewayRun {
	t.Helper()
	if !f.l.Charts() {
		log := filepath.Join(f.dir, "logs", lab.GatewayProcessName(node)+".log")
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		return gatewayRun{f: f, node: node, log: log, offset: len(b)}
	}
	p, err := lab.GatewayPod(ctx, f.cs1, node)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("gateway pod %s: container statuses %+v, want one", p.Name, p.Status.ContainerStatuses)
	}
	restarts := p.Status.ContainerStatuses[0].RestartCount
	log := filepath.Join(f.podLogs(node), fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID), p.Status.ContainerStatuses[0].Name, fmt.Sprintf("%d.log", restarts))
	return gatewayRun{f: f, node: node, log: log, restarts: restarts}
}

// standsByAgain reports whether this run, deposed, has said that it stands by again, and has
// not been restarted (the pod's container, as the API server last heard from the kubelet).
func (r gatewayRun) standsByAgain(ctx context.Context, t *testing.T) error {
	t.Helper()
	b, err := os.ReadFile(r.log)
	if err != nil {
		return err
	}
	if !strings.Contains(string(b[min(r.offset, len(b)):]), "Standing by again after losing the gateway Lease") {
		return fmt.Errorf("%s does not say that it stands by again", r.log)
	}
	if !r.f.l.Charts() {
		return nil
	}
	now := r.f.gatewayLog(ctx, t, r.node)
	if now.restarts != r.restarts {
		t.Fatalf("the deposed gateway on %s was restarted (restarts %d, were %d); want it standing by in the same process", r.node, now.restarts, r.restarts)
	}
	return nil
}

// logTails logs the last n lines of every gateway's and route agent's log: the lab's process
// logs or, when the member chart runs them, each run's container log on its node's disk
// (readable even when the node is cut off and the API server cannot reach its kubelet).
func (f *failoverLab) logTails(t *testing.T, n int) {
	t.Helper()
	for _, c := range f.l.Network.Clusters {
		for _, node := range c.Nodes {
			for _, name := range []string{lab.GatewayProcessName(node.Name), lab.RouteAgentProcessName(node.Name)} {
				logTail(t, f.dir, name, n)
			}
			pods := f.podLogs(node.Name)
			runs, _ := filepath.Glob(filepath.Join(pods, v1alpha1.SystemNamespace+"_octopus-*", "*", "*.log"))
			for _, run := range runs {
				rel, _ := filepath.Rel(pods, run)
				fileTail(t, node.Name+" "+rel, run, n)
			}
		}
	}
}

// podLogs is the kubelet's directory of pod logs on node's disk: one directory per pod,
// <namespace>_<name>_<uid>, one per container in it, a <restart count>.log per run.
func (f *failoverLab) podLogs(node string) string {
	return filepath.Join(f.dir, realnode.NodesDir, node, "logs", "pods")
}

// logTail logs the last n lines of the log of the lab's process name, if it has one.
func logTail(t *testing.T, dir, name string, n int) {
	t.Helper()
	fileTail(t, name, filepath.Join(dir, "logs", name+".log"), n)
}

// fileTail logs, as name's, the last n lines of the file at path, if there is one.
func fileTail(t *testing.T, name, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	t.Logf("last %d lines of %s:\n%s", n, name, strings.Join(lines[max(0, len(lines)-n):], "\n"))
}

// waitHTTP waits until a new TCP connection from the client pod gets the server pod's answer.
func (f *failoverLab) waitHTTP(t *testing.T, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("HTTP %s -> %s", f.client.name, f.server.name), func() error {
		got, err := tryHTTPGet(f.client.netns, f.serverHTTP)
		if err != nil {
			return err
		}
		if !strings.Contains(got, "pod="+f.server.name) || !strings.Contains(got, "client="+f.client.ip.String()+":") {
			return fmt.Errorf("answer %q", got)
		}
		return nil
	})
}

// waitGatewayHolder waits until the cluster's gateway Lease has a holder (want, if given) and returns it.
func waitGatewayHolder(ctx context.Context, t *testing.T, cs kubernetes.Interface, want string, timeout time.Duration) string {
	t.Helper()
	var holder string
	waitFor(t, timeout, "the gateway Lease holder "+want, func() error {
		lease, err := cs.CoordinationV1().Leases(v1alpha1.SystemNamespace).Get(ctx, v1alpha1.GatewayLeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return errors.New("no holder")
		}
		holder = *lease.Spec.HolderIdentity
		if want != "" && holder != want {
			return fmt.Errorf("held by %s", holder)
		}
		return nil
	})
	return holder
}

// handover is a change of the gateway Lease's holder, as a poll saw it.
type handover struct {
	at     time.Time
	holder string
}

// watchHolder polls the gateway Lease of cs every 100 ms until stop is called, and returns
// from stop the holder changes it saw (the first entry is the holder at the start).
func watchHolder(ctx context.Context, cs kubernetes.Interface) (stop func() []handover) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan []handover)
	go func() {
		var seen []handover
		defer func() { done <- seen }()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if l, err := cs.CoordinationV1().Leases(v1alpha1.SystemNamespace).Get(ctx, v1alpha1.GatewayLeaseName, metav1.GetOptions{}); err == nil {
				h := ""
				if l.Spec.HolderIdentity != nil {
					h = *l.Spec.HolderIdentity
				}
				if len(seen) == 0 || seen[len(seen)-1].holder != h {
					seen = append(seen, handover{at: time.Now(), holder: h})
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() []handover {
		cancel()
		return <-done
	}
}

func (f *failoverLab) peer(ctx context.Context, t *testing.T, name string) *v1alpha1.Peer {
	t.Helper()
	p := &v1alpha1.Peer{}
	if err := f.hub.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: name}, p); err != nil {
		t.Fatalf("reading %s's Peer: %v", name, err)
	}
	return p
}

// connection returns the named Peer's status of its connection to remote.
func (f *failoverLab) connection(ctx context.Context, name, remote string) (v1alpha1.PeerConnection, error) {
	p := &v1alpha1.Peer{}
	if err := f.hub.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: name}, p); err != nil {
		return v1alpha1.PeerConnection{}, err
	}
	for _, c := range p.Status.Connections {
		if c.ClusterID == remote {
			return c, nil
		}
	}
	return v1alpha1.PeerConnection{}, fmt.Errorf("no connection to %s in %+v", remote, p.Status.Connections)
}

// gatewayPIDs reads the pidfiles of every gateway process that runs.
func (f *failoverLab) gatewayPIDs(t *testing.T) map[string]string {
	t.Helper()
	pids := map[string]string{}
	for _, c := range f.l.Network.Clusters {
		for _, n := range c.Nodes {
			if b, err := os.ReadFile(filepath.Join(f.dir, "pids", lab.GatewayProcessName(n.Name)+".pid")); err == nil {
				pids[n.Name] = strings.TrimSpace(string(b))
			}
		}
	}
	return pids
}

func startEchoPod(ctx context.Context, t testing.TB, cs kubernetes.Interface, l *lab.Lab, cluster, node string) xpod {
	t.Helper()
	create(ctx, t, cs, echoPod("echo-"+node, node, cluster))
	p := waitPodReady(ctx, t, cs, "echo-"+node)
	return xpod{cluster: cluster, name: p.Name, node: node, ip: netip.MustParseAddr(p.Status.PodIP),
		netns: podNetns(t, l.Network.ID, p)}
}

func ipLink(t *testing.T, netns, link, state string) {
	t.Helper()
	if out, err := exec.Command("ip", "-n", netns, "link", "set", link, state).CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s link set %s %s: %v: %s", netns, link, state, err, out)
	}
}

// udpProbe sends a numbered datagram every probeInterval from a pod's namespace to a UDP echo
// server and records which were answered. Probes, not a stream: each one is independent,
// so the longest run of unanswered ones is the data path's interruption.
type udpProbe struct {
	conn *net.UDPConn
	done chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	sent     []time.Time // by sequence number
	answered []bool
}

func startUDPProbe(t *testing.T, netns string, dst netip.AddrPort) *udpProbe {
	t.Helper()
	p := &udpProbe{done: make(chan struct{})}
	// The socket belongs to the namespace it is created in; sends and receives work from any
	// thread afterwards.
	err := labnet.InNamespace(netns, func() error {
		var err error
		p.conn, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		return err
	})
	if err != nil {
		t.Fatalf("UDP socket in %s to %s: %v", netns, dst, err)
	}
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(probeInterval)
		defer tick.Stop()
		buf := make([]byte, 8)
		for {
			select {
			case <-p.done:
				return
			case now := <-tick.C:
				p.mu.Lock()
				seq := uint64(len(p.sent))
				p.sent = append(p.sent, now)
				p.answered = append(p.answered, false)
				p.mu.Unlock()
				binary.BigEndian.PutUint64(buf, seq)
				// A send error (no route while routes change) is an unanswered probe.
				_, _ = p.conn.Write(buf)
			}
		}
	}()
	go func() {
		defer p.wg.Done()
		buf := make([]byte, 64)
		for {
			n, err := p.conn.Read(buf)
			if err != nil {
				select {
				case <-p.done:
					return
				default:
				}
				// ECONNREFUSED from an ICMP error: the probe stays unanswered.
				continue
			}
			if n != 8 {
				continue
			}
			seq := binary.BigEndian.Uint64(buf)
			p.mu.Lock()
			if seq < uint64(len(p.answered)) {
				p.answered[seq] = true
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *udpProbe) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	close(p.done)
	_ = p.conn.Close()
	p.wg.Wait()
}

// lastAnswered is when the newest answered probe was sent (zero if none).
func (p *udpProbe) lastAnswered() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.answered) - 1; i >= 0; i-- {
		if p.answered[i] {
			return p.sent[i]
		}
	}
	return time.Time{}
}

// firstAnsweredAfter is when the first answered probe sent after since was sent (zero if none).
func (p *udpProbe) firstAnsweredAfter(since time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, s := range p.sent {
		if s.After(since) && p.answered[i] {
			return s
		}
	}
	return time.Time{}
}

// waitFlowing waits until 50 probes in a row (half a second) were answered.
func (p *udpProbe) waitFlowing(t *testing.T, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "UDP probes to be answered steadily", func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		// The newest few may still be in flight.
		end := len(p.answered) - 10
		if end < 50 {
			return fmt.Errorf("%d probes sent", len(p.answered))
		}
		for i := end - 50; i < end; i++ {
			if !p.answered[i] {
				return fmt.Errorf("probe %d unanswered", i)
			}
		}
		return nil
	})
}

// waitAnsweredAfter waits until probes sent after since are answered steadily again.
func (p *udpProbe) waitAnsweredAfter(t *testing.T, since time.Time, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "UDP probes to be answered again", func() error {
		if first := p.firstAnsweredAfter(since); first.IsZero() {
			return errors.New("no probe answered yet")
		}
		return nil
	})
	p.waitFlowing(t, timeout)
}

// longestGap returns, over probes sent in [from, to], the longest time between the sending of
// two answered probes with lost ones in between (the interruption a client would see, to
// probeInterval),
// how many were lost and how many were sent. Probes at either end of the window count as
// answered boundaries only if they were.
func (p *udpProbe) longestGap(from, to time.Time) (gap time.Duration, lost, sent int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var prev time.Time
	lostSincePrev := false
	for i, s := range p.sent {
		if s.Before(from) || s.After(to) {
			continue
		}
		sent++
		if !p.answered[i] {
			lost++
			lostSincePrev = true
			continue
		}
		// Only a run of lost probes is an interruption: a pause between two answered probes
		// with none lost in between is the prober not being scheduled (a busy machine), not
		// the data path failing.
		if lostSincePrev && !prev.IsZero() && s.Sub(prev)-probeInterval > gap {
			gap = s.Sub(prev) - probeInterval
		}
		prev, lostSincePrev = s, false
	}
	return gap, lost, sent
}

// echoRoundTrip sends msg over an established connection to an echo server and reads it back,
// within timeout.
func echoRoundTrip(conn net.Conn, msg string, timeout time.Duration) error {
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(conn, msg); err != nil {
		return fmt.Errorf("sending %q: %w", msg, err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, buf); err != nil {
		return fmt.Errorf("reading the echo of %q: %w", msg, err)
	}
	if string(buf) != msg {
		return fmt.Errorf("echo %q, want %q", buf, msg)
	}
	return nil
}

// tcpExchange keeps one TCP connection from a pod's namespace to an echo server busy: a message
// round-trips every tcpExchangeInterval, each waiting as long as TCP takes to deliver it (up to
// tcpExchangeStall), and the times the echoes came back are recorded. Unlike udpProbe's
// independent datagrams, it sees what an application on an established connection sees: a
// reset ends it, and an interruption of the path shows as a gap stretched by TCP's
// retransmission backoff.
type tcpExchange struct {
	conn net.Conn
	done chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	answered []time.Time
	err      error // why the exchange stopped before stop was called
}

const (
	tcpExchangeInterval = 100 * time.Millisecond
	// tcpExchangeStall bounds one round trip: far above any interruption a test accepts, so a
	// long one is measured as a gap rather than ending the exchange.
	tcpExchangeStall = 30 * time.Second
)

func startTCPExchange(t *testing.T, netns string, dst netip.AddrPort) *tcpExchange {
	t.Helper()
	conn, err := labnet.DialTCP(netns, dst, 5*time.Second)
	if err != nil {
		t.Fatalf("connecting from %s to %s: %v", netns, dst, err)
	}
	x := &tcpExchange{conn: conn, done: make(chan struct{})}
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		for i := 0; ; i++ {
			err := echoRoundTrip(conn, fmt.Sprintf("exchange %d\n", i), tcpExchangeStall)
			x.mu.Lock()
			if err != nil {
				x.err = err
			} else {
				x.answered = append(x.answered, time.Now())
			}
			x.mu.Unlock()
			if err != nil {
				return
			}
			select {
			case <-x.done:
				return
			case <-time.After(tcpExchangeInterval):
			}
		}
	}()
	return x
}

// stop ends the exchange after its current round trip, leaving the connection open, and
// returns why it had stopped already (nil if it was still going).
func (x *tcpExchange) stop() error {
	select {
	case <-x.done:
	default:
		close(x.done)
	}
	x.wg.Wait()
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

// result returns how many round trips completed and the longest time between two consecutive
// echoes in [from, to]. It is the longest an application on the connection waited, a
// tcpExchangeInterval included.
func (x *tcpExchange) result(from, to time.Time) (gap time.Duration, n int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var prev time.Time
	for _, at := range x.answered {
		if at.Before(from) {
			prev = at
			continue
		}
		if at.After(to) {
			break
		}
		n++
		if !prev.IsZero() && at.Sub(prev) > gap {
			gap = at.Sub(prev)
		}
		prev = at
	}
	return gap, n
}
