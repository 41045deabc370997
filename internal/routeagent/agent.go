package routeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/route"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/metricsserver"
)

// DefaultResyncInterval is how often the agent re-applies its routes without an event, which
// re-reads the kernel and so repairs routes someone deleted.
const DefaultResyncInterval = 30 * time.Second

// retryInterval spaces attempts after a failed Apply.
const retryInterval = time.Second

// Routes is what the agent needs of route.Table; tests pass a fake.
type Routes interface {
	Apply(desired []route.Route) error
}

var _ Routes = (*route.Table)(nil)

// Options configure Run.
type Options struct {
	// Member is the member cluster's client configuration. Required.
	Member *rest.Config
	// NodeName is the node the agent runs on. Required.
	NodeName string
	// Routes applies the desired routes. Optional: a route.Table with the route agent's
	// markers (internal/datapath/owner) in the process's network namespace.
	Routes Routes
	// ResyncInterval: see DefaultResyncInterval. Optional.
	ResyncInterval time.Duration
	// Log receives what the agent does. Optional.
	Log logr.Logger
	// MetricsListener is where Run serves controller-runtime's registry (the route agent's
	// metrics and its controller's) at /metrics until it returns; Run closes it. Optional:
	// without it there is no metrics endpoint.
	MetricsListener net.Listener
	// HealthListener is where Run answers /healthz and /readyz (ready once the node's routes
	// were applied, until an Apply fails) until it returns; Run closes it. Optional.
	HealthListener net.Listener
	// DaemonSet names the DaemonSet in octopus-system that runs the agent, if one does: its
	// deletion says the agent stops for good (removal.go). Optional.
	DaemonSet string
}

// Run keeps the node's routes to remote clusters pointing at the active gateway until ctx is
// done. It watches the gateway Lease, the subnets ConfigMap and the Nodes (for the holder's
// address) and re-applies on every change and every ResyncInterval (a controller-runtime
// reconciler, kube.SingleKeyController). On return the routes stay, so that traffic keeps
// flowing while the agent restarts, unless Octopus is being removed from the cluster
// (removal.go), when they are withdrawn.
func Run(ctx context.Context, o Options) error {
	ls := metricsserver.Listeners{Metrics: o.MetricsListener, Health: o.HealthListener}
	if err := registerMetrics(); err != nil {
		ls.Close()
		return err
	}
	h := newHealth()
	defer ls.ServeBoth(ctx, ctrlmetrics.Registry, h.handler(), o.Log)()
	if o.Member == nil || o.NodeName == "" {
		return errors.New("route agent: the member configuration and the node name are required")
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = DefaultResyncInterval
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	if o.Routes == nil {
		table, err := route.NewTable(route.TableOptions{Protocol: owner.RouteAgentProtocol, Metric: owner.RouteAgentMetric, Log: o.Log})
		if err != nil {
			return fmt.Errorf("route agent: %w", err)
		}
		defer table.Close()
		o.Routes = table
	}
	byName := func(name string) cache.ByObject {
		return cache.ByObject{
			Namespaces: map[string]cache.Config{v1alpha1.SystemNamespace: {}},
			Field:      fields.OneTermEqualSelector("metadata.name", name),
		}
	}
	c, err := cache.New(o.Member, cache.Options{
		Scheme: kube.Scheme,
		ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: byName(v1alpha1.GatewayLeaseName),
			&corev1.ConfigMap{}:     byName(v1alpha1.GatewayConfigMapName),
		},
	})
	if err != nil {
		return fmt.Errorf("creating the route agent's cache of the member cluster: %w", err)
	}
	o.Log.Info("Route agent starting", "node", o.NodeName)
	err = kube.SingleKeyController{
		Name:       "route-agent",
		Cache:      c,
		Watches:    []kube.Watch{{Object: &coordinationv1.Lease{}}, {Object: &corev1.ConfigMap{}}, {Object: &corev1.Node{}}},
		Trigger:    routesRequest,
		Reconciler: &reconciler{o: o, cache: c, health: h},
		Log:        o.Log.WithName("controller"),
	}.Run(ctx)
	if err != nil {
		return fmt.Errorf("route agent: watching the member cluster: %w", err)
	}
	withdrawIfRemoved(o)
	return nil
}

