// Package servicediscovery implements the Multi-Cluster Services API (KEP-1645) across the
// cluster set: the export side publishes each exported Service of this cluster to the hub, the
// import side (import.go, merge.go) turns what every cluster published into ServiceImports,
// derived Services and EndpointSlices.
//
// What a cluster publishes for one export, in the hub namespace, all labelled
// octopus.io/cluster=<id> (which the hub's admission policy enforces),
// octopus.io/service-namespace=<ns>, multicluster.kubernetes.io/service-name=<svc> and
// multicluster.kubernetes.io/source-cluster=<id>:
//
//   - one ServiceImport, the record of the export: type, ports, session affinity, IP families,
//     traffic policies, and as annotations the export's creation time and its exported labels
//     and annotations, and under secondary addressing that its endpoints are secondary
//     addresses. Its name is recordName's; spec.ips and status stay empty.
//   - EndpointSlices holding the addresses other clusters use, as the AddressPolicy decides
//     (address.go): the ready pods' own, global or secondary addresses.
package servicediscovery

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// ExportReconciler keeps the hub's copy of each of this cluster's ServiceExports equal to the
// export, its Service and the Service's endpoints, and reports on the export's status.
//
// It needs no finalizer: deleting an export, its Service or its namespace triggers a reconcile
// that finds the export (or Service) gone and withdraws what is on the hub, and if the agent was
// down when that happened, the watch on its own hub objects replays every published service at
// start, so the orphan is found then. A finalizer would also keep a namespace from being
// deleted for as long as the agent is gone.
type ExportReconciler struct {
	// Member reads the member cluster (from the manager's cache) and writes export status.
	Member client.Client
	// Hub writes to the hub with the cluster's credential; its reads must see this cluster's
	// objects in HubNamespace (a cache restricted to them, as SetupExport builds).
	Hub          client.Client
	HubNamespace string
	ClusterID    string
	// Addresses chooses the published addresses.
	Addresses AddressPolicy
	// Exports reads every cluster's records in HubNamespace, indexed by hubServiceIndex (the
	// import side's cache). Optional: without it the Conflict condition is not set.
	Exports client.Reader
	// Workers is how many exports SetupWithManager lets reconcile at once. Optional;
	// DefaultWorkers when zero.
	Workers int

	// expectations hold our status patches the cache has not shown yet: the reconcile that
	// our own hub writes trigger would otherwise compare against the older status and patch
	// again, only to be refused for its stale resourceVersion. nil waits for none.
	expectations *expectations
}

// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=serviceexports,verbs=get;list;watch
// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=serviceexports/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Reconcile publishes or withdraws the export req names and sets its Valid and Ready
// conditions, computed from what it observes and patched once.
func (r *ExportReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	export := &mcsv1beta1.ServiceExport{}
	if err := r.Member.Get(ctx, req.NamespacedName, export); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("reading ServiceExport %s: %w", req.NamespacedName, err)
		}
		r.expectations.forget(req.NamespacedName)
		return ctrl.Result{}, r.withdraw(ctx, req.NamespacedName)
	}
	if !export.DeletionTimestamp.IsZero() {
		r.expectations.forget(req.NamespacedName)
		return ctrl.Result{}, r.withdraw(ctx, req.NamespacedName)
	}
	// After the checks above: an export going away is withdrawn at once, whatever we wait for.
	if ok, err := r.expectations.satisfied(ctx, r.Member, req.NamespacedName); err != nil {
		return ctrl.Result{}, err
	} else if !ok {
		return ctrl.Result{RequeueAfter: expectationRecheck}, nil
	}

	valid, desired, err := r.desired(ctx, export)
	if err != nil {
		return ctrl.Result{}, err
	}
	var ready metav1.Condition
	var syncErr error
	if desired == nil {
		syncErr = r.withdraw(ctx, req.NamespacedName)
		ready = condition(mcsv1beta1.ServiceExportConditionReady, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonPending, "Not exported until the export is valid")
		if valid.Reason == string(mcsv1beta1.ServiceExportReasonInvalidServiceType) || valid.Reason == string(ReasonUnsupportedIPFamily) {
			// Only the user can change that: nothing is pending.
			ready.Reason = string(mcsv1beta1.ServiceExportReasonFailed)
		}
	} else {
		syncErr = r.publish(ctx, req.NamespacedName, *desired)
		ready = condition(mcsv1beta1.ServiceExportConditionReady, metav1.ConditionTrue, mcsv1beta1.ServiceExportReasonExported,
			fmt.Sprintf("Published to the hub as ServiceImport %s/%s with %d EndpointSlice(s)", r.HubNamespace, desired.record.Name, len(desired.slices)))
	}
	if syncErr != nil {
		ready = condition(mcsv1beta1.ServiceExportConditionReady, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonFailed,
			fmt.Sprintf("Could not update the hub (retrying): %v", syncErr))
	}
	conds := []metav1.Condition{valid, ready}
	if desired != nil && r.Exports != nil {
		c, err := r.conflict(ctx, req.NamespacedName, desired.record)
		if err != nil {
			syncErr = errors.Join(syncErr, err)
		} else {
			conds = append(conds, c)
		}
	}
	var drop []string
	if desired == nil {
		// Only a published export can conflict; an old verdict would mislead.
		drop = append(drop, string(mcsv1beta1.ServiceExportConditionConflict))
	}
	statusErr := r.patchStatus(ctx, export, drop, conds...)
	if syncErr == nil && statusErr == nil {
		log.V(1).Info("Reconciled ServiceExport", "valid", valid.Status, "reason", valid.Reason)
	}
	return ctrl.Result{}, errors.Join(syncErr, statusErr)
}

