package servicediscovery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
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
	// StaleClusterTTL is how long another cluster's heartbeat Lease may stay expired before the
	// import side withdraws its endpoints. Optional; DefaultStaleClusterTTL when zero.
	StaleClusterTTL time.Duration
	// HubMapper is a RESTMapper of the hub that already resolved the kinds in HubKinds.
	// Optional: with it, setting up sends no request to the hub, so a hub that flaps right then
	// (e.g. discovery failing just after an API server restart) cannot fail the setup; without
	// it, each hub cache discovers the hub's API itself.
	HubMapper meta.RESTMapper
	// ExportWorkers and ImportWorkers are how many exports, and imported services, are
	// reconciled at once. Optional; DefaultWorkers when zero.
	ExportWorkers int
	ImportWorkers int
	// HubReturned is as in ImportOptions. Optional.
	HubReturned time.Time
}

// DefaultWorkers is how many exports, and how many imported services, each controller
// reconciles at once by default. One (controller-runtime's default) makes a cold start a chain
// of member round trips, one service after another; kube-controller-manager runs its
// EndpointSlice and Service controllers with 5 workers each (--concurrent-service-endpoint-
// syncs, --concurrent-service-syncs), and the agent's work per service is of the same kind. It
// is safe: the workqueue never hands one key to two workers at once, every object a reconcile
// writes belongs to its key alone (records, slices and derived names are per service), and the
// reconcilers' only shared state (liveness) is locked.
const DefaultWorkers = 5

// controllerOptions are the options of both controllers with workers workers (DefaultWorkers
// when zero).
func controllerOptions(workers int) controller.Options {
	if workers <= 0 {
		workers = DefaultWorkers
	}
	return controller.Options{
		MaxConcurrentReconciles: workers,
		// The agent runs one of these per process, but tests run one agent per member cluster
		// in one process, and controller names are checked process-wide.
		SkipNameValidation: ptr.To(true),
		CacheSyncTimeout:   hubCacheSyncTimeout,
	}
}

// stripForCache drops what no reconciler reads from the objects of the hub caches before they
// are stored: managedFields, often the largest part of a record or slice, kept once per
// cluster and export in every agent. Everything else is read (labels, annotations, spec, the
// slices' endpoints).
var stripForCache = cache.TransformStripManagedFields()

// HubKinds are the hub kinds the export and import controllers watch, for warming HubMapper.
var HubKinds = []schema.GroupVersionKind{
	mcsv1beta1.SchemeGroupVersion.WithKind("ServiceImport"),
	discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"),
	coordinationv1.SchemeGroupVersion.WithKind("Lease"),
}

// hubCacheConfig is the configuration of a hub cache: its lists and watches wait out a hub
// that cannot be dialled, so that the cache catches up as soon as the hub is back instead of
// after client-go's reconnect backoff (kube.WaitForServerOnReads); writes still fail fast.
func hubCacheConfig(hub *rest.Config) *rest.Config { return kube.WaitForServerOnReads(hub) }

// useMapper makes a hub cache use m, when it is given.
func useMapper(co *cluster.Options, m meta.RESTMapper) {
	if m != nil {
		co.MapperProvider = func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return m, nil }
	}
}

// Setup adds the export and import controllers to mgr, sharing one hub cache of every
// cluster's exports: the import side builds from it, and the export side reads it to set the
// Conflict condition. It may be called after mgr has started.
func Setup(mgr manager.Manager, o ExportOptions) error {
	_, global := o.Addresses.(GlobalAddresses)
	_, secondary := o.Addresses.(SecondaryAddresses)
	exports, err := setupImport(mgr, ImportOptions{Hub: o.Hub, HubNamespace: o.HubNamespace, ClusterID: o.ClusterID, StaleClusterTTL: o.StaleClusterTTL, HubMapper: o.HubMapper, Workers: o.ImportWorkers,
		LocalEndpoints: global, Secondary: secondary, HubReturned: o.HubReturned})
	if err != nil {
		return err
	}
	return setupExport(mgr, o, exports)
}

// SetupExport adds the export controller to mgr, which runs against the member cluster, along
// with a cache of the hub that holds only this cluster's own objects in the hub namespace. It
// may be called after mgr has started (the agent does so once the cluster has joined).
func SetupExport(mgr manager.Manager, o ExportOptions) error {
	return setupExport(mgr, o, nil)
}

