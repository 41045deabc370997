package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/drivers"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/metricsserver"
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

// errLostLease is what elect returns when another gateway took the Lease: Run then stands by
// again (a later active term creates a new driver, with a fresh key pair).
var errLostLease = errors.New("lost the gateway lease to another node")

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
	// SilentClusterTTL is how long a cluster's heartbeat Lease may go unrenewed (beyond its
	// lease duration) before this gateway tears its tunnel down (silence.go). Optional:
	// DefaultSilentClusterTTL; a negative value keeps silent clusters' tunnels.
	SilentClusterTTL time.Duration
	// NewDriver creates the tunnel driver on becoming active. Optional: drivers.New.
	NewDriver func(backend string, o tunnel.Options) (tunnel.Driver, error)
	// NewProber creates the health prober on becoming active. Optional: without it the
	// connection state comes from the driver's handshakes alone.
	NewProber func() (Prober, error)
	// NewUnderlayProber creates, on becoming active, what measures the underlay path to each
	// remote gateway (underlay.go: NewPathProber). Optional: without it connections carry no
	// underlay measurement.
	NewUnderlayProber func(tunnelPort uint16, device string, backend v1alpha1.Backend) (UnderlayProber, error)
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
	// HandoverGrace bounds how long a stopping active gateway keeps its tunnels up until a
	// successor has published the Peer (handover.go). Optional: DefaultHandoverGrace; negative
	// closes them at once.
	HandoverGrace time.Duration
	// NewNAT opens the globalnet NAT of the node (a globalnet cluster's active gateway
	// translates; every other gateway deletes what an earlier active term left). Optional:
	// nftables in the process's network namespace (nat.New).
	NewNAT func() (NATWriter, error)
	// NewIngressFilter opens the tunnel ingress filter of the node (ingress.go): what may come
	// out of the tunnel, and from where vxlan is accepted. Optional: nftables in the
	// process's network namespace (ingressfilter.New).
	NewIngressFilter func() (IngressWriter, error)
	// Log receives what the gateway does. Optional.
	Log logr.Logger
}

// Prober measures the connection to each remote gateway (package datapath/health behind an
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
	if o.SilentClusterTTL == 0 {
		o.SilentClusterTTL = DefaultSilentClusterTTL
	}
	if o.HandoverGrace == 0 {
		o.HandoverGrace = DefaultHandoverGrace
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
		o.NewDriver = drivers.New
	}
	if o.AddressDevice == nil {
		o.AddressDevice = ensureAddr
	}
	if o.NewNAT == nil {
		o.NewNAT = newNAT
	}
	if o.NewIngressFilter == nil {
		o.NewIngressFilter = newIngressFilter
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	return nil
}

// Run waits for the cluster's hub credential, then takes part in the election of the active
// gateway through the GatewayLeaseName Lease in octopus-system (the hub's gateway: HubGatewayLeaseName in
// the hub namespace), with fast takeover when LivenessPort is set. While active it runs the gateway
// (see active); when another gateway takes the Lease it stands by again. It returns nil when ctx
// is done, and the active gateway's error when that failed.
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
	if err == nil {
		err = reg.Register(newDeviceCollector(o.Device))
	}
	if err != nil {
		return fmt.Errorf("registering the gateway's metrics: %w", err)
	}
	m.setActive(false)
	ready := &readiness{}
	if o.MetricsListener != nil {
		srvCtx, stop := context.WithCancel(ctx)
		// The gateway's controllers (kube.SingleKeyController) record their reconcile errors
		// and latency in controller-runtime's registry: /metrics serves it beside the
		// gateway's own (which also receives the handler's metrics).
		served := struct {
			prometheus.Registerer
			prometheus.Gatherer
		}{reg, prometheus.Gatherers{reg, metricsserver.Prefixed{Gatherer: ctrlmetrics.Registry, Prefixes: []string{"controller_runtime_", "workqueue_"}}}}
		mux := http.NewServeMux()
		mux.Handle("/metrics", metricsserver.Handler(served))
		mux.Handle("/readyz", ready)
		wait := metricsserver.ServeHTTP(srvCtx, o.MetricsListener, mux, "metrics and readiness", o.Log)
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
	locate := nodeInternalIP(cs)
	if o.Role == v1alpha1.PeerRoleHub {
		locate = hubPeerEndpoint(member, at.Namespace)
	}
	e := election{lock: rl, cs: cs, locate: locate, leaseNamespace: at.leaseNamespace, leaseName: at.leaseName, ready: ready}
	procCtx := ctx
	lead := func(ctx context.Context) error {
		o.Log.Info("Became the active gateway", "node", o.NodeName, "cluster", at.ClusterID, "role", o.Role)
		m.setActive(true)
		defer m.setActive(false)
		return (&active{o: o, at: at, member: member, metrics: m, process: procCtx}).run(ctx)
	}
	for {
		err := elect(ctx, o, e, lead)
		if !errors.Is(err, errLostLease) {
			return err
		}
		// The active term is over: its driver is closed (device, routes and nft table gone).
		// Standing by again in this process, rather than exiting for a restart, keeps the node
		// a standby: a pod's restart waits out the kubelet's crash-loop back-off (10 s,
		// doubling with every lost Lease up to 5 min), during which a failure of the new
		// active gateway would find no standby here to take over.
		o.Log.Info("Standing by again after losing the gateway Lease", "node", o.NodeName)
	}
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
	// The controller renews the credential before it expires and stores the new token in the
	// Secret; the gateway follows it there, so its clients never send an expired token.
	live := hubaccess.NewLive(cred)
	go live.Follow(logr.NewContext(ctx, o.Log), member, 0)
	return hubAccess{ClusterID: cred.ClusterID, Namespace: cred.Namespace, config: live.RESTConfig(),
		leaseNamespace: v1alpha1.SystemNamespace, leaseName: v1alpha1.GatewayLeaseName}, nil
}