// routesRequest is the agent's one request: the node's routes as a whole.
var routesRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "routes"}}

// reconciler applies the routes the cache implies.
type reconciler struct {
	o     Options
	cache client.Reader
	// last is what was applied last, to log changes only.
	last []route.Route
	// health reports each Apply's outcome to the readiness probe.
	health *health
}

// Reconcile applies the desired routes. Errors are logged and retried after a fixed
// retryInterval rather than returned to controller-runtime's exponential back-off: routes
// that could not be set must be retried promptly however often it failed before.
func (r *reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	desired, err := desiredFromCache(ctx, r.cache, r.o.NodeName)
	if err != nil {
		r.o.Log.Error(err, "Reading the active gateway and remote subnets; applying what could be read")
	}
	if err := r.o.Routes.Apply(desired); err != nil {
		r.health.set(fmt.Errorf("applying the node's routes: %w", err))
		applyFailures.Inc()
		r.o.Log.Error(err, "Applying routes to remote clusters failed; retrying", "retryIn", retryInterval.String())
		return reconcile.Result{RequeueAfter: retryInterval}, nil
	}
	r.health.set(nil)
	routesApplied.Set(float64(len(desired)))
	if !slices.Equal(r.last, desired) {
		r.o.Log.Info("Routes to remote clusters applied", "routes", fmt.Sprint(desired))
		r.last = desired
	}
	return reconcile.Result{RequeueAfter: r.o.ResyncInterval}, nil
}

// desiredFromCache reads the gateway Lease, the ConfigMap and the active gateway's Node: the
// one the ConfigMap names, else the Lease holder (contract.go). A missing object means no
// routes (not joined yet, or left: the namespace is gone).
func desiredFromCache(ctx context.Context, c client.Reader, self string) ([]route.Route, error) {
	var errs []error
	lease := &coordinationv1.Lease{}
	var gw Gateway
	if err := c.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayLeaseName}, lease); err != nil {
		if !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	} else if lease.Spec.HolderIdentity != nil {
		gw.Node = *lease.Spec.HolderIdentity
	}
	cm := &corev1.ConfigMap{}
	var subnets []netip.Prefix
	if err := c.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayConfigMapName}, cm); err != nil {
		if !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	} else {
		var err error
		subnets, err = ParseSubnets(cm)
		errs = append(errs, err)
		// The gateway the ConfigMap names can forward (its tunnels are up): routes move to a
		// new Lease holder only once it wrote itself here. Before that, during a handover,
		// the old one still forwards (it keeps its tunnels until the new one published its
		// Peer), and after a crash the new one could not forward yet anyway.
		if named := ActiveGateway(cm); named != "" {
			gw.Node = named
		}
	}
	if gw.Node != "" && gw.Node != self {
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: gw.Node}, node); err != nil {
			errs = append(errs, fmt.Errorf("reading the active gateway's node %s: %w", gw.Node, err))
		} else {
			gw.Addrs = InternalIPs(node)
		}
	}
	return Desired(self, gw, subnets), errors.Join(errs...)
}

// InternalIPs returns the node's first IPv4 and first IPv6 InternalIP, IPv4 first, either
// absent when the node has none of that family: the next hops of the remote CIDRs of each
// family.
func InternalIPs(node *corev1.Node) []netip.Addr {
	var v4, v6 netip.Addr
	for _, a := range node.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		switch ip = ip.Unmap(); {
		case ip.Is4() && !v4.IsValid():
			v4 = ip
		case ip.Is6() && !v6.IsValid():
			v6 = ip
		}
	}
	var out []netip.Addr
	for _, a := range []netip.Addr{v4, v6} {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}
