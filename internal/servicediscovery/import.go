package servicediscovery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// derivedHashLength is how many hex digits of a hash end a derived Service's name.
const derivedHashLength = 8

// ImportReconciler keeps, for one exported service namespace/name, this cluster's view of it
// equal to what every cluster published on the hub:
//
//   - a ServiceImport namespace/name with the merged spec (see merge) and status.clusters;
//   - for a ClusterSetIP service, a selectorless ClusterIP Service (derivedServiceName) whose
//     ClusterIP(s) become the import's spec.ips;
//   - one EndpointSlice per published slice of each contributing cluster, labelled
//     kubernetes.io/service-name=<derived Service> for ClusterSetIP services, so that
//     kube-proxy balances the import's IP over every cluster's endpoints.
//
// The Service and slices are owned by the ServiceImport, so deleting it (or the namespace)
// takes them along. Nothing is imported into a namespace that does not exist: creating
// namespaces is the user's business. Objects are written only when they differ from what is
// wanted, and updated in place, never deleted and recreated while still valid.
type ImportReconciler struct {
	// Member reads the member cluster (from the manager's cache) and writes the imports.
	Member client.Client
	// Hub reads every cluster's records and slices in HubNamespace, indexed by
	// hubServiceIndex (a cache as SetupImport builds).
	Hub          client.Reader
	HubNamespace string

	// Workers is how many services SetupWithManager lets reconcile at once. Optional;
	// DefaultWorkers when zero.
	Workers int

	// LocalCluster, when set, is this cluster's ID, whose own exports are imported from its
	// local EndpointSlices (as direct addressing publishes them) instead of from what it
	// published on the hub. Set under globalnet addressing: the published addresses are
	// global IPs, which the gateway translates only for traffic from other clusters, so this
	// cluster's own pods could not reach them (docs/architecture.md §6h).
	LocalCluster string

	// Secondary imports as a cluster of secondary addressing, whose pods reach other clusters
	// only over net1 (docs/architecture.md §6s): only exporters that publish secondary
	// addresses are imported (and, without it, only those that do not), and a ClusterSetIP
	// import gets no derived Service and no spec.ips, since kube-proxy's virtual IP lives on
	// the primary network. It is annotated v1alpha1.AddressingAnnotation=secondary instead, and
	// DNS (pkg/crossdns) answers its name with the endpoints' addresses.
	Secondary bool

	// liveness says which clusters' endpoints are withdrawn because their heartbeat stopped;
	// nil withdraws none.
	liveness *liveness
	// expectations hold our writes the cache has not shown yet; nil waits for none.
	expectations *expectations
	// propagation measures how long exports took to be imported; nil measures none.
	propagation *propagation
}

// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=serviceimports,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=serviceimports/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=serviceimports/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Reconcile imports the service req names from the records on the hub, or removes its import
// when no cluster exports it any more.
func (r *ImportReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := req.NamespacedName
	// Our last writes fired the events that brought us here, likely before the cache holds
	// them: from the older copies, this reconcile would only repeat them.
	if ok, err := r.expectations.satisfied(ctx, r.Member, key); err != nil {
		return ctrl.Result{}, err
	} else if !ok {
		return ctrl.Result{RequeueAfter: expectationRecheck}, nil
	}
	ns := &corev1.Namespace{}
	if err := r.Member.Get(ctx, types.NamespacedName{Name: key.Namespace}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil // the namespace's creation brings us back
		}
		return ctrl.Result{}, fmt.Errorf("reading Namespace %s: %w", key.Namespace, err)
	}
	if !ns.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // everything in it goes with it
	}
	cur := &mcsv1beta1.ServiceImport{}
	if err := r.Member.Get(ctx, key, cur); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("reading ServiceImport %s: %w", key, err)
		}
		cur = nil
	}
	if cur != nil && !ownedByUs(cur) {
		// Rule of the house: never change what we did not make. Someone else's import of the
		// same name wins; ours resumes once theirs is gone (its deletion brings us back).
		logf.FromContext(ctx).Info("Left alone a ServiceImport not managed by Octopus", "serviceImport", key)
		return ctrl.Result{}, nil
	}
	records, hubSlices, err := r.fromHub(ctx, key)
	if err != nil {
		return ctrl.Result{}, err
	}
	records, hubSlices = r.sameAddressing(ctx, key, records, hubSlices)
	if hubSlices, err = r.withLocalEndpoints(ctx, key, hubSlices); err != nil {
		return ctrl.Result{}, err
	}
	if len(records) == 0 {
		r.expectations.forget(key)
		r.propagation.forget(key)
		return ctrl.Result{}, r.remove(ctx, key, cur)
	}
	if cur != nil && !cur.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // its deletion event brings us back to create it anew
	}
	parsed := make([]exportRecord, 0, len(records))
	for i := range records {
		parsed = append(parsed, parseRecord(&records[i]))
	}
	m := merge(parsed)
	if err := r.importService(ctx, key, cur, m, hubSlices); err != nil {
		return ctrl.Result{}, err
	}
	r.propagation.observe(key, parsed, m.Clusters)
	return ctrl.Result{}, nil
}

