// Package operator reconciles the Fabric: the cluster's one custom resource that makes it the
// hub (spec.hubConfig) or joins it to a hub (spec.joinConfig), and prepares its gateway nodes
// (spec.cloudPrepareConfig). It drives the same libraries as the CLI — internal/hub (hub
// deploy), internal/cluster (join, leave) and internal/manifests/release (the member chart) — so the
// operator and `octopus join` apply the same rendered manifests. It is provisioning code: only
// cmd/octopus-operator links it, never the daemons (internal/archtest).
package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// Finalizer holds a Fabric until the cluster left its hub (joinConfig) or its published
// broker-info is withdrawn (hubConfig).
const Finalizer = "octopus.io/fabric"

// Defaults of Reconciler.
const (
	// DefaultRetryInterval spaces attempts while the hub is unreachable or an input is wrong:
	// short enough that a hub coming back is noticed quickly, long enough not to hammer it.
	DefaultRetryInterval = 10 * time.Second
	// DefaultResyncInterval is how often a settled Fabric re-reads the state it reports that no
	// watch covers (the Cluster and Peer on the hub, the octopus-dns Deployment).
	DefaultResyncInterval = time.Minute
)

// The Fabric, and the events on it and on the leader-election Lease (client-go's leader
// election records core events).
//
// +kubebuilder:rbac:groups=octopus.io,resources=fabrics,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=octopus.io,resources=fabrics/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=octopus.io,resources=fabrics/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconciler reconciles the Fabric named v1alpha1.FabricName.
type Reconciler struct {
	// Client reads and writes the cluster the operator runs in.
	Client ctrl.Client
	// Config is the same cluster for the libraries that make their own clients (hub deploy,
	// join, leave, Helm).
	Config *rest.Config
	// Events records condition transitions on the Fabric. Optional.
	Events events.EventRecorder
	// AppVersion tags the components' images (the member chart's appVersion). Optional: the
	// chart's.
	AppVersion string
	// RetryInterval and ResyncInterval: DefaultRetryInterval and DefaultResyncInterval if zero.
	RetryInterval, ResyncInterval time.Duration
	// HubNamespace is the one hub namespace the operator's chart gives it rights in (its
	// hub.namespace), NoHubNamespace when the chart gives it none (hub.enabled false): a hub
	// Fabric naming another is refused with a condition that says which chart value to set,
	// rather than failing Forbidden halfway through the hub's deployment. Empty: no check (an
	// operator run with an administrator's credentials, as the lab's hub operator is).
	HubNamespace string
	// Providers prepare gateway nodes, by cloud. Optional: Providers(Client).
	Providers map[v1alpha1.CloudProvider]Provider
	Log       logr.Logger
}

// Reconcile converges the Fabric: its role's phase, cloud preparation, then the status, which
// it writes only when it changed so that an unchanged Fabric costs no write.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	f := &v1alpha1.Fabric{}
	if err := r.Client.Get(ctx, req.NamespacedName, f); err != nil {
		return reconcile.Result{}, ctrl.IgnoreNotFound(err)
	}
	log := r.Log.WithValues("fabric", f.Name, "generation", f.Generation)
	ctx = logr.NewContext(ctx, log)
	if f.Name != v1alpha1.FabricName {
		return reconcile.Result{}, nil // the CRD refuses other names; nothing to do
	}
	st := f.Status.DeepCopy()
	if !f.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(f, Finalizer) {
			return reconcile.Result{}, nil
		}
		done, err := r.finalize(ctx, f, st)
		if !done || err != nil {
			return r.writeStatus(ctx, f, st, reconcile.Result{RequeueAfter: r.retryInterval()}, err)
		}
		patch := ctrl.MergeFrom(f.DeepCopy())
		controllerutil.RemoveFinalizer(f, Finalizer)
		if err := r.Client.Patch(ctx, f, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("removing finalizer %s: %w", Finalizer, err)
		}
		log.Info("Fabric finalized")
		return reconcile.Result{}, nil
	}
	if !controllerutil.ContainsFinalizer(f, Finalizer) {
		patch := ctrl.MergeFrom(f.DeepCopy())
		controllerutil.AddFinalizer(f, Finalizer)
		if err := r.Client.Patch(ctx, f, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding finalizer %s: %w", Finalizer, err)
		}
	}

	var settled bool
	var err error
	switch {
	case f.Spec.HubConfig != nil:
		settled, err = r.reconcileHub(ctx, f, st)
	case f.Spec.JoinConfig != nil:
		settled, err = r.reconcileMember(ctx, f, st)
	}
	if f.Spec.CloudPrepareConfig != nil {
		if !r.reconcileCloud(ctx, f, st) {
			settled = false
		}
	} else {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.FabricCloudPrepared)
		st.GatewayNodes = nil
	}
	setReady(f, st)
	result := reconcile.Result{RequeueAfter: r.resyncInterval()}
	if !settled {
		result.RequeueAfter = r.retryInterval()
	}
	return r.writeStatus(ctx, f, st, result, err)
}

