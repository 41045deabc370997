package gateway

// Fast takeover: a standby replaces a dead active gateway before the Lease expires.
//
// A SIGKILLed (or crashed, or powered-off) active gateway cannot release the Lease, so with
// client-go's election alone a standby waits out LeaseDuration; shortening the Lease instead
// makes a loaded active lose it (flapping). Here every gateway process accepts TCP connections
// on a liveness port of its node, and each standby connects to the Lease holder's node
// every LivenessInterval: a member's gateway at the holder's Node InternalIP; the hub's
// gateway, whose cluster has no Nodes, at the endpoint address of the hub's Peer when that
// Peer names the holder (the active publishes it; until it has, nothing is probed and only
// the Lease's expiry helps). It takes the Lease over only when BOTH
//   - LivenessFailures consecutive probes failed (refused: no gateway process on that node;
//     timeout: the node or the path to it is gone), and
//   - the Lease has not changed for TakeoverAfter (> RetryPeriod, the active's renew cadence)
//     as seen by the standby's own watch, on its own clock,
// by one optimistic-concurrency Update of the Lease object it watched (holder := itself, at
// the watched resourceVersion). A renewal, or another standby's takeover, in between changes
// the resourceVersion and the Update fails with a Conflict: two standbys cannot both win, and
// an active that renewed is never displaced. The standby then restarts its elector, whose
// first tryAcquireOrRenew finds itself as the holder and renews at once (client-go treats a
// record naming us as ours: IsLeader, no expiry wait).
//
// Why this is safe (docs/architecture.md §6d):
//   - an active that renews is never displaced, whatever the probes say (e.g. the liveness
//     port firewalled, or the standby cut from the active's node);
//   - an active that answers the probes is never displaced, whatever the Lease says (e.g. it
//     cannot reach its API server for a moment); it then loses the Lease only the ordinary way,
//     after RenewDeadline;
//   - for a member's gateway the hub plays no part (the probe is member-local, the Lease is
//     the member cluster's), so a hub outage cannot cause a takeover; when the API server
//     that holds the Lease is unreachable nobody can write it, so nobody takes over;
//   - split brain needs an active that is alive, cannot renew (cut from its API server) and
//     cannot be probed (cut from the standby) at the same time. The standby then takes over
//     TakeoverAfter after the last renewal it saw, while the old active only gives up after
//     RenewDeadline (client-go): both act for at most RetryPeriod + RenewDeadline −
//     TakeoverAfter. Route agents follow the Lease and remote gateways follow the Peer the new
//     active publishes, so traffic goes to the new one; the old one writes only its Peer's
//     status (and its spec only if its own subnets change in that window). Without this
//     mechanism the window is zero (LeaseDuration > RenewDeadline).
//   - an active that can renew again after a takeover learns at its next renewal: the Update
//     conflicts, client-go re-reads the Lease, and trackingLock sees another holder and ends
//     the active role at once instead of after RenewDeadline.
//
// A probe that failed while the standby itself was kept from running proves nothing: a process
// held off the CPU past the probe's deadline (a machine at load 30 on two cores, a frozen
// VM) finds the deadline passed before it reads the answer that had arrived. Such a failure
// is not counted (judgeProbe), after Cassandra's failure detector, which convicts no peer
// while the local node was paused. A refused connection always counts: the holder's node
// answered, and said nothing listens.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// Defaults of the fast takeover (Options.Liveness*).
const (
	// DefaultLivenessPort is the TCP port every gateway process listens on so that standbys
	// can tell whether the active one is alive. Next to DefaultMetricsPort; nothing else of
	// Octopus uses it.
	DefaultLivenessPort     = 9474
	DefaultLivenessInterval = 200 * time.Millisecond
	DefaultLivenessFailures = 3

	// livenessTimeout bounds one probe. A dead process's port is refused at once, so this
	// only delays noticing a silent node; it is long so that a loaded machine, which may not
	// run the prober's goroutine for a while, does not turn a slow answer into a failure.
	livenessTimeout = time.Second

	// maxLocalPause is how long the standby may have gone without running during a probe
	// before a failure it measured is not believed; pauseTick is how often pauseWatch looks.
	maxLocalPause = 250 * time.Millisecond
	pauseTick     = 50 * time.Millisecond

	// apiTimeout bounds the standby's own API requests (the holder's Node, the takeover): the
	// probe loop runs them inline, and one that hung would stop every later probe, leaving
	// only the Lease's expiry.
	apiTimeout = 5 * time.Second
)