// importService makes the member hold the import of key as m describes, with the endpoints of
// hubSlices from m's clusters. cur is the current ServiceImport, nil if there is none.
//
// A new import costs the fewest member writes that can make it (docs/service-discovery.md,
// "Fleet scale"): for a ClusterSetIP import the derived Service, then the ServiceImport already
// carrying its spec.ips, then its slices and its status together; a headless one skips the
// Service. The Service comes first because its ClusterIPs are part of the import's spec, and the
// API server allocates them: owned by the import, it would need the import to exist first, and
// the import a second write once the IPs are known.
func (r *ImportReconciler) importService(ctx context.Context, key types.NamespacedName, cur *mcsv1beta1.ServiceImport, m mergedService, hubSlices []discoveryv1.EndpointSlice) error {
	log := logf.FromContext(ctx)
	m.Families = endpointFamilies(hubSlices, m.Clusters)
	derived, err := r.derivedService(ctx, key)
	if err != nil {
		return err
	}
	derivedName := ""
	var want *mcsv1beta1.ServiceImport
	if r.virtualIP(m) {
		derivedName = derivedServiceName(key)
		if derived, err = r.ensureDerived(ctx, key, derived, m); err != nil {
			return err
		}
		want = r.desiredImport(key, m, derived)
	} else {
		want = r.desiredImport(key, m, nil)
	}
	si, err := r.ensureImport(ctx, cur, want)
	if err != nil {
		return err
	}
	var errs []error
	if !r.virtualIP(m) && derived != nil {
		// Headless now, ClusterSetIP before (or a VIP of an earlier version under secondary
		// addressing): the virtual IP goes, after the import stopped naming it.
		if err := r.Member.Delete(ctx, derived); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting derived Service %s/%s: %w", derived.Namespace, derived.Name, err))
		}
	}

	// The slices and the status depend on the import alone, not on each other: written at
	// once, a new import waits for one round trip instead of two. The status patch gets its
	// own copy, since the patch decodes the answer into it while the slices read si.
	var wg sync.WaitGroup
	var sliceErr error
	wg.Go(func() { sliceErr = r.syncSlices(ctx, si, key, derivedName, &m, hubSlices) })
	statusErr := r.ensureStatus(ctx, key, si.DeepCopy(), m)
	wg.Wait()
	if err := errors.Join(append(errs, sliceErr, statusErr)...); err != nil {
		return err
	}
	log.V(1).Info("Reconciled ServiceImport", "serviceImport", key, "type", m.Spec.Type, "clusters", m.Clusters)
	return nil
}

