package ovnmaster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sync"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/ipam/hostaddr"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// LeaderElectionID is the ovnmaster's leader-election Lease: one replica writes the NB
// database, because two would keep re-planning against each other's writes (the data plane's
// transaction guard keeps them from handing out an address twice, not from wasting work).
const LeaderElectionID = "octopus-ovnmaster"

// DefaultMetricsPort is where `octopus-ovn master` serves controller-runtime's metrics (its
// reconcile errors and latency) unless told otherwise; next to the agent's ports (see
// docs/architecture.md §6j).
const DefaultMetricsPort = 9476

// Options configure Run.
type Options struct {
	// Member is the client configuration of the member cluster (required).
	Member *rest.Config
	// ClusterID and CIDR are the cluster's ID and its secondary block (required).
	ClusterID string
	CIDR      netip.Prefix
	// NBEndpoint is the OVN NB database, "unix:/path", "tcp:host:port" or "ssl:host:port"
	// (required).
	NBEndpoint string
	// NBTLS is the client's TLS configuration with its certificate, required with "ssl:"
	// (ovn.Options.TLS).
	NBTLS *tls.Config
	// LeaderElection makes replicas elect one active ovnmaster through the LeaderElectionID
	// Lease in LeaderElectionNamespace.
	LeaderElection          bool
	LeaderElectionNamespace string
	// HealthProbeBindAddress and MetricsBindAddress are the manager's listen addresses; "0"
	// or "" turns them off.
	HealthProbeBindAddress, MetricsBindAddress string
	// Interconnect says the cluster is an OVN-IC availability zone: its interconnection router
	// (internal/secondarynet/icmaster) takes the block's gateway address on the switch, the
	// address pods route other clusters' blocks through, so the ovnmaster makes no gateway
	// port there (and removes one it made): two ports answering for one address would split
	// the pods' traffic between the router and the tunnel gateway.
	Interconnect bool
	Log          logr.Logger
}

// gatewaySources are where the reconciler reads the active gateway's node from; none in
// interconnect mode, which makes the network's GatewayChassis empty (no gateway port).
func (o Options) gatewaySources() (configMap, lease types.NamespacedName) {
	if o.Interconnect {
		return types.NamespacedName{}, types.NamespacedName{}
	}
	return gatewayConfigMap, gatewayLease
}

func (o Options) validate() error {
	var errs []error
	if o.Member == nil {
		errs = append(errs, errors.New("no member cluster configuration"))
	}
	if o.ClusterID == "" {
		errs = append(errs, errors.New("the cluster ID is required"))
	}
	if _, err := hostaddr.NewBlock(o.CIDR); err != nil {
		errs = append(errs, fmt.Errorf("secondary CIDR: %w", err))
	}
	if o.NBEndpoint == "" {
		errs = append(errs, errors.New("the OVN NB database endpoint is required"))
	}
	if o.LeaderElection && o.LeaderElectionNamespace == "" {
		errs = append(errs, errors.New("leader election needs a namespace"))
	}
	return errors.Join(errs...)
}