// verdict is what a standby does after a probe.
type verdict int

const (
	// wait: the holder is alive, renewing, or not known yet.
	wait verdict = iota
	// takeOver: the holder is dead: write ourselves into the Lease at the observed version.
	takeOver
	// acquireNow: the Lease was released (no holder): let the elector try at once instead
	// of at its next, jittered, retry.
	acquireNow
)

func (v verdict) String() string {
	return [...]string{"wait", "takeOver", "acquireNow"}[v]
}

// detector decides, from the Lease versions a standby observed and its probes of the holder,
// when to take over. Pure: time comes from the caller.
type detector struct {
	self string
	// failures is how many consecutive probes must fail.
	failures int
	// staleAfter is how long the Lease must stay at one version.
	staleAfter time.Duration
	// backoff separates two takeover attempts at the same version (an attempt that failed
	// for another reason than a conflict, e.g. the API server is unreachable).
	backoff time.Duration

	holder, rv string
	// since is when rv was first observed.
	since time.Time
	// missed counts consecutive failed probes of holder.
	missed int
	// notBefore holds back the next takeover attempt; kicked is the version of the last
	// acquireNow.
	notBefore time.Time
	kicked    string
}

// lease records an observed version of the Lease. A new holder resets the probe count; a new
// version (a renewal) restarts the staleness clock.
func (d *detector) lease(holder, rv string, now time.Time) {
	if rv == d.rv {
		return
	}
	if holder != d.holder {
		d.missed = 0
	}
	d.holder, d.rv, d.since = holder, rv, now
}

// probed records a probe of the current holder.
func (d *detector) probed(ok bool) {
	if ok {
		d.missed = 0
	} else {
		d.missed++
	}
}

// attempted holds back the next takeover attempt.
func (d *detector) attempted(now time.Time) { d.notBefore = now.Add(d.backoff) }

func (d *detector) decide(now time.Time) verdict {
	switch {
	case d.rv == "" || d.holder == d.self:
		return wait
	case d.holder == "":
		if d.kicked == d.rv {
			return wait
		}
		d.kicked = d.rv
		return acquireNow
	case d.missed >= d.failures && now.Sub(d.since) >= d.staleAfter && !now.Before(d.notBefore):
		return takeOver
	}
	return wait
}

// probeResult is what one probe says of the holder.
type probeResult int

const (
	answered probeResult = iota
	failed
	// unheard: it failed while the standby was paused, so the holder may have answered.
	unheard
)

// judgeProbe tells what a probe that ended in err, after took, says of the holder, given the
// longest the standby went without running meanwhile. A refusal is the holder's node's own
// answer, whenever it was read; any other failure (a timeout, an unreachable network) counts
// only if the standby ran throughout.
func judgeProbe(err error, took, longestPause time.Duration) probeResult {
	switch {
	case err == nil:
		return answered
	case errors.Is(err, syscall.ECONNREFUSED):
		return failed
	case longestPause > maxLocalPause || took > livenessTimeout+maxLocalPause:
		return unheard
	}
	return failed
}

// pauseWatch measures how long this process went without running: its goroutine should
// wake every pauseTick, and it keeps the longest delay past that since restart.
type pauseWatch struct {
	mu      sync.Mutex
	last    time.Time
	longest time.Duration
}

func (p *pauseWatch) run(ctx context.Context) {
	utilwait.UntilWithContext(ctx, func(context.Context) { p.beat(time.Now()) }, pauseTick)
}

func (p *pauseWatch) beat(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.last.IsZero() {
		p.longest = max(p.longest, now.Sub(p.last)-pauseTick)
	}
	p.last = now
}

// restart forgets the pauses seen so far.
func (p *pauseWatch) restart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.longest = 0
}

// longestSince returns the longest pause since restart, counting one that lasts until now.
func (p *pauseWatch) longestSince(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last.IsZero() {
		return 0
	}
	return max(p.longest, now.Sub(p.last)-pauseTick)
}