// ensureStatus sets the status.clusters of si to m's clusters unless it holds them already.
func (r *ImportReconciler) ensureStatus(ctx context.Context, key types.NamespacedName, si *mcsv1beta1.ServiceImport, m mergedService) error {
	if slices.Equal(importClusters(si), m.Clusters) {
		return nil
	}
	orig := si.DeepCopy()
	si.Status.Clusters = make([]mcsv1beta1.ClusterStatus, 0, len(m.Clusters))
	for _, c := range m.Clusters {
		si.Status.Clusters = append(si.Status.Clusters, mcsv1beta1.ClusterStatus{Cluster: c})
	}
	if err := r.Member.Status().Patch(ctx, si, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("updating the status of ServiceImport %s: %w", key, err)
	}
	r.expectations.wrote(key, writtenImport, si)
	return nil
}

// ensureImport applies want unless cur already matches it and returns the import as the
// server holds it.
func (r *ImportReconciler) ensureImport(ctx context.Context, cur, want *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error) {
	if cur != nil && importUpToDate(cur, want) {
		return cur, nil
	}
	got := &mcsv1beta1.ServiceImport{}
	if err := applyInto(ctx, r.Member, want, got); err != nil {
		return nil, err
	}
	r.expectations.wrote(client.ObjectKeyFromObject(want), writtenImport, got)
	if cur == nil {
		logf.FromContext(ctx).Info("Created ServiceImport", "serviceImport", client.ObjectKeyFromObject(want), "type", want.Spec.Type)
	}
	return got, nil
}

// ensureDerived makes the derived Service of the import of key match m and returns it as the
// server holds it. cur is the current one, nil if there is none.
func (r *ImportReconciler) ensureDerived(ctx context.Context, key types.NamespacedName, cur *corev1.Service, m mergedService) (*corev1.Service, error) {
	want := desiredDerived(key, m)
	if cur != nil && derivedUpToDate(cur, want) {
		return cur, nil
	}
	got := &corev1.Service{}
	if err := applyInto(ctx, r.Member, want, got); err != nil {
		return nil, err
	}
	r.expectations.wrote(key, writtenService, got)
	return got, nil
}

// syncSlices makes the imported slices of key equal to the hub's slices of m's clusters, with
// only the ports each cluster owns (mergedService.ownedPorts), labelled for the derived Service
// derivedName ("" for a headless import), and deletes the rest of ours.
func (r *ImportReconciler) syncSlices(ctx context.Context, si *mcsv1beta1.ServiceImport, key types.NamespacedName, derivedName string, m *mergedService, hubSlices []discoveryv1.EndpointSlice) error {
	have, err := r.importedSlices(ctx, key)
	if err != nil {
		return err
	}
	var errs []error
	var todo []*discoveryv1.EndpointSlice
	for i := range hubSlices {
		hs := &hubSlices[i]
		cluster := hs.Labels[mcsv1beta1.LabelSourceCluster]
		if !slices.Contains(m.Clusters, cluster) {
			continue // a cluster in conflict, or one whose record is already gone
		}
		ports, ok := m.ownedPorts(cluster, hs.Ports)
		if !ok {
			continue // every port of this slice lost to another cluster's
		}
		owned := *hs
		owned.Ports = ports
		want, err := desiredImportedSlice(si, &owned, derivedName)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cur, ok := have[want.Name]
		delete(have, want.Name)
		if ok && importedSliceUpToDate(cur, want) {
			continue
		}
		if !ok {
			// A slice of that name that is not ours (have holds only ours) is left alone.
			existing := &discoveryv1.EndpointSlice{}
			if err := r.Member.Get(ctx, client.ObjectKeyFromObject(want), existing); err == nil {
				errs = append(errs, fmt.Errorf("importing EndpointSlice %s/%s: a slice of that name not managed by Octopus exists", want.Namespace, want.Name))
				continue
			}
		}
		todo = append(todo, want)
	}
	// A service's slices (one per exporting cluster and address type) are independent writes.
	applied := make([]error, len(todo))
	var wg sync.WaitGroup
	for i, want := range todo {
		wg.Go(func() {
			got := &discoveryv1.EndpointSlice{}
			if applied[i] = applyInto(ctx, r.Member, want, got); applied[i] == nil {
				r.expectations.wrote(key, writtenSlice, got)
			}
		})
	}
	wg.Wait()
	errs = append(errs, applied...)
	for _, s := range have {
		if err := r.Member.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting imported EndpointSlice %s/%s: %w", s.Namespace, s.Name, err))
		}
	}
	return errors.Join(errs...)
}

