package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/route/routeagent"
	"github.com/octopus-mcs/octopus/internal/tunnel"
)

// Defaults of Options.
const (
	DefaultListenPort     = 4500
	DefaultLeaseDuration  = 15 * time.Second
	DefaultRenewDeadline  = 10 * time.Second
	DefaultRetryPeriod    = 2 * time.Second
	DefaultStatusInterval = 5 * time.Second
	DefaultResyncInterval = 30 * time.Second
	DefaultDevice         = "octopus0"

	credentialPollInterval = 2 * time.Second
	retryInterval          = time.Second
)

// ErrLostLease is returned by Run when another gateway took the Lease: the process should
// exit and restart, which gives it a fresh key pair and puts it back into the election.
var ErrLostLease = errors.New("lost the gateway lease to another node")

// Options configure Run. Durations left zero get the Default* values.
type Options struct {
	// Member is the member cluster's client configuration. Required.
	Member *rest.Config
	// NodeName is the node this gateway runs on; it is the Lease identity. Required.
	NodeName string
	// Role is v1alpha1.PeerRoleHub for the hub's gateway, which runs against the hub itself
	// (Member is then the hub's configuration), publishes the Peer v1alpha1.HubPeerName and
	// forwards between the clusters of the hub topology. Optional: a member's gateway.
	Role v1alpha1.PeerRole
	// HubNamespace is the hub namespace, for the hub's gateway only. Optional,
	// v1alpha1.DefaultHubNamespace.
	HubNamespace string
	// Backend is the tunnel driver. Required.
	Backend v1alpha1.Backend
	// ListenPort is the tunnel's UDP port. Optional, DefaultListenPort.
	ListenPort uint16
	// Device names the tunnel link; unique per machine. Optional, DefaultDevice.
	Device string
	// EndpointIP is the address other gateways reach this one at. Optional: the Node's
	// ExternalIP, else its InternalIP.
	EndpointIP netip.Addr
	// HealthCheckIP is the address in this cluster's pod CIDR that other gateways probe; the
	// gateway puts it on its tunnel device, which also makes it the source of the node's own
	// traffic into the tunnel. Optional: the first host of the Node's pod CIDR (the address a
	// bridge CNI gives the node).
	HealthCheckIP netip.Addr
	// ExcludeSubnets are not advertised (the per-cluster opt-out).
	ExcludeSubnets []netip.Prefix
	// MTU of the tunnel; 0 lets the driver derive it from the underlay.
	MTU int
	// Leader election timing; see client-go's leaderelection.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// StatusInterval is how often the Peer's status is refreshed (only written when changed).
	StatusInterval time.Duration
	// ResyncInterval re-applies the tunnel configuration without an event.
	ResyncInterval time.Duration
	// NewDriver creates the tunnel driver on becoming active. Optional: tunnel.New.
	NewDriver func(backend string, o tunnel.Options) (tunnel.Driver, error)
	// NewProber creates the health prober on becoming active. Optional: without it the
	// connection state comes from the driver's handshakes alone.
	NewProber func() (Prober, error)
	// AddressDevice puts the health-check address on the tunnel device. Optional: netlink in
	// the process's namespace (tests, which run no real device, record it instead).
	AddressDevice func(device string, addr netip.Addr) error
	// MetricsListener is where Run serves Prometheus metrics at /metrics (metrics.go) until
	// it returns; Run closes it. Optional: without it there is no metrics endpoint.
	MetricsListener net.Listener
	// LivenessListener is where Run accepts the standbys' liveness probes (takeover.go) until
	// it returns; Run closes it. Optional: without it standbys cannot tell that this gateway
	// is alive, so they take over once it stops renewing for TakeoverAfter.
	LivenessListener net.Listener
	// LivenessPort is the port a standby probes on the Lease holder's node InternalIP (the
	// hub's gateway: its Peer's endpoint address) for a fast takeover (takeover.go). Optional: 0 turns fast takeover off, and a standby waits
	// for the Lease to expire.
	LivenessPort uint16
	// LivenessInterval is how often a standby probes the holder; LivenessFailures
	// consecutive failed probes are needed. Optional: DefaultLivenessInterval and
	// DefaultLivenessFailures.
	LivenessInterval time.Duration
	LivenessFailures int
	// TakeoverAfter is how long the Lease must go unrenewed, as well, before a standby takes
	// it over. It must exceed RetryPeriod, the active's renew cadence. Optional: 2 ×
	// RetryPeriod.
	TakeoverAfter time.Duration
	// Log receives what the gateway does. Optional.
	Log logr.Logger
}