// writeStatus stores st if it differs from f's status, records an event per condition that
// changed status, and returns result and err.
func (r *Reconciler) writeStatus(ctx context.Context, f *v1alpha1.Fabric, st *v1alpha1.FabricStatus, result reconcile.Result, err error) (reconcile.Result, error) {
	st.ObservedGeneration = f.Generation
	if equality.Semantic.DeepEqual(&f.Status, st) {
		return result, err
	}
	old := f.Status.DeepCopy()
	f.Status = *st
	if uerr := r.Client.Status().Update(ctx, f); uerr != nil {
		return reconcile.Result{}, fmt.Errorf("updating the Fabric's status: %w", uerr)
	}
	r.recordTransitions(f, old.Conditions, st.Conditions)
	return result, err
}

// recordTransitions records one event per condition whose status changed, so that `kubectl
// describe fabric` tells the story of a join or a leave.
func (r *Reconciler) recordTransitions(f *v1alpha1.Fabric, before, after []metav1.Condition) {
	if r.Events == nil {
		return
	}
	for _, c := range after {
		prev := meta.FindStatusCondition(before, c.Type)
		if prev != nil && prev.Status == c.Status {
			continue
		}
		kind := corev1.EventTypeNormal
		if c.Status == metav1.ConditionFalse && c.Type != v1alpha1.FabricReady {
			kind = corev1.EventTypeWarning
		}
		r.Events.Eventf(f, nil, kind, c.Reason, c.Type, "%s=%s: %s", c.Type, c.Status, c.Message)
	}
}

// set sets condition typ on st for the Fabric's generation.
func set(f *v1alpha1.Fabric, st *v1alpha1.FabricStatus, typ string, ok bool, reason, msg string, args ...any) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: fmt.Sprintf(msg, args...), ObservedGeneration: f.Generation,
	})
}

// phases lists the conditions Ready sums up for the Fabric's spec.
func phases(f *v1alpha1.Fabric) []string {
	var out []string
	if f.Spec.HubConfig != nil {
		out = append(out, v1alpha1.FabricBrokerReady)
	}
	if f.Spec.JoinConfig != nil {
		out = append(out, v1alpha1.FabricJoined, v1alpha1.FabricComponentsReady, v1alpha1.FabricGatewaysConnected, v1alpha1.FabricServiceDiscoveryReady)
	}
	if f.Spec.CloudPrepareConfig != nil {
		out = append(out, v1alpha1.FabricCloudPrepared)
	}
	return out
}

// setReady is True when every phase is, else False with the first phase that is not.
func setReady(f *v1alpha1.Fabric, st *v1alpha1.FabricStatus) {
	for _, typ := range phases(f) {
		c := meta.FindStatusCondition(st.Conditions, typ)
		if c == nil {
			set(f, st, v1alpha1.FabricReady, false, "Pending", "%s is not reported yet", typ)
			return
		}
		if c.Status != metav1.ConditionTrue {
			set(f, st, v1alpha1.FabricReady, false, c.Reason, "%s: %s", typ, c.Message)
			return
		}
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.FabricGatewaysConnected); c != nil && c.Reason == ReasonNoOtherClusters {
		set(f, st, v1alpha1.FabricReady, true, ReasonNoOtherClusters, "every phase is ready; %s", c.Message)
		return
	}
	set(f, st, v1alpha1.FabricReady, true, "Ready", "every phase is ready")
}

func (r *Reconciler) retryInterval() time.Duration {
	if r.RetryInterval > 0 {
		return r.RetryInterval
	}
	return DefaultRetryInterval
}

func (r *Reconciler) resyncInterval() time.Duration {
	if r.ResyncInterval > 0 {
		return r.ResyncInterval
	}
	return DefaultResyncInterval
}

// hash identifies a set of inputs: the JSON of v.
func hash(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("hashing %T: %v", v, err)) // only JSON-safe types are hashed
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