// remove deletes the import of key and what it owns. The owner references would have the
// garbage collector do it too, but only eventually, and only where it runs; deleting the slices
// first takes the endpoints out of service before the import disappears.
func (r *ImportReconciler) remove(ctx context.Context, key types.NamespacedName, si *mcsv1beta1.ServiceImport) error {
	have, err := r.importedSlices(ctx, key)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range have {
		if err := r.Member.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting imported EndpointSlice %s/%s: %w", s.Namespace, s.Name, err))
		}
	}
	derived, err := r.derivedService(ctx, key)
	if err != nil {
		errs = append(errs, err)
	} else if derived != nil {
		if err := r.Member.Delete(ctx, derived); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting derived Service %s/%s: %w", derived.Namespace, derived.Name, err))
		}
	}
	if si != nil && si.DeletionTimestamp.IsZero() {
		if err := r.Member.Delete(ctx, si); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting ServiceImport %s: %w", key, err))
		} else {
			logf.FromContext(ctx).Info("Deleted ServiceImport: no cluster exports the service any more", "serviceImport", key)
		}
	}
	return errors.Join(errs...)
}

// fromHub returns every cluster's record and slices of key from the hub cache.
func (r *ImportReconciler) fromHub(ctx context.Context, key types.NamespacedName) ([]mcsv1beta1.ServiceImport, []discoveryv1.EndpointSlice, error) {
	idx := client.MatchingFields{hubServiceIndex: key.String()}
	records := &mcsv1beta1.ServiceImportList{}
	if err := r.Hub.List(ctx, records, client.InNamespace(r.HubNamespace), idx); err != nil {
		return nil, nil, fmt.Errorf("listing the hub's records of %s: %w", key, err)
	}
	hubSlices := &discoveryv1.EndpointSliceList{}
	if err := r.Hub.List(ctx, hubSlices, client.InNamespace(r.HubNamespace), idx); err != nil {
		return nil, nil, fmt.Errorf("listing the hub's EndpointSlices of %s: %w", key, err)
	}
	// Records without a source cluster cannot be attributed, and one whose source cluster is
	// not its writer (the ownership label the hub's admission policy checks) claims another
	// cluster's service; the policy makes both impossible, but a slice must never be imported
	// under the wrong cluster.
	recs := slices.DeleteFunc(records.Items, func(rec mcsv1beta1.ServiceImport) bool {
		return !attributed(rec.Labels) || r.withdrawn(rec.Labels[mcsv1beta1.LabelSourceCluster])
	})
	// A withdrawn cluster's slices go with its records: it no longer counts as an exporter.
	sls := slices.DeleteFunc(hubSlices.Items, func(s discoveryv1.EndpointSlice) bool {
		return !attributed(s.Labels) || r.withdrawn(s.Labels[mcsv1beta1.LabelSourceCluster])
	})
	return recs, sls, nil
}

// attributed tells whether a hub record or slice with these labels names a source cluster
// and was written by it: the source-cluster label equals the writer's ownership label.
func attributed(labels map[string]string) bool {
	src := labels[mcsv1beta1.LabelSourceCluster]
	return src != "" && src == labels[v1alpha1.ClusterLabel]
}

// virtualIP reports whether the import of m gets a virtual IP (a derived Service, whose
// ClusterIPs become spec.ips): a ClusterSetIP import on the primary network. Under secondary
// addressing the pods cannot reach a ClusterIP over net1, so DNS balances instead.
func (r *ImportReconciler) virtualIP(m mergedService) bool {
	return m.Spec.Type == mcsv1beta1.ClusterSetIP && !r.Secondary
}