// Prober measures the connection to each remote gateway (package tunnel/health behind an
// adapter). Snapshot is keyed by cluster ID.
type Prober interface {
	SetTargets(targets map[string]netip.Addr)
	Snapshot() map[string]ProbeStats
	Close() error
}

// ProbeStats is one target's health as the gateway reports it.
type ProbeStats struct {
	// Up is false once 3 probe intervals pass without an answer.
	Up bool
	// Answered tells whether any probe was ever answered.
	Answered            bool
	Last, Min, Avg, Max time.Duration
	LossPercent         int
}

func (o *Options) setDefaults() error {
	if o.Member == nil || o.NodeName == "" {
		return errors.New("gateway: the member cluster configuration and the node name are required")
	}
	switch o.Backend {
	case v1alpha1.BackendWireGuard, v1alpha1.BackendVXLAN:
	default:
		return fmt.Errorf("gateway: backend %q: want %s or %s", o.Backend, v1alpha1.BackendWireGuard, v1alpha1.BackendVXLAN)
	}
	if o.ListenPort == 0 {
		o.ListenPort = DefaultListenPort
	}
	if o.Device == "" {
		o.Device = DefaultDevice
	}
	switch o.Role {
	case "", v1alpha1.PeerRoleMember:
		o.Role = v1alpha1.PeerRoleMember
	case v1alpha1.PeerRoleHub:
		if o.HubNamespace == "" {
			o.HubNamespace = v1alpha1.DefaultHubNamespace
		}
	default:
		return fmt.Errorf("gateway: role %q: want %s or %s", o.Role, v1alpha1.PeerRoleMember, v1alpha1.PeerRoleHub)
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.LeaseDuration, DefaultLeaseDuration}, {&o.RenewDeadline, DefaultRenewDeadline}, {&o.RetryPeriod, DefaultRetryPeriod},
		{&o.StatusInterval, DefaultStatusInterval}, {&o.ResyncInterval, DefaultResyncInterval}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if o.LivenessInterval <= 0 {
		o.LivenessInterval = DefaultLivenessInterval
	}
	if o.LivenessFailures <= 0 {
		o.LivenessFailures = DefaultLivenessFailures
	}
	if o.TakeoverAfter <= 0 {
		o.TakeoverAfter = 2 * o.RetryPeriod
	}
	if o.LivenessPort != 0 && o.TakeoverAfter <= o.RetryPeriod {
		// A live active renews every RetryPeriod: a shorter wait could displace it between
		// two renewals.
		return fmt.Errorf("gateway: the takeover wait %s must exceed the retry period %s", o.TakeoverAfter, o.RetryPeriod)
	}
	if o.NewDriver == nil {
		o.NewDriver = tunnel.New
	}
	if o.AddressDevice == nil {
		o.AddressDevice = ensureAddr
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	return nil
}

// Run waits for the cluster's hub credential, then takes part in the election of the active
// gateway through the GatewayLeaseName Lease in octopus-system (the hub's gateway: HubGatewayLeaseName in
// the hub namespace), with fast takeover when LivenessPort is set. While active it runs the gateway
// (see active). It returns nil when ctx is done, and ErrLostLease (or the active gateway's
// error) when it stops being the active one.
func Run(ctx context.Context, o Options) error {
	if err := o.setDefaults(); err != nil {
		for _, l := range []net.Listener{o.MetricsListener, o.LivenessListener} {
			if l != nil {
				_ = l.Close()
			}
		}
		return err
	}
	if o.LivenessListener != nil {
		// Served for the whole Run, standbys included: the Lease identity is the node name,
		// so a live gateway process on the holder's node holds the Lease or gets it back at
		// once (a restarted one re-acquires its own record without waiting).
		srvCtx, stop := context.WithCancel(ctx)
		wait := serveLiveness(srvCtx, o.LivenessListener, o.Log)
		defer wait()
		defer stop()
	}
	// The registry is this Run's own: several gateways may run in one process (tests).
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		return fmt.Errorf("registering the gateway's metrics: %w", err)
	}
	m.setActive(false)
	if o.MetricsListener != nil {
		srvCtx, stop := context.WithCancel(ctx)
		wait := serveMetrics(srvCtx, o.MetricsListener, reg, o.Log)
		defer wait()
		defer stop()
	}
	member, err := client.New(o.Member, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return fmt.Errorf("creating a client of the member cluster: %w", err)
	}
	at, err := o.hubAccess(ctx, member)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	cs, err := kubernetes.NewForConfig(o.Member)
	if err != nil {
		return fmt.Errorf("creating a client of the member cluster: %w", err)
	}
	rl, err := resourcelock.New(resourcelock.LeasesResourceLock, at.leaseNamespace, at.leaseName,
		cs.CoreV1(), cs.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: o.NodeName})
	if err != nil {
		return fmt.Errorf("creating the gateway lease lock: %w", err)
	}
	var activeErr error
	// activeDone is closed when the active gateway has returned (its driver closed): the
	// elector may return first when it fails to renew, and exiting before the driver is
	// closed would leave the device and its routes behind.
	activeDone := make(chan struct{})
	var acquired atomic.Bool
	leCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	lock := &trackingLock{Interface: rl, onDisplaced: func(holder string) {
		// A standby took over while we could not renew (takeover.go): stop now rather than
		// keep acting until RenewDeadline runs out.
		o.Log.Info("Another gateway took the Lease over; stopping being the active gateway", "node", o.NodeName, "holder", holder)
		cancel()
	}}
	var tk *takeover
	if o.LivenessPort != 0 {
		locate := nodeInternalIP(cs)
		if o.Role == v1alpha1.PeerRoleHub {
			locate = hubPeerEndpoint(member, at.Namespace)
		}
		tk = newTakeover(o, cs, locate, lock, at.leaseNamespace, at.leaseName)
		go tk.run(leCtx)
	}
	// Each round runs an elector until it leads or a takeover (or a released Lease) kicks
	// it: client-go retries acquiring only every RetryPeriod plus up to 120 % jitter, while a
	// fresh elector tries at once, and finds itself the holder after a takeover.
	for {
		acqCtx, acqCancel := context.WithCancel(leCtx)
		var kicked atomic.Bool
		if tk != nil {
			tk.setKick(func() {
				lock.cancelUnlessLeading(func() {
					kicked.Store(true) // before the elector can see the cancellation
					acqCancel()
				})
			})
		}
		err := runElector(acqCtx, o, at.leaseName, lock, &acquired, func(ctx context.Context) {
			defer close(activeDone)
			o.Log.Info("Became the active gateway", "node", o.NodeName, "cluster", at.ClusterID, "role", o.Role)
			a := &active{o: o, at: at, member: member, metrics: m}
			m.setActive(true)
			activeErr = a.run(ctx)
			m.setActive(false)
			cancel() // release the Lease so that a standby takes over
		})
		acqCancel()
		if err != nil {
			return err
		}
		if !kicked.Load() || acquired.Load() || leCtx.Err() != nil {
			break
		}
	}
	if tk != nil {
		tk.setKick(nil)
	}
	// The elector runs OnStartedLeading in a goroutine and may return (failing to renew)
	// before it: wait for it whenever it was started. It was, unless we are shutting down:
	// acquiring only stops when leCtx ends (or a kick, which starts another round), which
	// before leadership only ctx does.
	if ctx.Err() == nil || acquired.Load() {
		<-activeDone
	}
	if ctx.Err() != nil {
		return nil
	}
	if activeErr != nil {
		return activeErr
	}
	return ErrLostLease
}