// takeover runs in every gateway process; it acts only while another node holds the Lease.
type takeover struct {
	o    Options
	cs   kubernetes.Interface
	lock *trackingLock
	log  logr.Logger
	// leaseNamespace and leaseName are the election's Lease.
	leaseNamespace, leaseName string
	// now is the clock (tests); dial probes an address.
	now  func() time.Time
	dial func(ctx context.Context, addr netip.AddrPort) error
	// watching, if set, is called once the Lease's watch has synced: from then on a
	// released or unrenewed Lease is seen at once.
	watching func()

	// pauses tells whether a failed probe is believed (judgeProbe); unheard is whether the
	// last probe was not (only step's goroutine touches it), to log once per pause.
	pauses  pauseWatch
	unheard bool

	mu    sync.Mutex
	d     detector
	lease *coordinationv1.Lease // the newest observed
	kick  func()                // set by Run for the current elector
	// locate finds where a holder answers the probes; addrs caches its answers by holder, and
	// lastAddrErr is the last error it gave (only step's goroutine touches it).
	locate      locator
	addrs       map[string]netip.Addr
	lastAddrErr string
}

// locator returns the address where the gateway process of the Lease holder holder listens
// for liveness probes.
type locator func(ctx context.Context, holder string) (netip.Addr, error)

// nodeInternalIP locates a member's gateway: its identity is its Node's name.
func nodeInternalIP(cs kubernetes.Interface) locator {
	return func(ctx context.Context, node string) (netip.Addr, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return netip.Addr{}, fmt.Errorf("reading the active gateway's Node: %w", err)
		}
		for _, na := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(na.Address); err == nil && na.Type == corev1.NodeInternalIP {
				return ip, nil
			}
		}
		return netip.Addr{}, fmt.Errorf("the active gateway's Node %s has no InternalIP", node)
	}
}

// hubPeerEndpoint locates the hub's active gateway, which has no Node: the hub's Peer carries
// its node name and its address. A Peer naming another node is the previous holder's, not yet
// republished, and its address must not be probed.
func hubPeerEndpoint(hub client.Reader, namespace string) locator {
	return func(ctx context.Context, holder string) (netip.Addr, error) {
		p := &v1alpha1.Peer{}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: namespace, Name: v1alpha1.HubPeerName}, p); err != nil {
			return netip.Addr{}, fmt.Errorf("reading the hub's Peer: %w", err)
		}
		if p.Spec.Hostname != holder {
			return netip.Addr{}, fmt.Errorf("the hub's Peer is %s's, not yet the Lease holder %s's", p.Spec.Hostname, holder)
		}
		ip, err := netip.ParseAddr(p.Spec.Endpoint.PrivateIP)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("the hub's Peer has no endpoint address to probe: %w", err)
		}
		return ip, nil
	}
}

func newTakeover(o Options, cs kubernetes.Interface, locate locator, lock *trackingLock, leaseNamespace, leaseName string) *takeover {
	return &takeover{
		o: o, cs: cs, locate: locate, lock: lock, leaseNamespace: leaseNamespace, leaseName: leaseName, log: o.Log.WithName("takeover"), now: time.Now,
		d: detector{self: o.NodeName, failures: o.LivenessFailures, staleAfter: o.TakeoverAfter, backoff: o.RetryPeriod},
		dial: func(ctx context.Context, addr netip.AddrPort) error {
			c, err := (&net.Dialer{Timeout: livenessTimeout}).DialContext(ctx, "tcp", addr.String())
			if err != nil {
				return err
			}
			return c.Close()
		},
		addrs: map[string]netip.Addr{},
	}
}

// setKick sets what makes the current elector try to acquire at once.
func (t *takeover) setKick(kick func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.kick = kick
}

func (t *takeover) doKick() {
	t.mu.Lock()
	kick := t.kick
	t.mu.Unlock()
	if kick != nil {
		kick()
	}
}

// observe records a Lease from the watch (nil: deleted).
func (t *takeover) observe(l *coordinationv1.Lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l == nil {
		t.lease = nil
		t.d.lease("", "", t.now())
		return
	}
	t.lease = l.DeepCopy()
	t.d.lease(holderOf(l), l.ResourceVersion, t.now())
}

