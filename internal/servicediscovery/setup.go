package servicediscovery

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// ExportOptions configures SetupExport.
type ExportOptions struct {
	// Hub is the client configuration of the hub with the cluster's own credential. Required.
	Hub *rest.Config
	// HubNamespace is the hub's namespace. Required.
	HubNamespace string
	// ClusterID is this cluster's ID. Required.
	ClusterID string
	// Addresses chooses the published addresses. Optional, DirectAddresses when nil.
	Addresses AddressPolicy
}

// SetupExport adds the export controller to mgr, which runs against the member cluster, along
// with a cache of the hub that holds only this cluster's own objects in the hub namespace. It
// may be called after mgr has started (the agent does so once the cluster has joined).
func SetupExport(mgr manager.Manager, o ExportOptions) error {
	if o.Hub == nil || o.HubNamespace == "" || o.ClusterID == "" {
		return errors.New("setting up the service export controller: hub configuration, namespace and cluster ID are required")
	}
	if o.Addresses == nil {
		o.Addresses = DirectAddresses{}
	}
	hubCluster, err := cluster.New(o.Hub, func(co *cluster.Options) {
		co.Scheme = kube.Scheme
		co.Cache = cache.Options{
			DefaultNamespaces: map[string]cache.Config{o.HubNamespace: {}},
			// Only our own objects: the rest of the cluster set's are not ours to manage here,
			// and the cache stays as small as what we export.
			DefaultLabelSelector: labels.SelectorFromSet(labels.Set{v1alpha1.ClusterLabel: o.ClusterID}),
		}
	})
	if err != nil {
		return fmt.Errorf("creating the hub cache for cluster %s: %w", o.ClusterID, err)
	}
	if err := mgr.Add(hubCluster); err != nil {
		return fmt.Errorf("adding the hub cache: %w", err)
	}
	r := &ExportReconciler{
		Member: mgr.GetClient(), Hub: hubCluster.GetClient(),
		HubNamespace: o.HubNamespace, ClusterID: o.ClusterID, Addresses: o.Addresses,
	}
	return r.SetupWithManager(mgr, hubCluster.GetCache())
}

// SetupWithManager registers the controller: keyed by the ServiceExport's namespace/name, it is
// triggered by the export, the Service of the same name, that Service's local EndpointSlices,
// and this cluster's objects on the hub (so that a published object deleted or changed by
// someone else is put back, and orphans left while the agent was down are withdrawn at start).
func (r *ExportReconciler) SetupWithManager(mgr manager.Manager, hubCache cache.Cache) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("serviceexport").
		For(&mcsv1beta1.ServiceExport{}).
		// A Service has the name of its export: the object's own key is the export's.
		Watches(&corev1.Service{}, &handler.EnqueueRequestForObject{}).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(localSliceService)).
		WatchesRawSource(source.Kind(hubCache, &mcsv1beta1.ServiceImport{}, handler.TypedEnqueueRequestsFromMapFunc(hubService[*mcsv1beta1.ServiceImport]))).
		WatchesRawSource(source.Kind(hubCache, &discoveryv1.EndpointSlice{}, handler.TypedEnqueueRequestsFromMapFunc(hubService[*discoveryv1.EndpointSlice]))).
		// The agent runs one of these per process, but tests run one agent per member cluster
		// in one process, and controller names are checked process-wide.
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the service export controller: %w", err)
	}
	return nil
}

// localSliceService maps a member EndpointSlice to the export of its Service.
func localSliceService(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[discoveryv1.LabelServiceName]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// hubService maps one of our hub objects to the export it was published for.
func hubService[T client.Object](_ context.Context, o T) []reconcile.Request {
	l := o.GetLabels()
	ns, name := l[v1alpha1.ServiceNamespaceLabel], l[mcsv1beta1.LabelServiceName]
	if ns == "" || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}
