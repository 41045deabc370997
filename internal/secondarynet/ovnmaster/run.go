package ovnmaster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
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
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
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
	// Global is the cluster's global CIDR laid out (globalnet.ClusterLayout), nil when it has
	// none: each Vpc's gateway gets an external address from its pool (VpcExternalIPs).
	Global *globalip.Layout
	// GlobalPool is the hub's globalnet pool, where every cluster's global CIDR is (invalid:
	// unknown). VPC pods route it through their VPC's router (podnet.VpcAttachment.Routes),
	// so that what they send to other clusters' global addresses leaves by the VPC's gateway.
	GlobalPool netip.Prefix
	Log        logr.Logger
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
		Metrics:                       metricsserver.Options{BindAddress: kube.MetricsBindAddress(o.MetricsBindAddress)},
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
		// A namespace bound to a Vpc, or freed, moves its pods without an address.
		Watches(&v1alpha1.Vpc{}, toNetwork, builder.WithPredicates(vpcChange)).
		// One worker: there is one request, the whole network. Controller names are checked
		// process-wide; a process runs one ovnmaster, but tests restart it within theirs.
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, SkipNameValidation: ptr.To(true), RateLimiter: retryLimiter()}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("creating the ovnmaster controller: %w", err)
	}
	if err := addVpcController(mgr, nb, o); err != nil {
		return err
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

// vpcExternalIPChange keeps a Vpc's change of external address: another Vpc may have met it.
var vpcExternalIPChange = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	DeleteFunc: func(event.DeleteEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, okOld := e.ObjectOld.(*v1alpha1.Vpc)
		n, okNew := e.ObjectNew.(*v1alpha1.Vpc)
		return okOld && okNew && !equality.Semantic.DeepEqual(o.Status.Gateway, n.Status.Gateway)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// heldAddressChange keeps the GlobalIngressIP and GlobalEgressIP events that change which
// addresses of the pool they hold: created, deleted, or their status's addresses changed.
var heldAddressChange = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		switch o := e.ObjectOld.(type) {
		case *v1alpha1.GlobalIngressIP:
			n, ok := e.ObjectNew.(*v1alpha1.GlobalIngressIP)
			return !ok || o.Status.IP != n.Status.IP
		case *v1alpha1.GlobalEgressIP:
			n, ok := e.ObjectNew.(*v1alpha1.GlobalEgressIP)
			return !ok || !slices.Equal(o.Status.AllocatedIPs, n.Status.AllocatedIPs)
		}
		return true
	},
}

// vpcChange keeps the Vpc updates that can move pods, OVN rows or external addresses: spec
// (generation), deletion and the external address in the status, not the conditions the
// VpcReconciler writes.
var vpcChange = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	oldVpc, okOld := e.ObjectOld.(*v1alpha1.Vpc)
	newVpc, okNew := e.ObjectNew.(*v1alpha1.Vpc)
	// An external address taken or let go changes what the others may get (VpcExternalIPs).
	addressMoved := okOld && okNew && !equality.Semantic.DeepEqual(oldVpc.Status.Gateway, newVpc.Status.Gateway)
	return addressMoved || e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
		e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
}}

// lazyNB connects to the NB database on first use, and again after a failed connect.
// Once connected, the client reconnects by itself.
type lazyNB struct {
	opts ovn.Options
	mu   sync.Mutex
	c    *ovn.Client
}

// client is the connected client, connecting first if need be. The lock is held only for
// that: the client is safe for concurrent use, and the network and the VPCs apply at once.
func (l *lazyNB) client(ctx context.Context) (*ovn.Client, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c == nil {
		c, err := ovn.Connect(ctx, l.opts)
		if err != nil {
			return nil, err
		}
		l.c = c
	}
	return l.c, nil
}

func (l *lazyNB) Apply(ctx context.Context, n ovn.Network) (ovn.Result, error) {
	c, err := l.client(ctx)
	if err != nil {
		return ovn.Result{}, err
	}
	return c.Apply(ctx, n)
}

func (l *lazyNB) ApplyVpc(ctx context.Context, v ovn.Vpc) (ovn.VpcResult, error) {
	c, err := l.client(ctx)
	if err != nil {
		return ovn.VpcResult{}, err
	}
	return c.ApplyVpc(ctx, v)
}