// desired returns the Valid condition and, for a valid export, what to publish.
func (r *ExportReconciler) desired(ctx context.Context, export *mcsv1beta1.ServiceExport) (metav1.Condition, *published, error) {
	key := client.ObjectKeyFromObject(export)
	svc := &corev1.Service{}
	if err := r.Member.Get(ctx, key, svc); err != nil {
		if !apierrors.IsNotFound(err) {
			return metav1.Condition{}, nil, fmt.Errorf("reading Service %s: %w", key, err)
		}
		return condition(mcsv1beta1.ServiceExportConditionValid, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonNoService,
			fmt.Sprintf("Service %s does not exist; it is exported once it does", key)), nil, nil
	}
	typ, ok := ImportType(svc)
	if !ok {
		return condition(mcsv1beta1.ServiceExportConditionValid, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonInvalidServiceType,
			fmt.Sprintf("Service %s is of type %s, which cannot be exported; use ClusterIP, NodePort, LoadBalancer or headless", key, svc.Spec.Type)), nil, nil
	}
	if f, ok := r.Addresses.(familyLimited); ok {
		if msg := f.unsupportedFamilies(svc); msg != "" {
			return condition(mcsv1beta1.ServiceExportConditionValid, metav1.ConditionFalse, ReasonUnsupportedIPFamily,
				fmt.Sprintf("Service %s %s", key, msg)), nil, nil
		}
	}
	local := &discoveryv1.EndpointSliceList{}
	if err := r.Member.List(ctx, local, client.InNamespace(key.Namespace), client.MatchingFields{memberSliceIndex: localSliceKey(key.Name)}); err != nil {
		return metav1.Condition{}, nil, fmt.Errorf("listing the EndpointSlices of Service %s: %w", key, err)
	}
	sets, err := r.Addresses.Endpoints(ctx, svc, typ, local.Items)
	if err != nil {
		return metav1.Condition{}, nil, fmt.Errorf("choosing the addresses of Service %s: %w", key, err)
	}
	pub, err := desiredState(r.HubNamespace, r.ClusterID, export, svc, typ, sets)
	if err != nil {
		return metav1.Condition{}, nil, err
	}
	if _, ok := r.Addresses.(SecondaryAddresses); ok {
		// Importers on the primary network cannot reach these addresses: the record says so.
		pub.record.Annotations[v1alpha1.AddressingAnnotation] = string(v1alpha1.AddressingSecondary)
	}
	return condition(mcsv1beta1.ServiceExportConditionValid, metav1.ConditionTrue, mcsv1beta1.ServiceExportReasonValid,
		fmt.Sprintf("Service %s is exported as %s", key, typ)), &pub, nil
}