// run watches the Lease and probes its holder until ctx is done.
func (t *takeover) run(ctx context.Context) {
	lw := toolscache.NewListWatchFromClient(t.cs.CoordinationV1().RESTClient(), "leases", t.leaseNamespace,
		fields.OneTermEqualSelector("metadata.name", t.leaseName))
	inf := toolscache.NewSharedIndexInformer(lw, &coordinationv1.Lease{}, 0, toolscache.Indexers{})
	_, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observeObj(obj) },
		UpdateFunc: func(_, obj any) { t.observeObj(obj) },
		DeleteFunc: func(any) { t.observe(nil) },
	})
	if err != nil {
		t.log.Error(err, "Watching the gateway Lease; fast takeover is off, standbys wait for the Lease to expire")
		return
	}
	go inf.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	if t.watching != nil {
		t.watching()
	}
	go t.pauses.run(ctx)
	utilwait.UntilWithContext(ctx, t.step, t.o.LivenessInterval)
}

func (t *takeover) observeObj(obj any) {
	if l, ok := obj.(*coordinationv1.Lease); ok {
		t.observe(l)
	}
}

// step probes the holder once and acts on the verdict.
func (t *takeover) step(ctx context.Context) {
	t.mu.Lock()
	holder := t.d.holder
	v := t.d.decide(t.now())
	t.mu.Unlock()
	if v == acquireNow {
		t.log.Info("The gateway Lease was released; acquiring it now")
		t.doKick()
		return
	}
	if holder == "" || holder == t.o.NodeName || t.lock.isLeading() {
		return
	}
	addr, ok := t.address(ctx, holder)
	if !ok {
		// No probe, no failure: without the holder's address only the Lease's expiry helps.
		return
	}
	t.pauses.restart()
	start := t.now()
	err := t.dial(ctx, netip.AddrPortFrom(addr, t.o.LivenessPort))
	if ctx.Err() != nil {
		return
	}
	now := t.now()
	result := judgeProbe(err, now.Sub(start), t.pauses.longestSince(time.Now()))
	if result == unheard {
		if !t.unheard {
			t.log.Info("Not counting a failed liveness probe of the active gateway: this process was paused while it waited for the answer",
				"holder", holder, "address", addr.String(), "error", err.Error(), "took", now.Sub(start).Round(time.Millisecond).String())
		}
		t.unheard = true
		return
	}
	t.unheard = false
	t.mu.Lock()
	if t.d.holder != holder { // the Lease moved while we probed
		t.mu.Unlock()
		return
	}
	t.d.probed(result == answered)
	v, missed, stale := t.d.decide(now), t.d.missed, now.Sub(t.d.since)
	if missed == 1 {
		// Once per run of failures: what a standby saw when a takeover is slow to come.
		t.log.Info("A liveness probe of the active gateway failed", "holder", holder, "address", addr.String(), "error", err.Error(),
			"leaseUnchangedFor", stale.Round(time.Millisecond).String())
	}
	var lease *coordinationv1.Lease
	if v == takeOver {
		t.d.attempted(now)
		lease = t.lease.DeepCopy()
	}
	t.mu.Unlock()
	if v != takeOver {
		return
	}
	takeCtx, cancel := context.WithTimeout(ctx, apiTimeout)
	err = takeLease(takeCtx, t.cs, lease, t.o.NodeName, t.o.LeaseDuration, now)
	cancel()
	if err != nil {
		t.log.Info("Taking over the gateway Lease failed; the active gateway renewed it, another standby took it, or the API server is unreachable",
			"holder", holder, "error", err.Error())
		return
	}
	t.log.Info("Took over the gateway Lease from an active gateway that stopped answering and renewing",
		"previous", holder, "address", addr.String(), "failedProbes", missed, "unrenewedFor", stale.Round(time.Millisecond).String())
	t.doKick()
}

// address returns where holder answers the probes, cached once found.
func (t *takeover) address(ctx context.Context, holder string) (netip.Addr, bool) {
	t.mu.Lock()
	a, ok := t.addrs[holder]
	t.mu.Unlock()
	if ok {
		return a, true
	}
	getCtx, cancel := context.WithTimeout(ctx, apiTimeout)
	a, err := t.locate(getCtx, holder)
	cancel()
	if err != nil {
		// Until this succeeds nothing is probed and only the Lease's expiry helps: say so,
		// once per kind of error.
		if msg := err.Error(); msg != t.lastAddrErr {
			t.lastAddrErr = msg
			t.log.Info("Cannot find the active gateway's address to probe it; until then a standby takes over only when the Lease expires",
				"holder", holder, "error", msg)
		}
		return netip.Addr{}, false
	}
	t.lastAddrErr = ""
	t.mu.Lock()
	t.addrs[holder] = a
	t.mu.Unlock()
	return a, true
}

