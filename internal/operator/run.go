package operator

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// ControllerName names the controller in logs and in controller-runtime's metrics
// (controller_runtime_reconcile_errors_total{controller="fabric"} counts failed reconciles).
const ControllerName = "fabric"

// LeaseName is the operator replicas' leader-election Lease in OperatorNamespace.
const LeaseName = "octopus-operator"

// DefaultMetricsPort serves the operator's metrics; distinct from the components' ports
// (internal/agent, internal/gateway, internal/routeagent).
const DefaultMetricsPort = 9476

// RunOptions configure Run.
type RunOptions struct {
	// Config is the cluster the operator runs in. Required.
	Config *rest.Config
	// LeaderElection makes replicas elect one active operator (LeaseName in Namespace).
	LeaderElection bool
	// Namespace holds the Lease. Optional: v1alpha1.OperatorNamespace.
	Namespace string
	// MetricsBindAddress and HealthProbeBindAddress: "0" turns them off.
	MetricsBindAddress, HealthProbeBindAddress string
	// AppVersion tags the components' images. Optional: the member chart's appVersion.
	AppVersion string
	// HubNamespace is the one hub namespace the operator's chart gives it rights in
	// (Reconciler.HubNamespace). Optional.
	HubNamespace string
	// SeveralInProcess lets tests run operators of several clusters in one process, whose
	// controllers share a name (controller-runtime refuses that by default).
	SeveralInProcess bool
	Log              logr.Logger
}

// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=octopus-operator,resources=leases,verbs=get;list;watch;create;update;patch;delete

// Run runs the operator until ctx ends. The Fabric and the Nodes (for cloud preparation) are
// watched; everything else the reconciler reads directly, so the operator caches no Secret,
// and the state no watch covers (broker-info, the hub) is re-read every resync.
func Run(ctx context.Context, o RunOptions) error {
	if o.Namespace == "" {
		o.Namespace = v1alpha1.OperatorNamespace
	}
	mgr, err := manager.New(o.Config, manager.Options{
		Scheme:                        kube.Scheme,
		Logger:                        o.Log,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsBindAddress},
		HealthProbeBindAddress:        o.HealthProbeBindAddress,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              LeaseName,
		LeaderElectionNamespace:       o.Namespace,
		LeaderElectionReleaseOnCancel: true,
		// The member chart's workloads are watched in its namespace alone: the operator may
		// read them nowhere else.
		Cache: cache.Options{ByObject: map[ctrl.Object]cache.ByObject{
			&appsv1.DaemonSet{}:  {Namespaces: map[string]cache.Config{v1alpha1.SystemNamespace: {}}},
			&appsv1.Deployment{}: {Namespaces: map[string]cache.Config{v1alpha1.SystemNamespace: {}}},
		}},
	})
	if err != nil {
		return fmt.Errorf("creating the operator's manager: %w", err)
	}
	c, err := ctrl.New(o.Config, ctrl.Options{Scheme: kube.Scheme})
	if err != nil {
		return fmt.Errorf("connecting to the API server %s: %w", o.Config.Host, err)
	}
	r := &Reconciler{Client: c, Config: o.Config, Events: mgr.GetEventRecorder("octopus-operator"), AppVersion: o.AppVersion,
		HubNamespace: o.HubNamespace, Log: o.Log}
	fabric := func(context.Context, ctrl.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: ctrl.ObjectKey{Name: v1alpha1.FabricName}}}
	}
	components := predicate.NewPredicateFuncs(func(o ctrl.Object) bool { return o.GetNamespace() == v1alpha1.SystemNamespace })
	err = builder.ControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(controller.Options{SkipNameValidation: ptr.To(o.SeveralInProcess)}).
		// Its own status writes change no generation and trigger nothing; a deletion does
		// (the API server bumps a custom resource's generation when it sets deletionTimestamp).
		For(&v1alpha1.Fabric{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(fabric), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		// The member chart's workloads: their rollouts decide ComponentsReady, which then
		// follows each step of a rollout instead of the next retry.
		Watches(&appsv1.DaemonSet{}, handler.EnqueueRequestsFromMapFunc(fabric), builder.WithPredicates(components)).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(fabric), builder.WithPredicates(components)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the Fabric controller: %w", err)
	}
	if err := kube.AddPingProbes(mgr, o.HealthProbeBindAddress); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