// conflict computes the export's Conflict condition (KEP-1645): the condition "will be set on
// all ServiceExports for the conflicted service", so it is True on this export whenever any
// export of the service, this one or another cluster's, loses a property to an older one; every
// exporter shows the same reasons and message, naming each losing cluster and what it lost.
// Otherwise it is False/NoConflicts. It merges exactly as every importer does, with own, the
// record this cluster publishes for key, in place of the copy on the hub, which may still be
// older.
func (r *ExportReconciler) conflict(ctx context.Context, key types.NamespacedName, own *mcsv1beta1.ServiceImport) (metav1.Condition, error) {
	list := &mcsv1beta1.ServiceImportList{}
	if err := r.Exports.List(ctx, list, client.InNamespace(r.HubNamespace), client.MatchingFields{hubServiceIndex: key.String()}); err != nil {
		return metav1.Condition{}, fmt.Errorf("listing the hub's records of %s: %w", key, err)
	}
	records := []exportRecord{parseRecord(own)}
	for i := range list.Items {
		if c := list.Items[i].Labels[mcsv1beta1.LabelSourceCluster]; c != "" && c != r.ClusterID {
			records = append(records, parseRecord(&list.Items[i]))
		}
	}
	return conflictCondition(merge(records).Conflicts, len(records)), nil
}

// conflictCondition is the Conflict condition of every export of a service whose exports
// (exporters of them) merged into conflicts: one reason per kind of conflict, in the order the
// losing clusters (sorted) first show it, and one message part per lost property.
func conflictCondition(conflicts map[string][]conflict, exporters int) metav1.Condition {
	if len(conflicts) == 0 {
		return condition(mcsv1beta1.ServiceExportConditionConflict, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonNoConflicts,
			fmt.Sprintf("No conflict among the %d export(s) of the service", exporters))
	}
	var reasons, msgs []string
	for _, cluster := range slices.Sorted(maps.Keys(conflicts)) {
		for _, c := range conflicts[cluster] {
			if !slices.Contains(reasons, string(c.Reason)) {
				reasons = append(reasons, string(c.Reason))
			}
			msgs = append(msgs, "cluster "+cluster+": "+c.Message)
		}
	}
	return metav1.Condition{
		Type: string(mcsv1beta1.ServiceExportConditionConflict), Status: metav1.ConditionTrue,
		Reason: strings.Join(reasons, ","), Message: strings.Join(msgs, "; "),
	}
}

// publish makes the hub hold exactly desired for key: it applies the record first (an importer
// that sees a slice can then find its record), then the slices, then deletes slices and records
// of key that are no longer wanted. Objects already equal to the desired ones are not written.
func (r *ExportReconciler) publish(ctx context.Context, key types.NamespacedName, desired published) error {
	records, hubSlices, err := r.onHub(ctx, key)
	if err != nil {
		return err
	}
	var errs []error
	if cur := records[desired.record.Name]; cur == nil || !recordUpToDate(cur, desired.record) {
		if err := kube.Apply(ctx, r.Hub, desired.record); err != nil {
			return fmt.Errorf("publishing ServiceImport record of %s: %w", key, err)
		}
	}
	delete(records, desired.record.Name)
	for _, s := range desired.slices {
		if cur := hubSlices[s.Name]; cur == nil || !sliceUpToDate(cur, s) {
			if err := kube.Apply(ctx, r.Hub, s); err != nil {
				errs = append(errs, fmt.Errorf("publishing EndpointSlice of %s: %w", key, err))
			}
		}
		delete(hubSlices, s.Name)
	}
	errs = append(errs, r.deleteAll(ctx, hubSlices, records))
	return errors.Join(errs...)
}

// withdraw deletes everything this cluster published for key: slices first, so that no slice
// is ever left without its record.
func (r *ExportReconciler) withdraw(ctx context.Context, key types.NamespacedName) error {
	records, hubSlices, err := r.onHub(ctx, key)
	if err != nil {
		return err
	}
	if len(records)+len(hubSlices) > 0 {
		logf.FromContext(ctx).Info("Withdrawing exported service from the hub", "service", key, "records", len(records), "endpointSlices", len(hubSlices))
	}
	return r.deleteAll(ctx, hubSlices, records)
}

