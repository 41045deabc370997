package globalnet

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// poolRequest is the allocator's only work item: the pool is assigned as a whole, so every
// event asks for the same thing, and the workqueue merges a burst of events into one pass.
var poolRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "global-ingress-pool"}}

// conflictRetry is how soon a pass that met a newer object than its cache held runs again.
const conflictRetry = 200 * time.Millisecond

// Allocator keeps one GlobalIngressIP per target (see Targets) with an address of the
// cluster's ingress pool, and deletes the records of targets that went away. It needs a single
// active instance per cluster (the agent controller's leader election): two would hand out the
// same free address (NewPlan resolves that in favour of the older record, but only afterwards).
type Allocator struct {
	// Client reads from the manager's cache and writes to the member cluster.
	Client client.Client
	// Layout is the cluster's global CIDR, laid out.
	Layout globalip.Layout

	now func() time.Time
}

// +kubebuilder:rbac:groups=octopus.io,resources=globalingressips,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=octopus.io,resources=globalingressips/status,verbs=get;update
// +kubebuilder:rbac:groups=octopus.io,resources=globalegressips,verbs=get;list;watch
// +kubebuilder:rbac:groups=octopus.io,resources=globalegressips/status,verbs=get;update
// +kubebuilder:rbac:groups=octopus.io,resources=vpcs,verbs=get;list;watch
// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=serviceexports,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch

// Reconcile computes the Plan from what the cache holds and carries it out: deletes, creates,
// then status writes. Status is written with the resourceVersion the pass read, so a pass that
// worked from a cache older than our own last write is refused by the API server and runs
// again, rather than handing out addresses from a stale view.
func (a *Allocator) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	exports, err := a.exports(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	existing := &v1alpha1.GlobalIngressIPList{}
	if err := a.Client.List(ctx, existing, client.MatchingLabels(kube.ManagedLabels())); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing GlobalIngressIPs: %w", err)
	}
	egress := &v1alpha1.GlobalEgressIPList{}
	if err := a.Client.List(ctx, egress); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing GlobalEgressIPs: %w", err)
	}
	// The Vpcs' gateways hold addresses of the same pool (the ovnmaster's VpcExternalIPs).
	vpcs := &v1alpha1.VpcList{}
	if err := a.Client.List(ctx, vpcs); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing Vpcs (their gateways' external addresses share the pool): %w", err)
	}
	now := time.Now
	if a.now != nil {
		now = a.now
	}
	targets := Targets(exports)
	plan := NewPlan(a.Layout, targets, existing.Items, egress.Items, vpcs.Items, metav1.NewTime(now()))

	var errs []error
	conflict := false
	for _, g := range plan.Delete {
		err := a.Client.Delete(ctx, g, client.Preconditions{UID: &g.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting GlobalIngressIP %s/%s: %w", g.Namespace, g.Name, err))
			continue
		}
		log.Info("Released global ingress address", "globalIngressIP", client.ObjectKeyFromObject(g), "ip", g.Status.IP)
	}
	byKey := map[string]*v1alpha1.GlobalIngressIP{}
	for i := range existing.Items {
		g := &existing.Items[i]
		byKey[g.Namespace+"/"+g.Name] = g
	}
	for _, g := range plan.Create {
		if err := a.Client.Create(ctx, g); err != nil {
			if apierrors.IsAlreadyExists(err) {
				conflict = true // our cache has not seen it yet
				continue
			}
			errs = append(errs, fmt.Errorf("creating GlobalIngressIP %s/%s: %w", g.Namespace, g.Name, err))
			continue
		}
		byKey[g.Namespace+"/"+g.Name] = g
	}
	for key, status := range plan.Status {
		g := byKey[key]
		if g == nil {
			continue // its create failed above
		}
		g = g.DeepCopy()
		g.Status = status
		if err := a.Client.Status().Update(ctx, g); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				conflict = true
				continue
			}
			errs = append(errs, fmt.Errorf("writing the status of GlobalIngressIP %s: %w", key, err))
			continue
		}
		if status.IP != "" {
			log.Info("Allocated global ingress address", "globalIngressIP", key, "ip", status.IP)
		} else {
			log.Info("No global ingress address left", "globalIngressIP", key, "pool", a.Layout.Pool.String())
		}
	}
	conflict = a.writeEgressStatus(ctx, egress.Items, plan.EgressStatus, &errs) || conflict
	if err := errors.Join(errs...); err != nil {
		return ctrl.Result{}, err
	}
	if conflict {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	log.V(1).Info("Reconciled global ingress addresses", "targets", len(targets), "exhausted", plan.Exhausted)
	return ctrl.Result{}, nil
}