// desiredImport is the ServiceImport of key for m, as desiredImport makes it, marked as having
// no virtual IP under secondary addressing.
func (r *ImportReconciler) desiredImport(key types.NamespacedName, m mergedService, derived *corev1.Service) *mcsv1beta1.ServiceImport {
	si := desiredImport(key, m, derived)
	if r.Secondary {
		if si.Annotations == nil {
			si.Annotations = map[string]string{}
		}
		// Ours last, as the labels: an exported annotation of the key must not hide it.
		si.Annotations[v1alpha1.AddressingAnnotation] = string(v1alpha1.AddressingSecondary)
	}
	return si
}

// sameAddressing keeps, of the records and slices of key, those of the clusters whose
// addressing agrees with this cluster's: secondary addresses are reachable only from pods on
// the secondary network, and the primary network's addresses only from pods that are not
// confined to net1. A mixed cluster set is thereby refused per service, with a log line naming
// the clusters left out; docs/architecture.md §6s.
func (r *ImportReconciler) sameAddressing(ctx context.Context, key types.NamespacedName, records []mcsv1beta1.ServiceImport, hubSlices []discoveryv1.EndpointSlice) ([]mcsv1beta1.ServiceImport, []discoveryv1.EndpointSlice) {
	other := map[string]bool{}
	var left []string
	records = slices.DeleteFunc(records, func(rec mcsv1beta1.ServiceImport) bool {
		secondary := rec.Annotations[v1alpha1.AddressingAnnotation] == string(v1alpha1.AddressingSecondary)
		if secondary == r.Secondary {
			return false
		}
		c := rec.Labels[mcsv1beta1.LabelSourceCluster]
		other[c] = true
		left = append(left, c)
		return true
	})
	if len(left) == 0 {
		return records, hubSlices
	}
	slices.Sort(left)
	logf.FromContext(ctx).Info("Left out exporters whose addressing differs from this cluster's: their endpoints are not reachable from here",
		"service", key, "clusters", left, "secondary", r.Secondary)
	return records, slices.DeleteFunc(hubSlices, func(s discoveryv1.EndpointSlice) bool {
		return other[s.Labels[mcsv1beta1.LabelSourceCluster]]
	})
}

// withLocalEndpoints replaces, when r.LocalCluster is set, this cluster's own slices among
// hubSlices by those it would publish under direct addressing: its ready pods' own addresses,
// from the local EndpointSlices of the exported Service (Publication, the exporter's own code).
// While the export or the Service is missing its own slices are dropped.
func (r *ImportReconciler) withLocalEndpoints(ctx context.Context, key types.NamespacedName, hubSlices []discoveryv1.EndpointSlice) ([]discoveryv1.EndpointSlice, error) {
	if r.LocalCluster == "" {
		return hubSlices, nil
	}
	own := func(s discoveryv1.EndpointSlice) bool {
		return s.Labels[mcsv1beta1.LabelSourceCluster] == r.LocalCluster
	}
	if !slices.ContainsFunc(hubSlices, own) {
		return hubSlices, nil
	}
	out := slices.DeleteFunc(slices.Clone(hubSlices), own)
	export := &mcsv1beta1.ServiceExport{}
	svc := &corev1.Service{}
	for _, o := range []client.Object{export, svc} {
		if err := r.Member.Get(ctx, key, o); err != nil {
			if apierrors.IsNotFound(err) {
				return out, nil // its own withdrawal from the hub follows
			}
			return nil, fmt.Errorf("reading %s for the local endpoints of its import: %w", key, err)
		}
	}
	local := &discoveryv1.EndpointSliceList{}
	if err := r.Member.List(ctx, local, client.InNamespace(key.Namespace), client.MatchingFields{memberSliceIndex: localSliceKey(key.Name)}); err != nil {
		return nil, fmt.Errorf("listing the local EndpointSlices of %s: %w", key, err)
	}
	_, direct, err := Publication(r.HubNamespace, r.LocalCluster, export, svc, local.Items)
	if err != nil {
		return out, nil //nolint:nilerr // not exportable as it is: the export controller reports why
	}
	for _, s := range direct {
		out = append(out, *s)
	}
	return out, nil
}