// hubAccess is where the gateway's Peer lives and where it is elected.
type hubAccess struct {
	// ClusterID names the Peer; Namespace is the hub namespace.
	ClusterID, Namespace string
	// config is the hub's client configuration.
	config *rest.Config
	// leaseNamespace and leaseName are the election's Lease, in the cluster the gateway runs in.
	leaseNamespace, leaseName string
}

// hubAccess is, for a member's gateway, the cluster's hub credential (waited for until join
// has stored it) and the Lease in octopus-system; for the hub's gateway, the hub itself.
func (o *Options) hubAccess(ctx context.Context, member client.Reader) (hubAccess, error) {
	if o.Role == v1alpha1.PeerRoleHub {
		return hubAccess{ClusterID: v1alpha1.HubPeerName, Namespace: o.HubNamespace, config: o.Member,
			leaseNamespace: o.HubNamespace, leaseName: v1alpha1.HubGatewayLeaseName}, nil
	}
	cred, err := hubaccess.WaitForCredential(logr.NewContext(ctx, o.Log), member, credentialPollInterval)
	if err != nil {
		return hubAccess{}, err
	}
	return hubAccess{ClusterID: cred.ClusterID, Namespace: cred.Namespace, config: cred.RESTConfig(),
		leaseNamespace: v1alpha1.SystemNamespace, leaseName: v1alpha1.GatewayLeaseName}, nil
}