// setupExport is SetupExport; with exports, a cache as setupImport returns, it also sets the
// Conflict condition.
func setupExport(mgr manager.Manager, o ExportOptions, exports cache.Cache) error {
	if o.Hub == nil || o.HubNamespace == "" || o.ClusterID == "" {
		return errors.New("setting up the service export controller: hub configuration, namespace and cluster ID are required")
	}
	if o.Addresses == nil {
		o.Addresses = DirectAddresses{}
	}
	if g, ok := o.Addresses.(GlobalAddresses); ok && g.Member == nil {
		o.Addresses = GlobalAddresses{Member: mgr.GetClient()}
	}
	if p, ok := o.Addresses.(SecondaryAddresses); ok && p.Member == nil {
		o.Addresses = SecondaryAddresses{Member: mgr.GetClient()}
	}
	hubCluster, err := cluster.New(hubCacheConfig(o.Hub), func(co *cluster.Options) {
		co.Scheme = kube.Scheme
		useMapper(co, o.HubMapper)
		co.Cache = cache.Options{
			DefaultNamespaces: map[string]cache.Config{o.HubNamespace: {}},
			// Only our own objects: the rest of the cluster set's are not ours to manage here,
			// and the cache stays as small as what we export.
			DefaultLabelSelector: labels.SelectorFromSet(labels.Set{v1alpha1.ClusterLabel: o.ClusterID}),
			DefaultTransform:     stripForCache,
		}
	})
	if err != nil {
		return fmt.Errorf("creating the hub cache for cluster %s: %w", o.ClusterID, err)
	}
	for _, obj := range []client.Object{&mcsv1beta1.ServiceImport{}, &discoveryv1.EndpointSlice{}} {
		if err := hubCluster.GetFieldIndexer().IndexField(context.Background(), obj, hubServiceIndex, exportedServiceKey); err != nil {
			return fmt.Errorf("indexing this cluster's %T on the hub by service: %w", obj, err)
		}
	}
	if err := indexMemberSlices(mgr); err != nil {
		return err
	}
	if _, ok := o.Addresses.(SecondaryAddresses); ok {
		// podExports looks slices up by pod on every pod event under secondary addressing.
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), &discoveryv1.EndpointSlice{}, slicePodIndex, slicePods); err != nil {
			return fmt.Errorf("indexing the member's EndpointSlices by pod: %w", err)
		}
	}
	if err := mgr.Add(hubCluster); err != nil {
		return fmt.Errorf("adding the hub cache: %w", err)
	}
	r := &ExportReconciler{
		Member: mgr.GetClient(), Hub: hubCluster.GetClient(),
		HubNamespace: o.HubNamespace, ClusterID: o.ClusterID, Addresses: o.Addresses, Exports: exports,
		Workers: o.ExportWorkers, expectations: newExpectations(),
	}
	return r.SetupWithManager(mgr, hubCluster.GetCache())
}

// SetupWithManager registers the controller: keyed by the ServiceExport's namespace/name, it is
// triggered by the export, the Service of the same name, that Service's local EndpointSlices,
// and this cluster's objects on the hub (so that a published object deleted or changed by
// someone else is put back, and orphans left while the agent was down are withdrawn at start).
func (r *ExportReconciler) SetupWithManager(mgr manager.Manager, hubCache cache.Cache) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("serviceexport").
		Watches(&mcsv1beta1.ServiceExport{}, newBacklogLast(&handler.EnqueueRequestForObject{}, time.Now(), objectCreated)).
		// A Service has the name of its export: the object's own key is the export's.
		// The import side's derived Services and imported slices are no export's business:
		// without these predicates each of its writes would wake an export reconcile too.
		Watches(&corev1.Service{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(notOurs(ownedByUs))).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(serviceLabelled(discoveryv1.LabelServiceName)), builder.WithPredicates(notOurs(importedSlice))).
		WatchesRawSource(source.Kind(hubCache, &mcsv1beta1.ServiceImport{}, handler.TypedEnqueueRequestsFromMapFunc(hubService[*mcsv1beta1.ServiceImport]))).
		WatchesRawSource(source.Kind(hubCache, &discoveryv1.EndpointSlice{}, handler.TypedEnqueueRequestsFromMapFunc(hubService[*discoveryv1.EndpointSlice])))
	if _, ok := r.Addresses.(GlobalAddresses); ok {
		// Under globalnet the Service's GlobalIngressIPs decide what is published: an address
		// allocated (or released) publishes (or withdraws) it.
		b = b.Watches(&v1alpha1.GlobalIngressIP{}, handler.EnqueueRequestsFromMapFunc(serviceLabelled(mcsv1beta1.LabelServiceName)))
	}
	if _, ok := r.Addresses.(SecondaryAddresses); ok {
		// Under secondary addressing a pod's network-status annotation decides what is
		// published: its address arriving (or going) publishes (or withdraws) the pod. Only
		// metadata is cached: the annotation is all the policy reads of a pod.
		b = b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.podExports),
			builder.OnlyMetadata, builder.WithPredicates(secondaryStatusChanged))
	}
	if exports, ok := r.Exports.(cache.Cache); ok {
		// Another cluster's export of a service exported here may change this one's Conflict.
		b = b.WatchesRawSource(source.Kind(exports, &mcsv1beta1.ServiceImport{}, handler.TypedEnqueueRequestsFromMapFunc(r.othersExport)))
	}
	err := b.WithOptions(controllerOptions(r.Workers)).Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the service export controller: %w", err)
	}
	return nil
}