// writeEgressStatus writes the GlobalEgressIPs' new statuses, with the resourceVersion the pass
// read; it reports whether one was refused for a newer object (the pass must run again).
func (a *Allocator) writeEgressStatus(ctx context.Context, egress []v1alpha1.GlobalEgressIP, statuses map[string]v1alpha1.GlobalEgressIPStatus, errs *[]error) (conflict bool) {
	log := logf.FromContext(ctx)
	for i := range egress {
		key := egress[i].Namespace + "/" + egress[i].Name
		status, ok := statuses[key]
		if !ok {
			continue
		}
		g := egress[i].DeepCopy()
		g.Status = status
		if err := a.Client.Status().Update(ctx, g); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				conflict = true
				continue
			}
			*errs = append(*errs, fmt.Errorf("writing the status of GlobalEgressIP %s: %w", key, err))
			continue
		}
		if len(status.AllocatedIPs) > 0 {
			log.Info("Allocated global egress range", "globalEgressIP", key, "ips", status.AllocatedIPs)
		} else {
			log.Info("No room for a global egress range", "globalEgressIP", key, "pool", a.Layout.Pool.String())
		}
	}
	return conflict
}

// exports reads every ServiceExport with its Service and local EndpointSlices.
func (a *Allocator) exports(ctx context.Context) ([]Export, error) {
	list := &mcsv1beta1.ServiceExportList{}
	if err := a.Client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing ServiceExports: %w", err)
	}
	out := make([]Export, 0, len(list.Items))
	for _, se := range list.Items {
		e, err := readExport(ctx, a.Client, types.NamespacedName{Namespace: se.Namespace, Name: se.Name})
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// readExport reads the Service key and its local EndpointSlices.
func readExport(ctx context.Context, c client.Reader, key types.NamespacedName) (Export, error) {
	e := Export{Namespace: key.Namespace, Name: key.Name}
	svc := &corev1.Service{}
	switch err := c.Get(ctx, key, svc); {
	case apierrors.IsNotFound(err):
		return e, nil
	case err != nil:
		return e, fmt.Errorf("reading Service %s: %w", key, err)
	}
	e.Service = svc
	slices := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, slices, client.InNamespace(key.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: key.Name}); err != nil {
		return e, fmt.Errorf("listing the EndpointSlices of Service %s: %w", key, err)
	}
	e.Slices = slices.Items
	return e, nil
}

// SetupAllocator registers the allocator with mgr for the cluster's global CIDR laid out by
// layout. Every ServiceExport, Service, EndpointSlice, GlobalIngressIP and GlobalEgressIP event
// starts a pass: ingress addresses and egress ranges share the pool.
func SetupAllocator(mgr manager.Manager, layout globalip.Layout) error {
	a := &Allocator{Client: mgr.GetClient(), Layout: layout}
	pool := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{poolRequest}
	})
	err := ctrl.NewControllerManagedBy(mgr).
		Named("globalingressip").
		Watches(&v1alpha1.GlobalIngressIP{}, pool).
		Watches(&v1alpha1.GlobalEgressIP{}, pool).
		// A VPC gateway taking or freeing an address changes what is free (and may settle a
		// clash: the older keeps the address).
		Watches(&v1alpha1.Vpc{}, pool, builder.WithPredicates(vpcAddressChange)).
		Watches(&mcsv1beta1.ServiceExport{}, pool).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(a.ifExported(func(o client.Object) string { return o.GetName() }))).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(a.ifExported(func(o client.Object) string {
			return o.GetLabels()[discoveryv1.LabelServiceName]
		}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(a)
	if err != nil {
		return fmt.Errorf("setting up the global ingress address allocator: %w", err)
	}
	return nil
}

// vpcAddressChange keeps the Vpc events that change the addresses Vpcs hold: a Vpc created or
// deleted, or its status.gateway.externalIP changed; not its conditions nor its spec.
var vpcAddressChange = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, okOld := e.ObjectOld.(*v1alpha1.Vpc)
		n, okNew := e.ObjectNew.(*v1alpha1.Vpc)
		return !okOld || !okNew || vpcExternalIP(o) != vpcExternalIP(n)
	},
}

func vpcExternalIP(v *v1alpha1.Vpc) string {
	if v.Status.Gateway == nil {
		return ""
	}
	return v.Status.Gateway.ExternalIP
}

// ifExported maps an object to the pool pass when the Service that service names in its
// namespace is exported: most Services and slices of a cluster are not.
func (a *Allocator) ifExported(service func(client.Object) string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		name := service(o)
		if name == "" {
			return nil
		}
		if err := a.Client.Get(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: name}, &mcsv1beta1.ServiceExport{}); err != nil {
			return nil
		}
		return []reconcile.Request{poolRequest}
	}
}