// runElector runs one client-go elector on lock until ctx ends or it stops leading.
func runElector(ctx context.Context, o Options, name string, lock resourcelock.Interface, acquired *atomic.Bool, lead func(context.Context)) error {
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
		// Hand over at once on a clean shutdown instead of after LeaseDuration.
		ReleaseOnCancel: true,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				acquired.Store(true)
				lead(ctx)
			},
			OnStoppedLeading: func() {
				if acquired.Load() {
					o.Log.Info("Stopped being the active gateway", "node", o.NodeName)
				}
			},
			OnNewLeader: func(id string) {
				if id != o.NodeName {
					o.Log.Info("Standing by: another node is the active gateway", "active", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("configuring the gateway election: %w", err)
	}
	elector.Run(ctx)
	return nil
}

// active is the gateway while it holds the Lease.
type active struct {
	o      Options
	at     hubAccess
	member client.Client
	hub    client.Client
	cache  cache.Cache
	driver tunnel.Driver
	prober Prober
	local  Local
	hcIP   netip.Addr
	// metrics are set from the status that reportStatus computes.
	metrics *metrics

	mu        sync.Mutex
	desired   Desired
	applyErr  error
	published *v1alpha1.PeerSpec
	mirrored  []netip.Prefix
}

// run publishes the Peer, keeps the data plane at the desired state and reports status until
// ctx is done. The driver is closed on return, which tears the tunnels down: the standby that
// takes over brings them up with its own key.
func (a *active) run(ctx context.Context) error {
	o := a.o
	// The Node is read only for what the flags leave out: the hub's gateway may run where
	// the hub has no Node objects.
	node := &corev1.Node{}
	if !o.EndpointIP.IsValid() || !o.HealthCheckIP.IsValid() {
		if err := a.member.Get(ctx, client.ObjectKey{Name: o.NodeName}, node); err != nil {
			return fmt.Errorf("reading this gateway's Node %s: %w (is --node-name right? or pass --endpoint-ip and --health-check-ip)", o.NodeName, err)
		}
	}
	endpoint, hc, err := nodeAddresses(node, o.EndpointIP, o.HealthCheckIP)
	if err != nil {
		return err
	}
	a.hcIP = hc
	a.local = Local{ClusterID: a.at.ClusterID, Role: o.Role, Backend: o.Backend, ListenPort: o.ListenPort, LocalAddr: endpoint, MTU: o.MTU}

	a.driver, err = o.NewDriver(string(o.Backend), tunnel.Options{Device: o.Device, Log: o.Log.WithName("tunnel")})
	if err != nil {
		return fmt.Errorf("creating the %s tunnel driver: %w", o.Backend, err)
	}
	defer func() {
		if err := a.driver.Close(); err != nil {
			o.Log.Error(err, "Closing the tunnel driver")
		}
	}()
	o.Log.Info("Tunnel driver ready", "driver", a.driver.Name(), "device", o.Device, "endpoint", netip.AddrPortFrom(endpoint, o.ListenPort).String(), "healthCheckIP", hc.String())
	if o.NewProber != nil {
		if a.prober, err = o.NewProber(); err != nil {
			return fmt.Errorf("starting the health prober: %w", err)
		}
		defer func() { _ = a.prober.Close() }()
	}

	if a.hub, err = client.New(a.at.config, client.Options{Scheme: kube.Scheme}); err != nil {
		return fmt.Errorf("creating a client of the hub %s: %w", a.at.config.Host, err)
	}
	// The cache's lists and watches wait out a hub that cannot be dialled, so that the Peers
	// catch up as soon as it is back (kube.WaitForServerOnReads); the client's writes and the
	// status read fail fast.
	a.cache, err = cache.New(kube.WaitForServerOnReads(a.at.config), cache.Options{Scheme: kube.Scheme, DefaultNamespaces: map[string]cache.Config{a.at.Namespace: {}}})
	if err != nil {
		return fmt.Errorf("creating the cache of the hub: %w", err)
	}
	kick := make(chan struct{}, 1)
	notify := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	handler := toolscache.ResourceEventHandlerFuncs{AddFunc: func(any) { notify() }, UpdateFunc: func(old, cur any) {
		// Status-only updates (every gateway reports every few seconds) change nothing here.
		if po, ok := old.(*v1alpha1.Peer); ok {
			if pc, ok := cur.(*v1alpha1.Peer); ok && po.Generation == pc.Generation && po.DeletionTimestamp.Equal(pc.DeletionTimestamp) {
				return
			}
		}
		notify()
	}, DeleteFunc: func(any) { notify() }}
	for _, obj := range []client.Object{&v1alpha1.Peer{}, &v1alpha1.Cluster{}} {
		inf, err := a.cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("watching %T on the hub: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("watching %T on the hub: %w", obj, err)
		}
	}
	cacheErr := make(chan error, 1)
	go func() { cacheErr <- a.cache.Start(ctx) }()
	if !a.cache.WaitForCacheSync(ctx) {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("the hub's informers did not sync: %w", drain(cacheErr))
	}

	resync := time.NewTimer(0)
	defer resync.Stop()
	status := time.NewTicker(o.StatusInterval)
	defer status.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-cacheErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("the hub's informers stopped: %w", err)
		case <-kick:
		case <-resync.C:
		case <-status.C:
			if err := a.reportStatus(ctx); err != nil {
				o.Log.Error(err, "Updating the Peer's status")
			}
			continue
		}
		next := o.ResyncInterval
		if err := a.reconcile(ctx); err != nil {
			o.Log.Error(err, "Reconciling the gateway; retrying", "retryIn", retryInterval.String())
			next = retryInterval
		}
		resync.Reset(next)
		if err := a.reportStatus(ctx); err != nil {
			o.Log.Error(err, "Updating the Peer's status")
		}
	}
}

