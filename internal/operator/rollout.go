package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// ReasonRollingOut is ComponentsReady (and so Ready) while a workload of the member chart is
// still being replaced: a Helm upgrade returns when the objects are written, long before the
// gateway pods run the new template, and traffic is down while they do.
const ReasonRollingOut = "RollingOut"

// rollout is what a workload's controller reports about its pods, reduced to what decides
// whether a rollout finished: the counts from its status and the pods it still has.
type rollout struct {
	kind, name string
	// generation and observed: the controller has seen the latest spec when observed catches up.
	generation, observed int64
	// desired, updated and available pods (for a DaemonSet: nodes).
	desired, updated, available int32
	// misscheduled DaemonSet pods run on nodes the selector no longer picks (a gateway moved).
	misscheduled int32
	// pods are the workload's pods that exist, terminating ones included.
	pods, terminating int32
}

// verdict says whether r finished: its controller saw the latest spec, every pod is the new
// template's and available, and no old pod is left (running or terminating). The message
// names the workload and the count that is short, as `kubectl rollout status` would.
func (r rollout) verdict() (done bool, message string) {
	what := r.kind + " " + r.name
	switch {
	case r.observed < r.generation:
		return false, fmt.Sprintf("%s: its controller has not seen generation %d yet (observed %d)", what, r.generation, r.observed)
	case r.updated < r.desired:
		return false, fmt.Sprintf("%s %d/%d updated", what, r.updated, r.desired)
	case r.misscheduled > 0:
		return false, fmt.Sprintf("%s: %d pod(s) on nodes no longer selected", what, r.misscheduled)
	case r.available < r.desired:
		return false, fmt.Sprintf("%s %d/%d available", what, r.available, r.desired)
	case r.terminating > 0:
		return false, fmt.Sprintf("%s: %d old pod(s) terminating", what, r.terminating)
	case r.pods > r.desired:
		return false, fmt.Sprintf("%s: %d pod(s) for %d desired, old ones not gone yet", what, r.pods, r.desired)
	}
	return true, ""
}

func daemonSetRollout(ds *appsv1.DaemonSet) rollout {
	s := ds.Status
	return rollout{
		kind: "daemonset", name: ds.Name, generation: ds.Generation, observed: s.ObservedGeneration,
		desired: s.DesiredNumberScheduled, updated: s.UpdatedNumberScheduled, available: s.NumberAvailable,
		misscheduled: s.NumberMisscheduled,
	}
}

func deploymentRollout(d *appsv1.Deployment) rollout {
	desired := int32(1)
	if d.Spec.Replicas != nil {
		desired = *d.Spec.Replicas
	}
	s := d.Status
	return rollout{
		kind: "deployment", name: d.Name, generation: d.Generation, observed: s.ObservedGeneration,
		desired: desired, updated: s.UpdatedReplicas, available: s.AvailableReplicas,
	}
}

// workload is a rollout and the selector of its pods.
type workload struct {
	r   rollout
	sel *metav1.LabelSelector
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=list

// rollingOut lists the member chart's DaemonSets and Deployments and returns, for the first
// whose rollout has not finished, why (empty when every one has). The pods are counted from a
// list, since a workload's status does not count the old pods still terminating: until they
// are gone a gateway may still hold the node's tunnel port and routes.
func (r *Reconciler) rollingOut(ctx context.Context) (string, error) {
	ns := ctrl.InNamespace(v1alpha1.SystemNamespace)
	var all []workload
	dss := &appsv1.DaemonSetList{}
	if err := r.Client.List(ctx, dss, ns); err != nil {
		return "", fmt.Errorf("listing the DaemonSets in %s: %w", v1alpha1.SystemNamespace, err)
	}
	for i := range dss.Items {
		all = append(all, workload{daemonSetRollout(&dss.Items[i]), dss.Items[i].Spec.Selector})
	}
	ds := &appsv1.DeploymentList{}
	if err := r.Client.List(ctx, ds, ns); err != nil {
		return "", fmt.Errorf("listing the Deployments in %s: %w", v1alpha1.SystemNamespace, err)
	}
	for i := range ds.Items {
		all = append(all, workload{deploymentRollout(&ds.Items[i]), ds.Items[i].Spec.Selector})
	}
	// In name order, so the message is stable: DaemonSets (the gateway's first) before
	// Deployments.
	slices.SortStableFunc(all, func(a, b workload) int {
		return strings.Compare(a.r.kind+"/"+a.r.name, b.r.kind+"/"+b.r.name)
	})
	for _, w := range all {
		if w.sel == nil {
			continue
		}
		pods := &corev1.PodList{}
		if err := r.Client.List(ctx, pods, ns, ctrl.MatchingLabels(w.sel.MatchLabels)); err != nil {
			return "", fmt.Errorf("listing the pods of %s %s: %w", w.r.kind, w.r.name, err)
		}
		ro := w.r
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				ro.terminating++
			} else if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				ro.pods++
			}
		}
		if done, msg := ro.verdict(); !done {
			return msg, nil
		}
	}
	return "", nil
}