// notOurs passes the events of objects for which ours is false.
func notOurs(ours func(client.Object) bool) predicate.Funcs {
	return predicate.NewPredicateFuncs(func(o client.Object) bool { return !ours(o) })
}

// secondaryStatusChanged passes the pod events that can change a pod's secondary address:
// its creation and deletion, and a change of its network-status annotation (the ovnmaster
// writing or removing its entry). A pod's other changes reach the export through its
// EndpointSlices.
var secondaryStatusChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetAnnotations()[podnet.NetworkStatusAnnotation] != e.ObjectNew.GetAnnotations()[podnet.NetworkStatusAnnotation]
	},
}

// podExports maps a pod to the exports of the Services whose local EndpointSlices hold it.
// Most pods back no exported Service; those that do are few per namespace, and the slices are
// read from the cache.
func (r *ExportReconciler) podExports(ctx context.Context, pod client.Object) []reconcile.Request {
	list := &discoveryv1.EndpointSliceList{}
	if err := r.Member.List(ctx, list, client.InNamespace(pod.GetNamespace()), client.MatchingFields{slicePodIndex: pod.GetName()}); err != nil {
		// Only a cache read; it fails only if the cache is gone, i.e. while shutting down.
		logf.FromContext(ctx).Error(err, "Could not list the EndpointSlices of a pod's namespace", "pod", client.ObjectKeyFromObject(pod))
		return nil
	}
	seen := map[string]bool{}
	var reqs []reconcile.Request
	for _, s := range list.Items {
		svc := s.Labels[discoveryv1.LabelServiceName]
		if svc == "" || seen[svc] || importedSlice(&s) {
			continue
		}
		if slices.ContainsFunc(s.Endpoints, func(ep discoveryv1.Endpoint) bool {
			return ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" && ep.TargetRef.Name == pod.GetName()
		}) {
			seen[svc] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pod.GetNamespace(), Name: svc}})
		}
	}
	return reqs
}

// othersExport maps another cluster's record to the export of the same service here, if
// there is one: most services exported in the cluster set are not exported here.
func (r *ExportReconciler) othersExport(ctx context.Context, rec *mcsv1beta1.ServiceImport) []reconcile.Request {
	if rec.Labels[mcsv1beta1.LabelSourceCluster] == r.ClusterID {
		return nil // our own records have their own watch
	}
	reqs := hubService(ctx, rec)
	if len(reqs) == 0 {
		return nil
	}
	if err := r.Member.Get(ctx, reqs[0].NamespacedName, &mcsv1beta1.ServiceExport{}); err != nil {
		return nil // not exported here (or the cache is shutting down)
	}
	return reqs
}

// serviceLabelled maps a member object to the export of the Service its label names: a local
// EndpointSlice by kubernetes.io/service-name, a GlobalIngressIP by the MCS service name.
func serviceLabelled(label string) handler.MapFunc {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[label]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	}
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

// hubCacheSyncTimeout is how long the controllers wait for their hub caches to sync at start:
// practically forever. The default (2 minutes) would make the controller, and with it the
// agent, exit when the hub is down at start; the informers retry on their own, and nothing
// imported is touched before they have synced, as docs/architecture.md §6b describes.
const hubCacheSyncTimeout = 100 * 365 * 24 * time.Hour

