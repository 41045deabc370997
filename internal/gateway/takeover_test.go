package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestDetector drives the standby's takeover decision through Lease observations and probe
// results on a fake clock.
func TestDetector(t *testing.T) {
	type step struct {
		at time.Duration // since the start
		// lease, when set, is an observation "holder@rv".
		lease string
		// probe, when set, is a probe result: "ok" or "fail".
		probe string
		// attempt records a takeover attempt at this step.
		attempt bool
		want    verdict
	}
	lease := func(at time.Duration, l string) step { return step{at: at, lease: l} }
	probe := func(at time.Duration, r string, want verdict) step { return step{at: at, probe: r, want: want} }
	const ms = time.Millisecond
	tests := []struct {
		name  string
		steps []step
	}{
		{"nothing observed yet", []step{probe(0, "fail", wait), probe(100*ms, "fail", wait), probe(5000*ms, "fail", wait)}},
		{"dead holder: 3 failed probes and 1s unrenewed", []step{
			lease(0, "a@1"),
			probe(700*ms, "fail", wait), probe(800*ms, "fail", wait), probe(900*ms, "fail", wait),
			probe(999*ms, "fail", wait), // failures enough, not yet stale
			probe(1000*ms, "fail", takeOver),
		}},
		{"stale: the third failed probe decides", []step{
			lease(0, "a@1"), probe(2000*ms, "fail", wait), probe(2100*ms, "fail", wait), probe(2200*ms, "fail", takeOver),
		}},
		{"an answered probe resets the count", []step{
			lease(0, "a@1"), probe(1000*ms, "fail", wait), probe(1100*ms, "fail", wait), probe(1200*ms, "ok", wait),
			probe(1300*ms, "fail", wait), probe(1400*ms, "fail", wait), probe(1500*ms, "fail", takeOver),
		}},
		{"alive and renewing but unreachable: never", []step{
			lease(0, "a@1"), probe(100*ms, "fail", wait), probe(200*ms, "fail", wait), probe(300*ms, "fail", wait),
			lease(500*ms, "a@2"), probe(900*ms, "fail", wait), lease(1000*ms, "a@3"), probe(1400*ms, "fail", wait),
			lease(1500*ms, "a@4"), probe(1999*ms, "fail", wait), lease(2000*ms, "a@5"), probe(2900*ms, "fail", wait),
		}},
		{"answering but not renewing (its API server unreachable): never", []step{
			lease(0, "a@1"), probe(1000*ms, "ok", wait), probe(5000*ms, "ok", wait), probe(60000*ms, "ok", wait),
		}},
		{"a renewal restarts the staleness clock", []step{
			lease(0, "a@1"), probe(800*ms, "fail", wait), probe(900*ms, "fail", wait), lease(950*ms, "a@2"),
			probe(1000*ms, "fail", wait), probe(1900*ms, "fail", wait), probe(1950*ms, "fail", takeOver),
		}},
		{"a new holder resets the probe count", []step{
			lease(0, "a@1"), probe(100*ms, "fail", wait), probe(200*ms, "fail", wait), lease(250*ms, "b@2"),
			probe(1300*ms, "fail", wait), probe(1400*ms, "fail", wait), probe(1500*ms, "fail", takeOver),
		}},
		{"we hold it: never", []step{
			lease(0, "me@1"), probe(1000*ms, "fail", wait), probe(1100*ms, "fail", wait), probe(5000*ms, "fail", wait),
		}},
		{"released: acquire now, once per version", []step{
			lease(0, "a@1"), lease(100*ms, "@2"), probe(200*ms, "fail", acquireNow), probe(300*ms, "fail", wait),
			lease(400*ms, "a@3"), lease(500*ms, "@4"), probe(600*ms, "fail", acquireNow),
		}},
		{"a failed attempt backs off", []step{
			lease(0, "a@1"), probe(1000*ms, "fail", wait), probe(1100*ms, "fail", wait),
			{at: 1200 * ms, probe: "fail", attempt: true, want: takeOver},
			probe(1300*ms, "fail", wait), probe(1699*ms, "fail", wait), probe(1700*ms, "fail", takeOver),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
			d := detector{self: "me", failures: 3, staleAfter: time.Second, backoff: 500 * time.Millisecond}
			for i, s := range tc.steps {
				now := start.Add(s.at)
				if s.lease != "" {
					holder, rv, _ := strings.Cut(s.lease, "@")
					d.lease(holder, rv, now)
					continue
				}
				d.probed(s.probe == "ok")
				if got := d.decide(now); got != s.want {
					t.Fatalf("step %d (%s, probe %s): %s, want %s", i, s.at, s.probe, got, s.want)
				}
				if s.attempt {
					d.attempted(now)
				}
			}
		})
	}
}