func (r *ExportReconciler) deleteAll(ctx context.Context, hubSlices map[string]*discoveryv1.EndpointSlice, records map[string]*mcsv1beta1.ServiceImport) error {
	var errs []error
	for _, s := range hubSlices {
		if err := r.Hub.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting EndpointSlice %s/%s from the hub: %w", s.Namespace, s.Name, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...) // keep the records while slices remain
	}
	for _, rec := range records {
		if err := r.Hub.Delete(ctx, rec); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting ServiceImport %s/%s from the hub: %w", rec.Namespace, rec.Name, err))
		}
	}
	return errors.Join(errs...)
}

// onHub returns what this cluster has published for key, by name.
func (r *ExportReconciler) onHub(ctx context.Context, key types.NamespacedName) (map[string]*mcsv1beta1.ServiceImport, map[string]*discoveryv1.EndpointSlice, error) {
	// The cache holds only this cluster's objects: the service alone selects ours.
	sel := client.MatchingFields{hubServiceIndex: key.String()}
	recordList := &mcsv1beta1.ServiceImportList{}
	if err := r.Hub.List(ctx, recordList, client.InNamespace(r.HubNamespace), sel); err != nil {
		return nil, nil, fmt.Errorf("listing the hub's ServiceImport records of %s: %w", key, err)
	}
	sliceList := &discoveryv1.EndpointSliceList{}
	if err := r.Hub.List(ctx, sliceList, client.InNamespace(r.HubNamespace), sel); err != nil {
		return nil, nil, fmt.Errorf("listing the hub's EndpointSlices of %s: %w", key, err)
	}
	records := make(map[string]*mcsv1beta1.ServiceImport, len(recordList.Items))
	for i := range recordList.Items {
		records[recordList.Items[i].Name] = &recordList.Items[i]
	}
	hubSlices := make(map[string]*discoveryv1.EndpointSlice, len(sliceList.Items))
	for i := range sliceList.Items {
		hubSlices[sliceList.Items[i].Name] = &sliceList.Items[i]
	}
	return records, hubSlices, nil
}

// patchStatus sets the conditions on export, removes those of the types in drop, and patches
// its status if that changed. A
// conflict means the cache held an old export; the newer one's watch event brings it back here,
// so the conflict is not an error.
func (r *ExportReconciler) patchStatus(ctx context.Context, export *mcsv1beta1.ServiceExport, drop []string, conds ...metav1.Condition) error {
	orig := export.DeepCopy()
	for _, t := range drop {
		meta.RemoveStatusCondition(&export.Status.Conditions, t)
	}
	for _, c := range conds {
		c.ObservedGeneration = export.Generation
		meta.SetStatusCondition(&export.Status.Conditions, c)
	}
	if equality.Semantic.DeepEqual(orig.Status, export.Status) {
		return nil
	}
	err := r.Member.Status().Patch(ctx, export, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	switch {
	case err == nil:
		r.expectations.wrote(client.ObjectKeyFromObject(export), writtenExport, export)
	case !apierrors.IsConflict(err) && !apierrors.IsNotFound(err):
		return fmt.Errorf("updating the status of ServiceExport %s: %w", client.ObjectKeyFromObject(export), err)
	}
	return nil
}

func condition(t mcsv1beta1.ServiceExportConditionType, status metav1.ConditionStatus, reason mcsv1beta1.ServiceExportConditionReason, msg string) metav1.Condition {
	return metav1.Condition{Type: string(t), Status: status, Reason: string(reason), Message: msg}
}

// recordUpToDate reports whether cur already carries everything desired sets. Others' labels
// and annotations on cur do not matter: server-side apply leaves them alone anyway.
func recordUpToDate(cur, desired *mcsv1beta1.ServiceImport) bool {
	return subset(desired.Labels, cur.Labels) && subset(desired.Annotations, cur.Annotations) &&
		sameKeys(desired.Annotations, cur.Annotations, ownedAnnotations) &&
		equality.Semantic.DeepEqual(cur.Spec, desired.Spec)
}

func sliceUpToDate(cur, desired *discoveryv1.EndpointSlice) bool {
	return subset(desired.Labels, cur.Labels) && cur.AddressType == desired.AddressType &&
		equality.Semantic.DeepEqual(cur.Endpoints, desired.Endpoints) && equality.Semantic.DeepEqual(cur.Ports, desired.Ports)
}