// reconcile applies the tunnel configuration computed from the hub's Peers, publishes our
// Peer and mirrors the remote subnets for the route agents. Everything that can be done is
// done; errors are joined.
func (a *active) reconcile(ctx context.Context) error {
	var errs []error
	if err := a.readLocal(ctx); err != nil {
		return err
	}
	peers := &v1alpha1.PeerList{}
	if err := a.cache.List(ctx, peers); err != nil {
		return fmt.Errorf("listing Peers on the hub: %w", err)
	}
	d := Compute(a.local, peers.Items)
	applyErr := a.driver.Apply(ctx, d.Tunnel)
	if applyErr != nil {
		applyErr = fmt.Errorf("applying the tunnel configuration (%d peers): %w", len(d.Tunnel.Peers), applyErr)
		errs = append(errs, applyErr)
	} else if err := a.o.AddressDevice(a.o.Device, a.hcIP); err != nil {
		errs = append(errs, err)
	}
	// Published only now, with the remote Peers configured: a remote gateway starts its
	// handshake as soon as it sees our (new) key, and one that arrived before our device knew
	// it would be dropped and retried only after WireGuard's 5 s rekey timeout.
	if err := a.publish(ctx); err != nil {
		errs = append(errs, err)
	}
	if a.prober != nil {
		a.prober.SetTargets(d.Targets)
	}
	a.mu.Lock()
	changed := !reflect.DeepEqual(a.desired, d)
	a.desired, a.applyErr = d, applyErr
	a.mu.Unlock()
	if changed {
		var ids []string
		for _, p := range d.Tunnel.Peers {
			ids = append(ids, p.Cluster)
		}
		a.o.Log.Info("Tunnel configuration applied", "peers", ids, "refused", len(d.Refused), "ok", applyErr == nil)
		for _, r := range d.Refused {
			a.o.Log.Info("Refused a Peer", "cluster", r.Cluster, "reason", r.Reason, "message", r.Message)
		}
	}
	remote := d.RemoteSubnets()
	// The hub's gateway has no route agents to tell.
	if applyErr == nil && a.o.Role == v1alpha1.PeerRoleMember && (a.mirrored == nil || !slices.Equal(remote, a.mirrored)) {
		cm := routeagent.SubnetsConfigMap(remote)
		cm.Labels = kube.ManagedLabels()
		if err := kube.Apply(ctx, a.member, cm); err != nil {
			errs = append(errs, fmt.Errorf("mirroring remote subnets for the route agents: %w", err))
		} else {
			a.mirrored = remote
			if a.mirrored == nil {
				a.mirrored = []netip.Prefix{}
			}
		}
	}
	return errors.Join(errs...)
}