// hubServiceIndex indexes the import side's hub cache by the exported service, namespace/name,
// and hubNamespaceIndex by its namespace: reconciles and namespace events look records up by
// them, which without an index would scan every cluster's exports each time.
const (
	hubServiceIndex   = "octopus.io/service"
	hubNamespaceIndex = "octopus.io/service-namespace"
)

// memberSliceIndex indexes the member's EndpointSlices by the service they belong to: a local
// slice (kubernetes.io/service-name, kube-controller-manager's) by localSliceKey, an imported
// one (ours, multicluster.kubernetes.io/service-name) by importedSliceKey. Export and import
// reconciles look slices up by service on every pass; without it the cache scans and
// label-matches every slice of the namespace, and a cold start of N imports in one namespace
// costs O(N²) matches (docs/service-discovery.md, "Fleet scale").
const memberSliceIndex = "octopus.io/slice-service"

func localSliceKey(service string) string    { return "local/" + service }
func importedSliceKey(service string) string { return "imported/" + service }

// sliceServiceKeys is the memberSliceIndex value of a member EndpointSlice.
func sliceServiceKeys(o client.Object) []string {
	l := o.GetLabels()
	if importedSlice(o) {
		if name := l[mcsv1beta1.LabelServiceName]; name != "" {
			return []string{importedSliceKey(name)}
		}
		return nil
	}
	if name := l[discoveryv1.LabelServiceName]; name != "" {
		return []string{localSliceKey(name)}
	}
	return nil
}

// slicePodIndex indexes the member's own EndpointSlices by the pods their endpoints name, under
// secondary addressing only (podExports), so that a pod event reads the slices that hold the pod
// rather than every slice of its namespace.
const slicePodIndex = "octopus.io/slice-pod"

// slicePods is the slicePodIndex value of a member EndpointSlice.
func slicePods(o client.Object) []string {
	s, ok := o.(*discoveryv1.EndpointSlice)
	if !ok || importedSlice(s) {
		return nil
	}
	var pods []string
	for _, ep := range s.Endpoints {
		if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" && !slices.Contains(pods, ep.TargetRef.Name) {
			pods = append(pods, ep.TargetRef.Name)
		}
	}
	return pods
}

// indexedMembers remembers the managers whose cache has memberSliceIndex: Setup registers it
// from both the export and the import side, and an index name may be registered only once.
var indexedMembers sync.Map

// indexMemberSlices adds memberSliceIndex to mgr's cache unless it has it already. client-go
// builds an index added after the informer started from what it holds, so this works after
// mgr has started too.
func indexMemberSlices(mgr manager.Manager) error {
	indexer := mgr.GetFieldIndexer()
	if _, done := indexedMembers.LoadOrStore(indexer, true); done {
		return nil
	}
	if err := indexer.IndexField(context.Background(), &discoveryv1.EndpointSlice{}, memberSliceIndex, sliceServiceKeys); err != nil {
		indexedMembers.Delete(indexer)
		return fmt.Errorf("indexing the member's EndpointSlices by service: %w", err)
	}
	return nil
}

// ImportOptions configures SetupImport.
type ImportOptions struct {
	// Hub is the client configuration of the hub with the cluster's own credential, which may
	// read every cluster's exports. Required.
	Hub *rest.Config
	// HubNamespace is the hub's namespace. Required.
	HubNamespace string
	// ClusterID is this cluster's ID. Optional: with it, only this cluster's own fresh heartbeat
	// proves the hub reachable before another cluster's endpoints are withdrawn (see liveness);
	// without it, any cluster's does.
	ClusterID string
	// StaleClusterTTL is how long a cluster's heartbeat Lease may stay expired before its
	// endpoints are withdrawn. Optional; DefaultStaleClusterTTL when zero.
	StaleClusterTTL time.Duration
	// HubMapper is as in ExportOptions. Optional.
	HubMapper meta.RESTMapper
	// Workers is how many services are reconciled at once. Optional; DefaultWorkers when zero.
	Workers int
	// LocalEndpoints imports this cluster's (ClusterID's) own exports from its local
	// EndpointSlices: see ImportReconciler.LocalCluster. Optional; Setup sets it under
	// GlobalAddresses.
	LocalEndpoints bool
	// Secondary imports as a cluster on the secondary network: see ImportReconciler.Secondary.
	// Optional; Setup sets it under SecondaryAddresses.
	Secondary bool // HubReturned is when the hub answered after being found unreachable at start; zero when
	// it answered at once. No cluster could renew its heartbeat while the hub was down, so no
	// endpoints are withdrawn until StaleClusterTTL after it (see liveness). Optional.
	HubReturned time.Time
}