// withdrawn reports whether clusterID's endpoints are withdrawn for lack of a heartbeat.
func (r *ImportReconciler) withdrawn(clusterID string) bool {
	return r.liveness != nil && r.liveness.Withdrawn(clusterID)
}

// importedSlices returns our imported slices of key by name.
func (r *ImportReconciler) importedSlices(ctx context.Context, key types.NamespacedName) (map[string]*discoveryv1.EndpointSlice, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := r.Member.List(ctx, list, client.InNamespace(key.Namespace), client.MatchingFields{memberSliceIndex: importedSliceKey(key.Name)}); err != nil {
		return nil, fmt.Errorf("listing the imported EndpointSlices of %s: %w", key, err)
	}
	out := make(map[string]*discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// derivedService returns the derived Service of key, nil if there is none. One of that name
// that we did not make is an error: it is left alone, and the import cannot have its IP.
func (r *ImportReconciler) derivedService(ctx context.Context, key types.NamespacedName) (*corev1.Service, error) {
	svc := &corev1.Service{}
	name := types.NamespacedName{Namespace: key.Namespace, Name: derivedServiceName(key)}
	if err := r.Member.Get(ctx, name, svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading derived Service %s: %w", name, err)
	}
	if !ownedByUs(svc) {
		return nil, fmt.Errorf("the derived Service %s of ServiceImport %s exists but is not managed by Octopus; rename or delete it", name, key)
	}
	return svc, nil
}

// derivedServiceName is the name of the ClusterIP Service that gives the import of key its
// virtual IP: "derived-<svc>" (the MCS reference implementation's prefix) cut to fit a DNS
// label, and always a hash of namespace/name, so that a user Service of the readable name does
// not take its place by accident.
func derivedServiceName(key types.NamespacedName) string {
	sum := sha256.Sum256([]byte(key.Namespace + "/" + key.Name))
	readable := "derived-" + key.Name
	if limit := maxNameLength - derivedHashLength - 1; len(readable) > limit {
		readable = strings.TrimRight(readable[:limit], "-")
	}
	return readable + "-" + hex.EncodeToString(sum[:])[:derivedHashLength]
}

// desiredImport is the ServiceImport of key for m; its spec.ips are the ClusterIPs of derived
// of the families m has endpoints of (offeredIPs), none when derived is nil.
func desiredImport(key types.NamespacedName, m mergedService, derived *corev1.Service) *mcsv1beta1.ServiceImport {
	labels := maps.Clone(m.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	// Ours last: an exported label of the same key must not hide that the import is ours.
	maps.Copy(labels, kube.ManagedLabels())
	spec := *m.Spec.DeepCopy()
	if derived != nil {
		// The families are the ones this cluster allocated and the exporters serve, whatever
		// the exporters' own Services had.
		spec.IPs, spec.IPFamilies = offeredIPs(clusterIPs(derived), m.Families)
	}
	return &mcsv1beta1.ServiceImport{
		TypeMeta:   metav1.TypeMeta{APIVersion: mcsv1beta1.GroupVersion.String(), Kind: mcsv1beta1.ServiceImportKindName},
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: labels, Annotations: maps.Clone(m.Annotations)},
		Spec:       spec,
	}
}

// desiredDerived is the derived Service of the import of key: a ClusterIP Service without a
// selector (so that no controller of the cluster fills its endpoints; the imported slices do),
// with m's ports and session affinity. It has no owner: it is made before the import, whose
// spec.ips are its ClusterIPs (see importService), and remove deletes it with the import; one
// left behind while the agent was down is found by its labels and removed at the next start.
func desiredDerived(key types.NamespacedName, m mergedService) *corev1.Service {
	labels := kube.ManagedLabels()
	labels[mcsv1beta1.LabelServiceName] = key.Name
	ports := make([]corev1.ServicePort, 0, len(m.Spec.Ports))
	for _, p := range m.Spec.Ports {
		ports = append(ports, corev1.ServicePort{Name: p.Name, Protocol: protocolOrTCP(p.Protocol), Port: p.Port, AppProtocol: p.AppProtocol})
	}
	affinity := m.Spec.SessionAffinity
	if affinity == "" {
		affinity = corev1.ServiceAffinityNone
	}
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: derivedServiceName(key), Namespace: key.Namespace, Labels: labels},
		Spec: corev1.ServiceSpec{
			// Every family the cluster has: the API server allocates one ClusterIP per family
			// of a dual-stack cluster, one on a single-stack cluster (never an error), primary
			// first. Which of them the import offers follows its endpoints (offeredIPs), which
			// may change without recreating the Service.
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack),
			Type:           corev1.ServiceTypeClusterIP, Ports: ports, SessionAffinity: affinity,
			InternalTrafficPolicy: m.Spec.InternalTrafficPolicy, TrafficDistribution: m.Spec.TrafficDistribution,
		},
	}
	if affinity == corev1.ServiceAffinityClientIP {
		svc.Spec.SessionAffinityConfig = m.Spec.SessionAffinityConfig.DeepCopy()
	}
	return svc
}