// readLocal refreshes what this gateway advertises: a member's pod and service CIDRs (minus
// the opted-out ones) and topology, from its Cluster on the hub; for the hub's gateway, which
// has no cluster behind it, only its health-check address, and the hub topology (the
// Peer's default, mesh, would misreport it).
func (a *active) readLocal(ctx context.Context) error {
	if a.o.Role == v1alpha1.PeerRoleHub {
		a.local.Subnets, a.local.Topology = []netip.Prefix{netip.PrefixFrom(a.hcIP, a.hcIP.BitLen())}, v1alpha1.TopologyHub
		return nil
	}
	c := &v1alpha1.Cluster{}
	if err := a.cache.Get(ctx, client.ObjectKey{Namespace: a.at.Namespace, Name: a.at.ClusterID}, c); err != nil {
		return fmt.Errorf("reading this cluster's Cluster %s on the hub: %w", a.at.ClusterID, err)
	}
	subnets, err := Advertised(c.Spec, a.o.ExcludeSubnets)
	if err != nil {
		return err
	}
	a.local.Subnets, a.local.Topology = subnets, c.Spec.Topology
	return nil
}

// publish server-side-applies this cluster's Peer on the hub when its spec changed.
func (a *active) publish(ctx context.Context) error {
	spec := v1alpha1.PeerSpec{
		ClusterID: a.at.ClusterID, Hostname: a.o.NodeName, Role: a.o.Role, Topology: a.local.Topology,
		Backend: a.o.Backend, PublicKey: a.driver.PublicKey(),
		Endpoint:      v1alpha1.PeerEndpoint{PrivateIP: a.local.LocalAddr.String(), Port: int32(a.local.ListenPort)},
		HealthCheckIP: a.hcIP.String(),
	}
	for _, s := range a.local.Subnets {
		spec.Subnets = append(spec.Subnets, s.String())
	}
	if a.published != nil && reflect.DeepEqual(*a.published, spec) {
		return nil
	}
	p := &v1alpha1.Peer{
		ObjectMeta: metavOf(a.at.ClusterID, a.at.Namespace),
		Spec:       spec,
	}
	if err := kube.Apply(ctx, a.hub, p); err != nil {
		return fmt.Errorf("publishing Peer %s on the hub: %w", a.at.ClusterID, err)
	}
	a.published = &spec
	a.o.Log.Info("Published the Peer", "name", a.at.ClusterID, "publicKey", spec.PublicKey, "subnets", spec.Subnets)
	return nil
}

func drain(ch <-chan error) error {
	select {
	case err := <-ch:
		return err
	default:
		return nil
	}
}