func (l *lazyNB) DeleteVpc(ctx context.Context, clusterID, vpc string) error {
	c, err := l.client(ctx)
	if err != nil {
		return err
	}
	return c.DeleteVpc(ctx, clusterID, vpc)
}

func (l *lazyNB) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil {
		l.c.Close()
	}
}

// addVpcController registers the VpcReconciler. Its requests are Vpc names: a Vpc's change
// asks for every Vpc (a namespace it takes or frees may settle another's conflict), so does
// the active gateway's change (every VPC's gateway port follows it), a pod's
// for the Vpcs it concerns (vpcsOf), a VpcNatTunnel's or VpcDnsForward's for the Vpc it names
// (their deletion may let a deleted Vpc go).
func addVpcController(mgr manager.Manager, nb VpcApplier, o Options) error {
	c := mgr.GetClient()
	gatewayCM, gatewayLs := o.gatewaySources()
	r := &VpcReconciler{
		Client: c, NB: nb, ClusterID: o.ClusterID, GatewayConfigMap: gatewayCM, GatewayLease: gatewayLs, Global: o.Global,
		GlobalPool: o.GlobalPool,
		Events:     mgr.GetEventRecorder("octopus-ovnmaster"), Log: o.Log.WithName("vpc"),
	}
	allVpcs := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var vpcs v1alpha1.VpcList
		if err := c.List(ctx, &vpcs); err != nil {
			r.Log.Error(err, "Listing Vpcs to requeue them")
			return nil
		}
		reqs := make([]reconcile.Request, len(vpcs.Items))
		for i := range vpcs.Items {
			reqs[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: vpcs.Items[i].Name}}
		}
		return reqs
	})
	podVpcs := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil
		}
		var vpcs v1alpha1.VpcList
		if err := c.List(ctx, &vpcs); err != nil {
			r.Log.Error(err, "Listing Vpcs to find a pod's")
			return nil
		}
		bound, _ := Bindings(vpcs.Items)
		return vpcsOf(pod, bound)
	})
	named := func(name func(client.Object) string) handler.EventHandler {
		return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name(obj)}}}
		})
	}
	err := builder.ControllerManagedBy(mgr).Named("vpc").
		Watches(&v1alpha1.Vpc{}, allVpcs, builder.WithPredicates(predicate.Or(vpcChange, vpcExternalIPChange))).
		// Their addresses share the pool with the VPC gateways' (a clash moves the younger).
		Watches(&v1alpha1.GlobalIngressIP{}, allVpcs, builder.WithPredicates(heldAddressChange)).
		Watches(&v1alpha1.GlobalEgressIP{}, allVpcs, builder.WithPredicates(heldAddressChange)).
		Watches(&corev1.Pod{}, podVpcs, builder.WithPredicates(relevantPodChange)).
		Watches(&v1alpha1.VpcNatTunnel{}, named(func(o client.Object) string { return o.(*v1alpha1.VpcNatTunnel).Spec.NatGwDp })).
		Watches(&v1alpha1.VpcDnsForward{}, named(func(o client.Object) string { return o.(*v1alpha1.VpcDnsForward).Spec.Vpc })).
		// The active gateway moving moves every VPC's gateway port with the cluster's, on the
		// same events (renewals and mirrored subnets dropped).
		Watches(&coordinationv1.Lease{}, allVpcs, builder.WithPredicates(holderChange)).
		Watches(&corev1.ConfigMap{}, allVpcs, builder.WithPredicates(namedGatewayChange)).
		// Two workers: VPCs are independent in OVN (ApplyVpc guards each), and a VPC's pods
		// wait on their own Vpc only. A request is never run twice at once.
		WithOptions(controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: ptr.To(true), RateLimiter: retryLimiter()}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("creating the Vpc controller: %w", err)
	}
	return nil
}

// maxRetryDelay bounds the wait before a failed request is tried again.
const maxRetryDelay = 5 * time.Second

// retryLimiter is controller-runtime's default rate limiter with the per-request backoff capped
// at maxRetryDelay instead of 1000 s. A request fails while the NB database is out of reach
// (a restart of its pod, a failover), each failure doubling the wait; with no event to bring
// it back earlier, a Vpc stayed Ready=False, ApplyFailed, for over a minute after the database
// had returned (TestSecondaryNetwork's VPCs, after its restarts). The overall bucket (10 per
// second, bursts of 100) stays, so a database down for long costs a retry every few seconds per
// request, not a storm.
func retryLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