// desiredImportedSlice is the import of hub slice hs into si's namespace. Its name is the hub
// slice's, which is unique per service, cluster, address type and port set, and cannot be one
// kube-controller-manager generates (<svc>-<5 random characters>).
func desiredImportedSlice(si *mcsv1beta1.ServiceImport, hs *discoveryv1.EndpointSlice, derivedName string) (*discoveryv1.EndpointSlice, error) {
	labels := map[string]string{
		mcsv1beta1.LabelServiceName:   si.Name,
		mcsv1beta1.LabelSourceCluster: hs.Labels[mcsv1beta1.LabelSourceCluster],
		// kube-controller-manager's EndpointSlice controller manages only slices whose
		// managed-by is endpointslice-controller.k8s.io, and the mirroring controller only
		// endpointslicemirroring-controller.k8s.io: with ours, both leave these alone.
		discoveryv1.LabelManagedBy: endpointSliceManager,
	}
	if derivedName != "" {
		// What kube-proxy selects endpoints by: the import's virtual IP balances over these.
		// A headless import gets no such label, so that its endpoints never join a local
		// Service that happens to have the service's name.
		labels[discoveryv1.LabelServiceName] = derivedName
	}
	s := &discoveryv1.EndpointSlice{
		TypeMeta:    metav1.TypeMeta{APIVersion: discoveryv1.SchemeGroupVersion.String(), Kind: "EndpointSlice"},
		ObjectMeta:  metav1.ObjectMeta{Name: hs.Name, Namespace: si.Namespace, Labels: labels},
		AddressType: hs.AddressType,
		Endpoints:   hs.Endpoints,
		Ports:       hs.Ports,
	}
	if err := controllerutil.SetControllerReference(si, s, kube.Scheme); err != nil {
		return nil, fmt.Errorf("owning imported EndpointSlice %s by ServiceImport %s: %w", s.Name, client.ObjectKeyFromObject(si), err)
	}
	return s, nil
}

// importUpToDate reports whether cur equals want in everything we set. Labels and annotations
// are compared whole: all of them are ours (or the exporters'), and an exported label that is
// no longer exported must go.
func importUpToDate(cur, want *mcsv1beta1.ServiceImport) bool {
	return equalMaps(cur.Labels, want.Labels) && equalMaps(cur.Annotations, want.Annotations) &&
		equality.Semantic.DeepEqual(cur.Spec, want.Spec)
}