// takeLease writes self as the holder of lease, as observed: the Update carries its
// resourceVersion, so it fails with a Conflict if anyone (the holder renewing, another
// standby) wrote the Lease since. It writes what client-go's elector writes on acquiring, so
// that the elector, finding itself the holder, just renews.
func takeLease(ctx context.Context, cs kubernetes.Interface, lease *coordinationv1.Lease, self string, leaseDuration time.Duration, now time.Time) error {
	if lease == nil {
		return errors.New("no Lease observed")
	}
	l := lease.DeepCopy()
	rec := resourcelock.LeaseSpecToLeaderElectionRecord(&l.Spec)
	t := metav1.NewTime(now)
	rec.HolderIdentity = self
	rec.LeaseDurationSeconds = int(leaseDuration / time.Second)
	rec.AcquireTime, rec.RenewTime = t, t
	rec.LeaderTransitions++
	l.Spec = resourcelock.LeaderElectionRecordToLeaseSpec(rec)
	if _, err := cs.CoordinationV1().Leases(l.Namespace).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating Lease %s/%s at version %s: %w", l.Namespace, l.Name, lease.ResourceVersion, err)
	}
	return nil
}

func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// trackingLock is the elector's lock, watched: it knows whether the elector holds the Lease
// (its last write named us), and it reports when a read shows another holder while we hold
// it (a standby took over), so that the active role ends at once instead of when
// RenewDeadline runs out.
type trackingLock struct {
	resourcelock.Interface
	onDisplaced func(holder string)

	// mu is held across Update and Create, so that cancelUnlessLeading cannot interleave
	// with a write that makes us the holder.
	mu      sync.Mutex
	leading bool
}

func (l *trackingLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err != nil {
		return rec, raw, err
	}
	l.mu.Lock()
	displaced := l.leading && rec.HolderIdentity != l.Identity()
	if displaced {
		l.leading = false
	}
	l.mu.Unlock()
	if displaced && l.onDisplaced != nil {
		l.onDisplaced(rec.HolderIdentity)
	}
	return rec, raw, nil
}

func (l *trackingLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, ler, l.Interface.Create)
}

func (l *trackingLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, ler, l.Interface.Update)
}

func (l *trackingLock) write(ctx context.Context, ler resourcelock.LeaderElectionRecord, f func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ler.HolderIdentity == "" && !l.leading {
		// client-go's release (ReleaseOnCancel) re-reads the Lease, which brings the lock up
		// to its current resourceVersion, but decides from the holder it observed earlier: a
		// gateway deposed while it could not reach its API server would clear its
		// successor's Lease, and a restarted process could then grab it back.
		return fmt.Errorf("not releasing the gateway Lease: it is no longer held by %s", l.Identity())
	}
	if err := f(ctx, ler); err != nil {
		return err
	}
	l.leading = ler.HolderIdentity == l.Identity()
	return nil
}

func (l *trackingLock) isLeading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leading
}

// cancelUnlessLeading calls cancel unless the elector holds the Lease, and tells whether it
// did. Cancelling the elector while it acquires would make it release the Lease it just got.
func (l *trackingLock) cancelUnlessLeading(cancel func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leading {
		return false
	}
	cancel()
	return true
}

// serveLiveness accepts connections on l and closes them at once until ctx is done; the
// kernel completes the handshake, so a standby's connect succeeds while this process lives
// (even when it is too busy to be scheduled) and is refused as soon as it dies.
func serveLiveness(ctx context.Context, l net.Listener, log logr.Logger) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		log.Info("Serving liveness for standby gateways", "address", l.Addr().String())
		for {
			c, err := l.Accept()
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
					return
				}
				// Out of file descriptors and the like: an alive gateway must keep answering.
				log.Error(err, "Accepting a liveness probe; retrying")
				time.Sleep(50 * time.Millisecond)
				continue
			}
			_ = c.Close()
		}
	}()
	go func() {
		<-ctx.Done()
		_ = l.Close()
	}()
	return func() { <-done }
}