// Run runs the ovnmaster until ctx is cancelled. It connects to the NB database only once it
// leads, and again whenever the connection was never made: an unreachable database is an
// error on the pods waiting for an address, not a reason to exit.
func Run(ctx context.Context, o Options) error {
	if err := o.validate(); err != nil {
		return fmt.Errorf("ovnmaster: %w", err)
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	mgr, err := manager.New(o.Member, manager.Options{
		Scheme: kube.Scheme,
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			// Of the Leases and ConfigMaps, only the gateway's: the role may read nothing else
			// (and the manager's own election Lease is read by its lock, not through this cache).
			ByObject: map[client.Object]cache.ByObject{
				&coordinationv1.Lease{}: byName(gatewayLease),
				&corev1.ConfigMap{}:     byName(gatewayConfigMap),
			},
		},
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsBindAddress},
		HealthProbeBindAddress:        o.HealthProbeBindAddress,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Logger:                        o.Log,
	})
	if err != nil {
		return fmt.Errorf("creating the ovnmaster's manager: %w", err)
	}
	if err := kube.AddPingProbes(mgr, o.HealthProbeBindAddress); err != nil {
		return err
	}
	nb := &lazyNB{opts: ovn.Options{Endpoint: o.NBEndpoint, TLS: o.NBTLS, Log: o.Log.WithName("nb")}}
	defer nb.Close()
	gatewayCM, gatewayLs := o.gatewaySources()
	r := &Reconciler{
		Client: mgr.GetClient(), NB: nb, ClusterID: o.ClusterID, CIDR: o.CIDR,
		GatewayConfigMap: gatewayCM, GatewayLease: gatewayLs,
		Events: mgr.GetEventRecorder("octopus-ovnmaster"), Log: o.Log,
	}
	toNetwork := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{networkRequest}
	})
	err = builder.ControllerManagedBy(mgr).Named("ovnmaster").
		Watches(&corev1.Pod{}, toNetwork, builder.WithPredicates(relevantPodChange)).
		// A takeover (or a release) moves the gateway's port while the ConfigMap names no
		// node; renewals, every few seconds, change nothing and are dropped.
		Watches(&coordinationv1.Lease{}, toNetwork, builder.WithPredicates(holderChange)).
		// A gateway naming itself moves the port; the remote subnets it mirrors there too do
		// not concern the secondary network and are dropped.
		Watches(&corev1.ConfigMap{}, toNetwork, builder.WithPredicates(namedGatewayChange)).
		// One worker: there is one request, the whole network. Controller names are checked
		// process-wide; a process runs one ovnmaster, but tests restart it within theirs.
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, SkipNameValidation: ptr.To(true)}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("creating the ovnmaster controller: %w", err)
	}
	return mgr.Start(ctx)
}

// relevantPodChange drops pod updates that cannot change the network: most are status
// updates (conditions, container states) that leave annotations and phase alone.
var relevantPodChange = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	oldPod, ok1 := e.ObjectOld.(*corev1.Pod)
	newPod, ok2 := e.ObjectNew.(*corev1.Pod)
	if !ok1 || !ok2 {
		return true
	}
	return oldPod.Status.Phase != newPod.Status.Phase || !maps.Equal(oldPod.Annotations, newPod.Annotations)
}}

// gatewayLease is the Lease electing the cluster's active gateway.
var gatewayLease = types.NamespacedName{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayLeaseName}

// gatewayConfigMap is where the active gateway names its node once it forwards.
var gatewayConfigMap = types.NamespacedName{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayConfigMapName}

// byName caches the one object named key: the role grants it by name (a list or watch is
// authorized by name only with a metadata.name field selector).
func byName(key types.NamespacedName) cache.ByObject {
	return cache.ByObject{
		Namespaces: map[string]cache.Config{key.Namespace: {}},
		Field:      fields.OneTermEqualSelector("metadata.name", key.Name),
	}
}

// holderChange keeps the Lease updates that change its holder.
var holderChange = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	oldLease, ok1 := e.ObjectOld.(*coordinationv1.Lease)
	newLease, ok2 := e.ObjectNew.(*coordinationv1.Lease)
	if !ok1 || !ok2 {
		return true
	}
	return ChassisOf(oldLease) != ChassisOf(newLease)
}}

// namedGatewayChange keeps the ConfigMap updates that change the node it names.
var namedGatewayChange = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	oldCM, ok1 := e.ObjectOld.(*corev1.ConfigMap)
	newCM, ok2 := e.ObjectNew.(*corev1.ConfigMap)
	if !ok1 || !ok2 {
		return true
	}
	return NamedGateway(oldCM) != NamedGateway(newCM)
}}

// lazyNB connects to the NB database on first use, and again after a failed connect.
// Once connected, the client reconnects by itself.
type lazyNB struct {
	opts ovn.Options
	mu   sync.Mutex
	c    *ovn.Client
}

func (l *lazyNB) Apply(ctx context.Context, n ovn.Network) (ovn.Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c == nil {
		c, err := ovn.Connect(ctx, l.opts)
		if err != nil {
			return ovn.Result{}, err
		}
		l.c = c
	}
	return l.c.Apply(ctx, n)
}

func (l *lazyNB) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil {
		l.c.Close()
	}
}