// cuttableProxy forwards TCP to an API server until cut: then it drops every connection and
// closes new ones at once, as if the client's node had vanished.
type cuttableProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func startProxy(t *testing.T, target string) *cuttableProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttableProxy{l: l, target: target}
	t.Cleanup(func() { _ = l.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	return p
}

func (p *cuttableProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}

// TestHubPeerEndpoint: the hub's active gateway is probed at its Peer's endpoint address, and
// only when that Peer is the holder's: a Peer still naming the previous holder points at a
// gateway that is gone, and probing it would fail and count against the new one.
func TestHubPeerEndpoint(t *testing.T) {
	peer := func(hostname, ip string) *v1alpha1.Peer {
		return &v1alpha1.Peer{ObjectMeta: metav1.ObjectMeta{Namespace: "octopus-hub", Name: v1alpha1.HubPeerName},
			Spec: v1alpha1.PeerSpec{Hostname: hostname, Endpoint: v1alpha1.PeerEndpoint{PrivateIP: ip}}}
	}
	for _, tc := range []struct {
		name    string
		peer    *v1alpha1.Peer
		want    string
		wantErr string
	}{
		{name: "the holder's Peer", peer: peer("gw2", "203.0.113.251"), want: "203.0.113.251"},
		{name: "no Peer yet", wantErr: "reading the hub's Peer"},
		{name: "the previous holder's Peer", peer: peer("gw1", "203.0.113.250"), wantErr: "is gw1's, not yet the Lease holder gw2's"},
		{name: "no address", peer: peer("gw2", ""), wantErr: "no endpoint address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(kube.Scheme)
			if tc.peer != nil {
				b = b.WithObjects(tc.peer)
			}
			got, err := hubPeerEndpoint(b.Build(), "octopus-hub")(t.Context(), "gw2")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("got %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

// livenessListeners opens the liveness listeners of two gateways on one port at 127.0.0.2
// and 127.0.0.3 (all of 127/8 is local on Linux), and returns with them the options that give
// a gateway its listener and a fast takeover far shorter than its Lease: a takeover before the
// Lease expires can only be the fast one. The takeover wait is many renewals long, so that
// an API server slowed by a loaded machine (CI runs labs beside this test) cannot make a
// renewing active look unrenewed.
const testLeaseDuration, testTakeoverAfter = 20 * time.Second, 2 * time.Second

func livenessListeners(t *testing.T) (l1, l2 net.Listener, timing func(net.Listener) func(*Options)) {
	t.Helper()
	l1, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(l1.Addr().String(), ":")
	l2, err = net.Listen("tcp", "127.0.0.3:"+port)
	if err != nil {
		t.Fatal(err)
	}
	p, err := net.LookupPort("tcp", port)
	if err != nil {
		t.Fatal(err)
	}
	return l1, l2, func(l net.Listener) func(*Options) {
		return func(o *Options) {
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = testLeaseDuration, 15*time.Second, 300*time.Millisecond
			o.TakeoverAfter = testTakeoverAfter
			o.LivenessListener, o.LivenessPort, o.LivenessInterval, o.LivenessFailures = l, uint16(p), 100*time.Millisecond, 3
		}
	}
}

// waitTakeover waits until standby holds the Lease and checks that it took over fast: the
// takeover wait after the active one's last renewal, plus a few probes and the API calls,
// long before the Lease would have expired.
func waitTakeover(t *testing.T, holder func() string, standby string, since time.Time) {
	t.Helper()
	eventually(t, standby+" takes the Lease over", func() error {
		if h := holder(); h != standby {
			return errors.New("held by " + h)
		}
		return nil
	})
	took := time.Since(since)
	t.Logf("%s took the Lease over %s after the active gateway stopped renewing and answering", standby, took.Round(time.Millisecond))
	if took > testLeaseDuration/2 {
		t.Errorf("takeover took %s, want well under the Lease's %s", took, testLeaseDuration)
	}
}

// waitDeposed checks that gw, deposed while cut off, ends its active term (closes its driver)
// soon after it reaches its API server again: its next renewal conflicts, and it stops at once
// instead of after its 15 s RenewDeadline. Its Run goes on, standing by.
func waitDeposed(t *testing.T, gw *runningGateway) *fakeDriver {
	t.Helper()
	back := time.Now()
	d := gw.driver()
	testenv.EventuallyEvery(t, 20*time.Millisecond, 8*time.Second, gw.node+" ends its active term after it could see that another gateway took over", func() error {
		if d.isClosed() {
			return nil
		}
		select {
		case <-gw.done:
			t.Fatalf("%s's Run returned after it was deposed (%v); want it standing by", gw.node, gw.err)
		default:
		}
		return errors.New("still active")
	})
	t.Logf("%s ended its active term %s after it could reach its API server again", gw.node, time.Since(back).Round(time.Millisecond))
	return d
}

// waitActiveAgain checks that gw, deposed earlier, stood by in the same Run: once the Lease is
// released it is the active gateway again, with a new driver (a fresh key pair).
func waitActiveAgain(t *testing.T, gw *runningGateway, holder func() string, deposed *fakeDriver) {
	t.Helper()
	eventually(t, gw.node+" to be the active gateway again, in the same Run", func() error {
		select {
		case <-gw.done:
			t.Fatalf("%s's Run returned: %v", gw.node, gw.err)
		default:
		}
		if h := holder(); h != gw.node {
			return errors.New("the Lease is held by " + h)
		}
		if d := gw.driver(); d == deposed || d.isClosed() {
			return errors.New("no new driver")
		}
		return nil
	})
}

// TestGatewayTakeover runs two gateways of one member cluster against real API servers: the
// active one reaches its API server through a proxy the test cuts, and listens for liveness
// probes on a listener the test closes. A standby must take over fast from an active that
// neither renews nor answers, and never from one that does either.
func TestGatewayTakeover(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east")
	ctx := t.Context()
	info, err := hub.Deploy(ctx, env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Join(ctx, env.Cluster("east").RESTConfig(), cluster.JoinOptions{
		BrokerInfo: info, ClusterID: "east", PodCIDRs: []string{env.Cluster("east").PodCIDR.String()},
	}); err != nil {
		t.Fatalf("joining east: %v", err)
	}
	eastCfg := env.Cluster("east").RESTConfig()
	east := newClient(t, eastCfg)
	cs, err := kubernetes.NewForConfig(eastCfg)
	if err != nil {
		t.Fatal(err)
	}
	// The InternalIPs are loopback addresses (all of 127/8 is local on Linux), where the
	// gateways' liveness listeners are.
	testenv.AddNode(t, east, "east-gw1", "127.0.0.2", "10.101.0.0/24")
	testenv.AddNode(t, east, "east-gw2", "127.0.0.3", "10.101.1.0/24")

	t.Run("two standbys cannot both take over", func(t *testing.T) {
		leases := cs.CoordinationV1().Leases(v1alpha1.SystemNamespace)
		holder := "dead"
		l, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "takeover-race"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Both saw the same version.
		errA := takeLease(ctx, cs, l, "a", 10*time.Second, time.Now())
		errB := takeLease(ctx, cs, l, "b", 10*time.Second, time.Now())
		if errA != nil || !apierrors.IsConflict(errB) {
			t.Fatalf("first takeover: %v, second: %v; want success then a conflict", errA, errB)
		}
		got, err := leases.Get(ctx, l.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if holderOf(got) != "a" || got.Spec.LeaseTransitions == nil || *got.Spec.LeaseTransitions != 1 || *got.Spec.LeaseDurationSeconds != 10 {
			t.Fatalf("lease after the race: %+v", got.Spec)
		}
	})

	t.Run("a deposed gateway does not release its successor's Lease", func(t *testing.T) {
		rl, err := resourcelock.New(resourcelock.LeasesResourceLock, v1alpha1.SystemNamespace, "release-race",
			cs.CoreV1(), cs.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: "old"})
		if err != nil {
			t.Fatal(err)
		}
		var displacedBy string
		lock := &trackingLock{Interface: rl, onDisplaced: func(h string) { displacedBy = h }}
		now := metav1.Now()
		if err := lock.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "old", LeaseDurationSeconds: 10, AcquireTime: now, RenewTime: now}); err != nil {
			t.Fatal(err)
		}
		leases := cs.CoordinationV1().Leases(v1alpha1.SystemNamespace)
		l, err := leases.Get(ctx, "release-race", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := takeLease(ctx, cs, l, "new", 10*time.Second, time.Now()); err != nil {
			t.Fatal(err)
		}
		// What client-go's release does: a fresh Get, then an Update clearing the holder.
		if _, _, err := lock.Get(ctx); err != nil {
			t.Fatal(err)
		}
		if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1, AcquireTime: now, RenewTime: now}); err == nil {
			t.Fatal("the deposed holder's release was written")
		}
		got, err := leases.Get(ctx, "release-race", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if holderOf(got) != "new" || displacedBy != "new" {
			t.Fatalf("holder %q after the deposed one's release, displaced by %q; want new, new", holderOf(got), displacedBy)
		}
	})

	u, err := url.Parse(eastCfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	proxied := rest.CopyConfig(eastCfg)
	proxied.Host = "https://" + proxy.l.Addr().String()
	// Short requests, so that a cut shows within the test's timing.
	proxied.Timeout = 2 * time.Second

	l1, l2, timing := livenessListeners(t)
	lease := func() *coordinationv1.Lease {
		t.Helper()
		l, err := cs.CoordinationV1().Leases(v1alpha1.SystemNamespace).Get(ctx, v1alpha1.GatewayLeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	holder := func() string { return holderOf(lease()) }

	gw1 := startGateway(t, proxied, "east-gw1", "203.0.113.1", timing(l1))
	eventually(t, "gw1 becomes active", func() error {
		if gw1.driver() == nil {
			return errors.New("no driver yet")
		}
		return nil
	})
	gw2 := startGateway(t, eastCfg, "east-gw2", "203.0.113.2", timing(l2))
	// Ready: the active at once, the standby once it watches the Lease (what a rolling
	// update of the gateway DaemonSet waits for before it stops the next old pod).
	for _, g := range []*runningGateway{gw1, gw2} {
		eventually(t, g.node+" to be ready", func() error { return wantReadyz(g, http.StatusOK) })
	}
	// A gateway that cannot take part in the election (its cluster has no hub credential:
	// the hub's own API server stands in for a cluster not joined) is not ready.
	unjoined := startGateway(t, env.Cluster("hub").RESTConfig(), "east-gw3", "203.0.113.3")
	// Long enough for gw2 to watch the Lease and probe gw1 many times over.
	time.Sleep(2 * time.Second)
	if err := wantReadyz(unjoined, http.StatusServiceUnavailable); err != nil {
		t.Error(err)
	}
	if h := holder(); h != "east-gw1" || gw2.driver() != nil {
		t.Fatalf("holder %s, gw2 driver %v: the standby took over from a healthy active", h, gw2.driver())
	}
	hold := 3 * testTakeoverAfter // > TakeoverAfter + 3 probes, many times over

	// Alive (answering) but unable to renew: not displaced early.
	before := lease()
	proxy.setCut(true)
	time.Sleep(hold)
	if l := lease(); holderOf(l) != "east-gw1" || l.ResourceVersion != before.ResourceVersion {
		t.Fatalf("lease %s@%s: want east-gw1's, unrenewed, at %s", holderOf(l), l.ResourceVersion, before.ResourceVersion)
	}
	if gw2.driver() != nil {
		t.Fatal("gw2 became active while gw1 answered its probes")
	}
	proxy.setCut(false)
	eventually(t, "gw1 renews again", func() error {
		if l := lease(); l.ResourceVersion == before.ResourceVersion || holderOf(l) != "east-gw1" {
			return errors.New("not renewed")
		}
		return nil
	})

	// Renewing but not answering: never displaced.
	_ = l1.Close()
	before = lease()
	time.Sleep(hold)
	if l := lease(); holderOf(l) != "east-gw1" || l.ResourceVersion == before.ResourceVersion || gw2.driver() != nil {
		t.Fatalf("lease %s@%s (was %s): want east-gw1 renewing, gw2 standing by", holderOf(l), l.ResourceVersion, before.ResourceVersion)
	}
	select {
	case <-gw1.done:
		t.Fatalf("gw1 stopped: %v", gw1.err)
	default:
	}

	// Neither: gw2 takes over long before the 20 s Lease expires.
	cut := time.Now()
	proxy.setCut(true)
	waitTakeover(t, holder, "east-gw2", cut)
	eventually(t, "gw2 is active and republishes east's Peer", func() error {
		p := &v1alpha1.Peer{}
		if err := newClient(t, env.Cluster("hub").RESTConfig()).Get(ctx, client.ObjectKey{Namespace: info.Namespace, Name: "east"}, p); err != nil {
			return err
		}
		if d := gw2.driver(); d == nil || p.Spec.Hostname != "east-gw2" || p.Spec.PublicKey != d.PublicKey() {
			return errors.New("peer names " + p.Spec.Hostname)
		}
		return nil
	})
	if l := lease(); l.Spec.LeaseTransitions == nil || *l.Spec.LeaseTransitions < 1 {
		t.Errorf("lease transitions %v, want counted", l.Spec.LeaseTransitions)
	}

	// gw1 comes back: its next renewal conflicts, it sees gw2 and stops being active at once
	// (not after its 15 s RenewDeadline), without releasing gw2's Lease, and stands by.
	proxy.setCut(false)
	deposed := waitDeposed(t, gw1)
	time.Sleep(time.Second)
	if h := holder(); h != "east-gw2" {
		t.Fatalf("holder %s after gw1 was deposed, want east-gw2", h)
	}
	// gw2 stops cleanly (releasing the Lease): the standby gw1 takes the active role again.
	gw2.stop(t)
	waitActiveAgain(t, gw1, holder, deposed)
}

// TestHubGatewayTakeover runs two of the hub's gateways, which have no Node to be probed at:
// a standby finds the active one at the hub Peer's endpoint address, and takes over fast when
// it neither renews (its hub connection cut) nor answers.
func TestHubGatewayTakeover(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub")
	ctx := t.Context()
	hubCfg := env.Cluster("hub").RESTConfig()
	info, err := hub.Deploy(ctx, hubCfg, hub.DeployOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gwCfg, err := hub.GatewayConfig(ctx, hubCfg, info.Namespace, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(gwCfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	proxied := rest.CopyConfig(gwCfg)
	proxied.Host = "https://" + proxy.l.Addr().String()
	proxied.Timeout = 2 * time.Second
	l1, l2, timing := livenessListeners(t)
	asHub := func(o *Options) {
		o.Role, o.HubNamespace, o.HealthCheckIP = v1alpha1.PeerRoleHub, info.Namespace, netip.MustParseAddr("10.100.0.1")
	}
	hubc := newClient(t, hubCfg)
	hubPeer := func() (*v1alpha1.Peer, error) {
		p := &v1alpha1.Peer{}
		return p, hubc.Get(ctx, client.ObjectKey{Namespace: info.Namespace, Name: v1alpha1.HubPeerName}, p)
	}
	cs, err := kubernetes.NewForConfig(hubCfg)
	if err != nil {
		t.Fatal(err)
	}
	holder := func() string {
		l, err := cs.CoordinationV1().Leases(info.Namespace).Get(ctx, v1alpha1.HubGatewayLeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return holderOf(l)
	}

	gw1 := startGateway(t, proxied, "hub-gw1", "127.0.0.2", asHub, timing(l1))
	eventually(t, "gw1 publishes the hub's Peer", func() error {
		p, err := hubPeer()
		if err != nil {
			return err
		}
		if p.Spec.Hostname != "hub-gw1" {
			return errors.New("peer names " + p.Spec.Hostname)
		}
		return nil
	})
	gw2 := startGateway(t, gwCfg, "hub-gw2", "127.0.0.3", asHub, timing(l2))
	time.Sleep(2 * time.Second)
	if h := holder(); h != "hub-gw1" || gw2.driver() != nil {
		t.Fatalf("holder %s, gw2 driver %v: the standby took over from a healthy active", h, gw2.driver())
	}

	cut := time.Now()
	_ = l1.Close()
	proxy.setCut(true)
	waitTakeover(t, holder, "hub-gw2", cut)
	eventually(t, "gw2 republishes the hub's Peer", func() error {
		p, err := hubPeer()
		if err != nil {
			return err
		}
		if d := gw2.driver(); d == nil || p.Spec.Hostname != "hub-gw2" || p.Spec.Endpoint.PrivateIP != "127.0.0.3" || p.Spec.PublicKey != d.PublicKey() {
			return fmt.Errorf("peer %+v", p.Spec)
		}
		return nil
	})
	// gw1, reaching the hub again, finds itself deposed and stops being active without
	// releasing gw2's Lease, then stands by: it takes over when gw2 stops.
	proxy.setCut(false)
	deposed := waitDeposed(t, gw1)
	if h := holder(); h != "hub-gw2" {
		t.Fatalf("holder %s after gw1 was deposed, want hub-gw2", h)
	}
	gw2.stop(t)
	waitActiveAgain(t, gw1, holder, deposed)
}

// wantReadyz checks the status of g's /readyz.
func wantReadyz(g *runningGateway, want int) error {
	resp, err := http.Get("http://" + g.metricsAddr + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s's /readyz: %s %q, want %d", g.node, resp.Status, body, want)
	}
	return nil
}

// TestJudgeProbe: a probe that failed while the standby was paused is not believed, unless
// the holder's node refused it.
func TestJudgeProbe(t *testing.T) {
	timeout := fmt.Errorf("dial tcp 127.0.0.2:9474: %w", os.ErrDeadlineExceeded)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	const ms = time.Millisecond
	for _, tc := range []struct {
		name         string
		err          error
		took, paused time.Duration
		want         probeResult
	}{
		{"answered", nil, 10 * ms, 0, answered},
		{"answered late is still an answer", nil, 3000 * ms, 2000 * ms, answered},
		{"timed out while running", timeout, livenessTimeout, 40 * ms, failed},
		{"timed out across a pause", timeout, livenessTimeout + 10*ms, 600 * ms, unheard},
		{"timed out long after its deadline", timeout, 2 * livenessTimeout, 0, unheard},
		{"refused", refused, 2 * ms, 0, failed},
		{"refused across a pause", refused, 900 * ms, 800 * ms, failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judgeProbe(tc.err, tc.took, tc.paused); got != tc.want {
				t.Fatalf("judgeProbe(%v, %s, %s) = %d, want %d", tc.err, tc.took, tc.paused, got, tc.want)
			}
		})
	}
}

// TestPauseWatch: the longest delay past the tick since restart, one still going included.
func TestPauseWatch(t *testing.T) {
	var p pauseWatch
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	if got := p.longestSince(t0); got != 0 {
		t.Fatalf("before any beat: %s", got)
	}
	p.beat(t0)
	p.beat(t0.Add(pauseTick))
	p.beat(t0.Add(pauseTick + 900*time.Millisecond)) // 850 ms late
	p.beat(t0.Add(2*pauseTick + 900*time.Millisecond))
	if got := p.longestSince(t0.Add(2*pauseTick + 900*time.Millisecond)); got != 850*time.Millisecond {
		t.Fatalf("after an 850 ms pause: %s", got)
	}
	p.restart()
	last := t0.Add(2*pauseTick + 900*time.Millisecond)
	if got := p.longestSince(last.Add(pauseTick)); got != 0 {
		t.Fatalf("after restart, on time: %s", got)
	}
	if got := p.longestSince(last.Add(pauseTick + time.Second)); got != time.Second {
		t.Fatalf("a pause still going: %s", got)
	}
}

// TestStepDoesNotCountProbesAcrossPauses runs a standby's probe loop against a Lease nobody
// renews, with probes that time out: on a standby that kept running it takes over; on one
// that was paused through each probe (each took far past its deadline) it never does, however
// long the Lease stays unrenewed; refusals count even across pauses.
func TestStepDoesNotCountProbesAcrossPauses(t *testing.T) {
	timeout := fmt.Errorf("dial tcp: %w", os.ErrDeadlineExceeded)
	refused := os.NewSyscallError("connect", syscall.ECONNREFUSED)
	for _, tc := range []struct {
		name     string
		err      error
		took     time.Duration
		wantTake bool
	}{
		{"timeouts while running", timeout, livenessTimeout, true},
		{"timeouts across pauses", timeout, 3 * livenessTimeout, false},
		{"refusals across pauses", refused, 3 * livenessTimeout, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holder := "gw1"
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayLeaseName, ResourceVersion: "1"},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
			cs := k8sfake.NewClientset(lease)
			clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
			o := Options{NodeName: "gw2", LivenessPort: 9474, LivenessFailures: 3, TakeoverAfter: time.Second, RetryPeriod: 500 * time.Millisecond,
				LeaseDuration: 20 * time.Second, Log: logr.Discard()}
			tk := newTakeover(o, cs, func(context.Context, string) (netip.Addr, error) { return netip.MustParseAddr("127.0.0.2"), nil },
				&trackingLock{}, lease.Namespace, lease.Name)
			tk.now = func() time.Time { return clock }
			tk.dial = func(context.Context, netip.AddrPort) error {
				clock = clock.Add(tc.took)
				return tc.err
			}
			tk.observe(lease)
			for range 10 {
				tk.step(t.Context())
			}
			got, err := cs.CoordinationV1().Leases(lease.Namespace).Get(t.Context(), lease.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if took := holderOf(got) == "gw2"; took != tc.wantTake {
				t.Fatalf("holder %s after 10 probes over %s, want taken over: %t", holderOf(got), 10*tc.took, tc.wantTake)
			}
		})
	}
}