// SetupImport adds the import controller to mgr, which runs against the member cluster, along
// with a cache of every cluster's exported services on the hub (read-only: the import side
// never writes to the hub). Like SetupExport, it may be called after mgr has started.
func SetupImport(mgr manager.Manager, o ImportOptions) error {
	_, err := setupImport(mgr, o)
	return err
}

// setupImport is SetupImport; it returns the hub cache of every cluster's exports.
func setupImport(mgr manager.Manager, o ImportOptions) (cache.Cache, error) {
	if o.Hub == nil || o.HubNamespace == "" {
		return nil, errors.New("setting up the service import controller: hub configuration and namespace are required")
	}
	if o.StaleClusterTTL < 0 {
		return nil, fmt.Errorf("setting up the service import controller: the stale cluster TTL %s must not be negative", o.StaleClusterTTL)
	}
	if o.StaleClusterTTL == 0 {
		o.StaleClusterTTL = DefaultStaleClusterTTL
	}
	heartbeats, err := labels.NewRequirement(v1alpha1.ClusterLabel, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("selecting heartbeat Leases: %w", err)
	}
	exported, err := labels.NewRequirement(v1alpha1.ServiceNamespaceLabel, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("selecting exported services: %w", err)
	}
	hubCluster, err := cluster.New(hubCacheConfig(o.Hub), func(co *cluster.Options) {
		co.Scheme = kube.Scheme
		useMapper(co, o.HubMapper)
		co.Cache = cache.Options{
			DefaultNamespaces: map[string]cache.Config{o.HubNamespace: {}},
			// Only exported services' records and slices: the hub namespace holds other
			// EndpointSlices and nothing else of the cluster set is needed here.
			DefaultLabelSelector: labels.NewSelector().Add(*exported),
			// Every cluster's heartbeat Lease, to withdraw the endpoints of clusters that stopped
			// heartbeating (see liveness).
			ByObject: map[client.Object]cache.ByObject{
				&coordinationv1.Lease{}: {Label: labels.NewSelector().Add(*heartbeats)},
			},
			DefaultTransform: stripForCache,
		}
	})
	if err != nil {
		return nil, fmt.Errorf("creating the hub cache of exported services: %w", err)
	}
	// Registered before the cache starts, as indexes must be; the context only bounds that.
	ctx := context.Background()
	for _, obj := range []client.Object{&mcsv1beta1.ServiceImport{}, &discoveryv1.EndpointSlice{}} {
		if err := hubCluster.GetFieldIndexer().IndexField(ctx, obj, hubServiceIndex, exportedServiceKey); err != nil {
			return nil, fmt.Errorf("indexing the hub's %T by service: %w", obj, err)
		}
	}
	if err := hubCluster.GetFieldIndexer().IndexField(ctx, &mcsv1beta1.ServiceImport{}, hubNamespaceIndex, func(o client.Object) []string {
		if ns := o.GetLabels()[v1alpha1.ServiceNamespaceLabel]; ns != "" {
			return []string{ns}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("indexing the hub's records by namespace: %w", err)
	}
	if err := mgr.Add(hubCluster); err != nil {
		return nil, fmt.Errorf("adding the hub cache of exported services: %w", err)
	}
	if err := indexMemberSlices(mgr); err != nil {
		return nil, err
	}
	r := &ImportReconciler{
		Member: mgr.GetClient(), Hub: hubCluster.GetCache(), HubNamespace: o.HubNamespace,
		liveness: newLiveness(o.StaleClusterTTL, o.ClusterID, hubCluster.GetCache(), o.HubNamespace, o.HubReturned),
		Workers:  o.Workers, expectations: newExpectations(), Secondary: o.Secondary,
		propagation: newPropagation(propagationSeconds, time.Now(), time.Now),
	}
	if o.LocalEndpoints {
		if o.ClusterID == "" {
			return nil, errors.New("setting up the service import controller: importing local endpoints needs the cluster ID")
		}
		r.LocalCluster = o.ClusterID
	}
	if err := r.SetupWithManager(mgr, hubCluster.GetCache()); err != nil {
		return nil, err
	}
	return hubCluster.GetCache(), nil
}

// SetupWithManager registers the controller: keyed by the exported service's namespace/name,
// it is triggered by every cluster's records and slices on the hub, by our imports, derived
// Services and imported slices in the member (so that one deleted or changed by someone else
// is put back), and by namespaces being created (an import waits for its namespace).
func (r *ImportReconciler) SetupWithManager(mgr manager.Manager, hubCache cache.Cache) error {
	started := time.Now()
	b := ctrl.NewControllerManagedBy(mgr)
	if r.LocalCluster != "" {
		b = b.Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(localService))
	}
	err := b.
		Named("serviceimport").
		WatchesRawSource(source.Kind(hubCache, &mcsv1beta1.ServiceImport{}, newBacklogLast(
			handler.TypedEnqueueRequestsFromMapFunc(hubService[*mcsv1beta1.ServiceImport]), started, recordCreated))).
		WatchesRawSource(source.Kind(hubCache, &discoveryv1.EndpointSlice{}, newBacklogLast(
			handler.TypedEnqueueRequestsFromMapFunc(hubService[*discoveryv1.EndpointSlice]), started, sliceCreated(hubCache, r.HubNamespace)))).
		WatchesRawSource(source.Kind(hubCache, &coordinationv1.Lease{}, r.liveness.handler())).
		// Our own writes come back as events; those that show exactly what we wrote are
		// dropped (expectations.echo), the rest (someone else's change) reconcile.
		Watches(&mcsv1beta1.ServiceImport{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(predicate.NewPredicateFuncs(ownedByUs),
			r.expectations.echoes(writtenImport, func(o client.Object) (types.NamespacedName, bool) { return client.ObjectKeyFromObject(o), true }))).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(importedService), builder.WithPredicates(predicate.NewPredicateFuncs(ownedByUs),
			r.expectations.echoes(writtenService, importedKey))).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(importedService), builder.WithPredicates(predicate.NewPredicateFuncs(importedSlice),
			r.expectations.echoes(writtenSlice, importedKey))).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.namespaceServices), builder.WithPredicates(predicate.Funcs{
			// Only a namespace's appearance matters: its deletion takes the imports along.
			UpdateFunc:  func(event.UpdateEvent) bool { return false },
			DeleteFunc:  func(event.DeleteEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		WithOptions(controllerOptions(r.Workers)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the service import controller: %w", err)
	}
	return nil
}

// exportedServiceKey is the hubServiceIndex value of a hub record or slice.
func exportedServiceKey(o client.Object) []string {
	l := o.GetLabels()
	ns, name := l[v1alpha1.ServiceNamespaceLabel], l[mcsv1beta1.LabelServiceName]
	if ns == "" || name == "" {
		return nil
	}
	return []string{types.NamespacedName{Namespace: ns, Name: name}.String()}
}

// importedService maps a derived Service or imported slice to the service it imports.
func importedService(_ context.Context, o client.Object) []reconcile.Request {
	key, ok := importedKey(o)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// importedKey is the service a derived Service or imported slice imports.
func importedKey(o client.Object) (types.NamespacedName, bool) {
	name := o.GetLabels()[mcsv1beta1.LabelServiceName]
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: name}, name != ""
}

// localService maps a local EndpointSlice of a Service to the import of that Service's name,
// for withLocalEndpoints: a ClusterSetIP export's hub slice does not change with its pods.
func localService(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[discoveryv1.LabelServiceName]
	if name == "" || importedSlice(o) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

func importedSlice(o client.Object) bool {
	return o.GetLabels()[discoveryv1.LabelManagedBy] == endpointSliceManager
}

// namespaceServices maps a namespace to every service exported from a namespace of its name.
func (r *ImportReconciler) namespaceServices(ctx context.Context, o client.Object) []reconcile.Request {
	records := &mcsv1beta1.ServiceImportList{}
	if err := r.Hub.List(ctx, records, client.InNamespace(r.HubNamespace), client.MatchingFields{hubNamespaceIndex: o.GetName()}); err != nil {
		// Only a cache read; it fails only if the cache is gone, i.e. while shutting down.
		logf.FromContext(ctx).Error(err, "Could not list the exported services of a new namespace", "namespace", o.GetName())
		return nil
	}
	seen := map[types.NamespacedName]bool{}
	var reqs []reconcile.Request
	for _, rec := range records.Items {
		key := types.NamespacedName{Namespace: o.GetName(), Name: rec.Labels[mcsv1beta1.LabelServiceName]}
		if key.Name != "" && !seen[key] {
			seen[key] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: key})
		}
	}
	return reqs
}
