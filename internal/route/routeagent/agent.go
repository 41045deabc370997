package routeagent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/route"
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
	// Routes applies the desired routes. Required.
	Routes Routes
	// ResyncInterval: see DefaultResyncInterval. Optional.
	ResyncInterval time.Duration
	// Log receives what the agent does. Optional.
	Log logr.Logger
}

// Run keeps the node's routes to remote clusters pointing at the active gateway until ctx is
// done. It watches the gateway Lease, the subnets ConfigMap and the Nodes (for the holder's
// address) through informers and re-applies on every change and every ResyncInterval. On
// return the routes stay: traffic keeps flowing while the agent restarts.
func Run(ctx context.Context, o Options) error {
	if o.Member == nil || o.NodeName == "" || o.Routes == nil {
		return errors.New("route agent: member configuration, node name and route table are required")
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = DefaultResyncInterval
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
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
	kick := make(chan struct{}, 1)
	notify := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}
	for _, obj := range []client.Object{&coordinationv1.Lease{}, &corev1.ConfigMap{}, &corev1.Node{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("watching %T in the member cluster: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("watching %T in the member cluster: %w", obj, err)
		}
	}
	cacheErr := make(chan error, 1)
	go func() { cacheErr <- c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("route agent: the member cluster's informers did not sync: %w", errors.Join(context.Cause(ctx), drain(cacheErr)))
	}
	o.Log.Info("Route agent started", "node", o.NodeName)

	var last []route.Route
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-cacheErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("route agent: the member cluster's informers stopped: %w", err)
		case <-kick:
		case <-timer.C:
		}
		desired, err := desiredFromCache(ctx, c, o.NodeName)
		next := o.ResyncInterval
		if err != nil {
			o.Log.Error(err, "Reading the active gateway and remote subnets; applying what could be read")
		}
		if err := o.Routes.Apply(desired); err != nil {
			o.Log.Error(err, "Applying routes to remote clusters failed; retrying", "retryIn", retryInterval.String())
			next = retryInterval
		} else if !equalRoutes(last, desired) {
			o.Log.Info("Routes to remote clusters applied", "routes", fmt.Sprint(desired))
			last = desired
		}
		timer.Reset(next)
	}
}

// desiredFromCache reads the gateway Lease, the holder's Node and the ConfigMap. A missing
// object means no routes (not joined yet, or left: the namespace is gone).
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
	}
	if gw.Node != "" && gw.Node != self {
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: gw.Node}, node); err != nil {
			errs = append(errs, fmt.Errorf("reading the active gateway's node %s: %w", gw.Node, err))
		} else {
			gw.Addr = InternalIP(node)
		}
	}
	return Desired(self, gw, subnets), errors.Join(errs...)
}

// InternalIP returns the node's first IPv4 InternalIP, else its first InternalIP.
func InternalIP(node *corev1.Node) netip.Addr {
	var first netip.Addr
	for _, a := range node.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		if ip.Is4() {
			return ip
		}
		if !first.IsValid() {
			first = ip
		}
	}
	return first
}

func equalRoutes(a, b []route.Route) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func drain(ch <-chan error) error {
	select {
	case err := <-ch:
		return err
	default:
		return nil
	}
}
