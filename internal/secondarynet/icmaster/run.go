package icmaster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/ovnic"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
)

// LeaderElectionID is the icmaster's Lease: one replica writes the AZ's NB.
const LeaderElectionID = "octopus-icmaster"

// Options configure Run.
type Options struct {
	// Member is the client configuration of the member cluster (required).
	Member *rest.Config
	// ClusterID, CIDR and Pool: the cluster's ID, its secondary block and the hub's pool of
	// blocks (required).
	ClusterID  string
	CIDR, Pool netip.Prefix
	// NBEndpoint is the AZ's OVN NB database, "unix:/path", "tcp:host:port" or
	// "ssl:host:port" with NBTLS (required).
	NBEndpoint string
	NBTLS      *tls.Config
	// ICTLS is the cluster's IC client certificate (issued at join by the hub's signer) for
	// the IC SB that ovn-ic-config names: the hub's databases serve ssl: only.
	ICTLS *tls.Config
	// EndpointsFile, if set, is where every replica (leader or not) writes ovn-ic-config's IC
	// endpoints for the ovn-ic of its pod (EndpointsWriter, icconfig.EndpointsFile).
	EndpointsFile string
	// LeaderElection makes replicas elect one active icmaster in LeaderElectionNamespace.
	LeaderElection          bool
	LeaderElectionNamespace string
	// HealthProbeBindAddress and MetricsBindAddress: "0" or "" turns them off.
	HealthProbeBindAddress, MetricsBindAddress string
	Log                                        logr.Logger
}

func (o Options) validate() error {
	var errs []error
	if o.Member == nil {
		errs = append(errs, errors.New("no member cluster configuration"))
	}
	if o.ClusterID == "" {
		errs = append(errs, errors.New("the cluster ID is required"))
	}
	if _, err := icconfig.TransitAddress(o.Pool, o.CIDR); err != nil {
		errs = append(errs, err)
	}
	if o.NBEndpoint == "" {
		errs = append(errs, errors.New("the OVN NB database endpoint is required"))
	}
	if o.LeaderElection && o.LeaderElectionNamespace == "" {
		errs = append(errs, errors.New("leader election needs a namespace"))
	}
	return errors.Join(errs...)
}

// Run runs the icmaster until ctx is cancelled.
func Run(ctx context.Context, o Options) error {
	if err := o.validate(); err != nil {
		return fmt.Errorf("icmaster: %w", err)
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	key := types.NamespacedName{Namespace: icconfig.ConfigMapNamespace, Name: icconfig.ConfigMapName}
	mgr, err := manager.New(o.Member, manager.Options{
		Scheme: kube.Scheme,
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			// Only the one ConfigMap: the role grants it by name.
			ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {
				Namespaces: map[string]cache.Config{key.Namespace: {}},
				Field:      fields.OneTermEqualSelector("metadata.name", key.Name),
			}},
		},
		Metrics:                       metricsserver.Options{BindAddress: kube.MetricsBindAddress(o.MetricsBindAddress)},
		HealthProbeBindAddress:        o.HealthProbeBindAddress,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Logger:                        o.Log,
	})
	if err != nil {
		return fmt.Errorf("creating the icmaster's manager: %w", err)
	}
	if err := kube.AddPingProbes(mgr, o.HealthProbeBindAddress); err != nil {
		return err
	}
	r := &Reconciler{
		Client: mgr.GetClient(), ConfigMap: key, ClusterID: o.ClusterID, CIDR: o.CIDR, Pool: o.Pool,
		Events: mgr.GetEventRecorder("octopus-icmaster"), Log: o.Log,
		Connect: func(ctx context.Context, icsb string) (Applier, func(), error) {
			c, err := ovnic.Connect(ctx, ovnic.Options{
				NB: o.NBEndpoint, NBTLS: o.NBTLS, ICSB: icsb, ICSBTLS: o.ICTLS, Log: o.Log.WithName("ovnic")})
			if err != nil {
				return nil, nil, err
			}
			return c, c.Close, nil
		},
	}
	defer r.Close()
	err = builder.ControllerManagedBy(mgr).Named("icmaster").
		For(&corev1.ConfigMap{}).
		// Every route goes into the one AZ: any change of one re-applies the ConfigMap's AZ.
		// Status writes (ours) change no generation and bring no request.
		Watches(&v1alpha1.InterconnectRoute{}, handler.EnqueueRequestsFromMapFunc(
			func(context.Context, client.Object) []reconcile.Request {
				return []reconcile.Request{{NamespacedName: key}}
			}),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, SkipNameValidation: ptr.To(true)}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("creating the icmaster controller: %w", err)
	}
	if o.EndpointsFile != "" {
		// Not leader-elected: the standby's ovn-ic follows the ConfigMap too.
		err = builder.ControllerManagedBy(mgr).Named("ic-endpoints").
			For(&corev1.ConfigMap{}).
			WithOptions(controller.Options{MaxConcurrentReconciles: 1, SkipNameValidation: ptr.To(true), NeedLeaderElection: ptr.To(false)}).
			Complete(&EndpointsWriter{Client: mgr.GetClient(), ConfigMap: key, ClusterID: o.ClusterID, File: o.EndpointsFile,
				Log: o.Log.WithName("ic-endpoints")})
		if err != nil {
			return fmt.Errorf("creating the IC endpoints writer: %w", err)
		}
	}
	return mgr.Start(ctx)
}