// derivedUpToDate compares what we set; the API server fills in the rest (clusterIP,
// targetPort, families), which must not count as a difference. Owner references are not
// compared: an earlier version made the Service owned by its import, which is as good, and
// rewriting every derived Service once on upgrade would be a cold start's worth of writes.
func derivedUpToDate(cur, want *corev1.Service) bool {
	if !subset(want.Labels, cur.Labels) ||
		cur.Spec.Type != want.Spec.Type || len(cur.Spec.Selector) != 0 || cur.Spec.SessionAffinity != want.Spec.SessionAffinity ||
		len(cur.Spec.Ports) != len(want.Spec.Ports) ||
		(want.Spec.SessionAffinityConfig != nil && !equality.Semantic.DeepEqual(cur.Spec.SessionAffinityConfig, want.Spec.SessionAffinityConfig)) ||
		(want.Spec.InternalTrafficPolicy != nil && !equality.Semantic.DeepEqual(cur.Spec.InternalTrafficPolicy, want.Spec.InternalTrafficPolicy)) ||
		!equality.Semantic.DeepEqual(cur.Spec.TrafficDistribution, want.Spec.TrafficDistribution) ||
		!equality.Semantic.DeepEqual(cur.Spec.IPFamilyPolicy, want.Spec.IPFamilyPolicy) {
		return false
	}
	for i, w := range want.Spec.Ports {
		c := cur.Spec.Ports[i]
		if c.Name != w.Name || c.Protocol != w.Protocol || c.Port != w.Port || !equality.Semantic.DeepEqual(c.AppProtocol, w.AppProtocol) {
			return false
		}
	}
	return true
}

// importedSliceUpToDate compares a slice wholly ours: labels exactly, so that a label dropped
// (the import turned headless) is removed.
func importedSliceUpToDate(cur, want *discoveryv1.EndpointSlice) bool {
	return equalMaps(cur.Labels, want.Labels) && equality.Semantic.DeepEqual(cur.OwnerReferences, want.OwnerReferences) &&
		cur.AddressType == want.AddressType &&
		equality.Semantic.DeepEqual(cur.Endpoints, want.Endpoints) && equality.Semantic.DeepEqual(cur.Ports, want.Ports)
}

func importClusters(si *mcsv1beta1.ServiceImport) []string {
	out := make([]string, 0, len(si.Status.Clusters))
	for _, c := range si.Status.Clusters {
		out = append(out, c.Cluster)
	}
	return out
}

// offeredIPs keeps of a derived Service's ClusterIPs those of the families with endpoints and
// returns them with their families, in the Service's order (its primary family first). With no
// endpoints yet all are kept: nothing tells which will come, and an import without endpoints
// does not answer anyway.
func offeredIPs(ips []string, families []corev1.IPFamily) ([]string, []corev1.IPFamily) {
	var out []string
	var fams []corev1.IPFamily
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			continue // the API server allocated it; unparsable would be its bug, not an address
		}
		f := corev1.IPv4Protocol
		if !ip.Unmap().Is4() {
			f = corev1.IPv6Protocol
		}
		if len(families) > 0 && !slices.Contains(families, f) {
			continue
		}
		out, fams = append(out, s), append(fams, f)
	}
	return out, fams
}

func clusterIPs(svc *corev1.Service) []string {
	if len(svc.Spec.ClusterIPs) > 0 {
		return slices.Clone(svc.Spec.ClusterIPs)
	}
	if svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		return []string{svc.Spec.ClusterIP}
	}
	return nil
}

// ownedByUs reports whether obj carries the label Octopus puts on what it creates in a cluster.
func ownedByUs(obj client.Object) bool {
	return obj.GetLabels()[kube.ManagedByLabel] == kube.FieldManager
}

// applyInto server-side-applies want, as kube.Apply does, and decodes the server's answer into
// into: the caller needs the new object's UID (to own children) and server-set fields (the
// ClusterIP) without a second read that the cache could not yet answer.
func applyInto(ctx context.Context, c client.Client, want, into client.Object) error {
	gvk, err := apiutil.GVKForObject(want, c.Scheme())
	if err != nil {
		return fmt.Errorf("finding the kind of %T: %w", want, err)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(want)
	if err != nil {
		return fmt.Errorf("converting %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(want), err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(kube.FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(want), err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		return fmt.Errorf("decoding the applied %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(want), err)
	}
	return nil
}
