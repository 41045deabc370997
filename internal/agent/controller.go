// Package agent wires the components of the octopus-agent daemon, so that cmd/octopus-agent
// only parses flags: the controller into a controller-runtime manager (RunController), and
// around the gateway's own Run its listeners and the host firewall's lifecycle (gateway.go).
package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/globalnet"
	"github.com/octopus-mcs/octopus/internal/heartbeat"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/servicediscovery"
)

// The agent's client-side rate limits, towards the member cluster and towards the hub, when
// ControllerOptions leaves them zero. client-go's own default (5 QPS, burst 10) is meant for
// occasional tools: every new ClusterSetIP import costs about five member writes, so it capped
// a cold start at one import per second (the "MCS scale" benchmark measured the agent 3.9x
// slower than with 100 QPS). 50/100 is what the kubelet (since 1.27) and kube-scheduler default
// to for the same reason, a controller whose work grows with the cluster. We keep a limit at
// all, rather than controller-runtime's GetConfig choice of none (QPS -1, relying on API
// Priority and Fairness alone), because the hub is shared by every cluster of the set and a
// fleet of agents starting at once should not lean on the server's fairness to stay polite;
// a negative value still turns the client-side limit off.
//
// Towards the member the limit is higher: the agent is the only writer of what it imports
// there, and controller-runtime gives every kind its own bucket, so the ServiceImport kind
// alone (an import and its status per service) capped a cold start of 10,000 imports at 400 s
// with 50 QPS. 200 per kind lets it finish in about 100 s while the import workers (5 by
// default) still bound how many writes are in flight; docs/service-discovery.md, "Fleet scale".
const (
	DefaultKubeAPIQPS   float32 = 200
	DefaultKubeAPIBurst         = 400
	DefaultHubAPIQPS    float32 = 50
	DefaultHubAPIBurst          = 100
)

// DefaultMetricsPort is where `octopus-agent controller` serves controller-runtime's metrics
// (reconcile errors and latency, the workqueues, the API clients) and Octopus's (export →
// import propagation, heartbeats) unless told otherwise. Distinct from the gateway's and the
// route agent's (gateway.DefaultMetricsPort, routeagent.DefaultMetricsPort), so that the
// three never clash, wherever they run; see docs/architecture.md §6j.
const DefaultMetricsPort = 9475

// ControllerOptions configures RunController.
type ControllerOptions struct {
	// Member is the client configuration of the member cluster the agent runs in. Required.
	Member *rest.Config
	// HeartbeatInterval and LeaseDuration configure the heartbeat (see heartbeat.Options).
	HeartbeatInterval time.Duration
	LeaseDuration     time.Duration
	// StaleClusterTTL is how long another cluster's heartbeat Lease may stay expired before its
	// endpoints are withdrawn from this cluster's imports. Optional; the default of
	// servicediscovery.DefaultStaleClusterTTL when zero.
	StaleClusterTTL time.Duration
	// HealthProbeBindAddress, MetricsBindAddress and PprofBindAddress are the manager's listen
	// addresses; "0" turns them off ("" too, for pprof, which is off unless asked for).
	HealthProbeBindAddress string
	MetricsBindAddress     string
	PprofBindAddress       string
	// LeaderElection makes replicas elect one active controller through the
	// v1alpha1.ControllerLeaseName Lease in octopus-system.
	LeaderElection bool
	// Identity names this replica in heartbeat Leases. Optional; the hostname when empty.
	Identity string
	// Version is reported to the hub as the agent's version.
	Version string
	// CredentialPollInterval is how often to look for the hub credential while it is missing.
	// Optional; hubaccess.DefaultPollInterval when zero.
	CredentialPollInterval time.Duration
	// CredentialRenewFraction of the hub token's lifetime passes before it is renewed.
	// Optional; hubaccess.DefaultRenewFraction when zero.
	CredentialRenewFraction float64
	// MemberQPS and MemberBurst limit the requests to the member cluster. Optional: when zero,
	// Member's own QPS and Burst, and when those are zero too, DefaultKubeAPIQPS and
	// DefaultKubeAPIBurst. A negative QPS turns the client-side limit off.
	MemberQPS   float32
	MemberBurst int
	// HubQPS and HubBurst limit the requests to the hub with the cluster's credential.
	// Optional: DefaultHubAPIQPS and DefaultHubAPIBurst when zero; a negative QPS turns the
	// limit off.
	HubQPS   float32
	HubBurst int
	// ExportWorkers and ImportWorkers are how many exports and imported services are
	// reconciled at once. Optional; servicediscovery.DefaultWorkers when zero.
	ExportWorkers int
	ImportWorkers int
}

// withRateLimit returns a copy of cfg limited to qps and burst; where those are zero, cfg's own
// values are kept, and where cfg's are zero too, defQPS and defBurst apply.
func withRateLimit(cfg *rest.Config, qps float32, burst int, defQPS float32, defBurst int) *rest.Config {
	out := rest.CopyConfig(cfg)
	switch {
	case qps != 0:
		out.QPS = qps
	case out.QPS == 0:
		out.QPS = defQPS
	}
	switch {
	case burst != 0:
		out.Burst = burst
	case out.Burst == 0:
		out.Burst = defBurst
	}
	return out
}

// MemberRESTConfig is the member cluster's client configuration with o's rate limit.
func (o ControllerOptions) MemberRESTConfig() *rest.Config {
	return withRateLimit(o.Member, o.MemberQPS, o.MemberBurst, DefaultKubeAPIQPS, DefaultKubeAPIBurst)
}

// HubRESTConfig is the client configuration of the hub with the live credential and o's rate
// limit. The credential's configuration carries no limit of its own: it is shared with the CLI.
func (o ControllerOptions) HubRESTConfig(cred *hubaccess.Live) *rest.Config {
	return withRateLimit(cred.RESTConfig(), o.HubQPS, o.HubBurst, DefaultHubAPIQPS, DefaultHubAPIBurst)
}

// MemberConfig returns the member cluster's client configuration: from the kubeconfig file at
// path, or the in-cluster configuration when path is empty.
func MemberConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("loading the in-cluster configuration (outside a cluster, pass --kubeconfig): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// managerOptions are the options of the agent's manager of the member cluster.
func (o ControllerOptions) managerOptions() manager.Options {
	return manager.Options{
		Scheme: kube.Scheme,
		// Nothing the agent runs reads managedFields, and they are often the largest part of
		// a cached object (every Service, EndpointSlice and import of the member is cached).
		// The copies of other clusters' GatewayExIps have a cache of their own, in the
		// member's namespace alone (gatewayexip.go): a ByObject entry here would need their
		// CRD served before the manager is made, which is before join installs it.
		Cache:                   cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsBindAddress},
		PprofBindAddress:        o.PprofBindAddress,
		HealthProbeBindAddress:  o.HealthProbeBindAddress,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        v1alpha1.ControllerLeaseName,
		LeaderElectionNamespace: v1alpha1.SystemNamespace,
		// Hand over at once on a clean shutdown (rollouts) instead of after the lease expires;
		// the manager stops our runnables before it releases the lock.
		LeaderElectionReleaseOnCancel: true,
	}
}

// The controller's leader election (controller-runtime's, see managerOptions): the Lease is
// created unnamed (a create carries no name to authorize), then read and renewed by name; the
// election records events on it. What the controllers need is servicediscovery's markers, the
// credential hubaccess's.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=octopus-system,resources=leases,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=octopus-system,resources=leases,resourceNames=octopus-controller,verbs=get;update
// +kubebuilder:rbac:groups="",namespace=octopus-system,resources=events,verbs=create;patch
// The controller renews the hub credential (hubaccess.Live.Renew) and stores the new token:
// +kubebuilder:rbac:groups="",namespace=octopus-system,resources=secrets,resourceNames=octopus-hub,verbs=update

// RunController runs the agent's controller against the member cluster until ctx is cancelled:
// it waits for the hub credential, then heartbeats to the hub, exports this cluster's services
// and imports every cluster's.
func RunController(ctx context.Context, o ControllerOptions) error {
	if o.Member == nil {
		return errors.New("running the controller: no member cluster configuration")
	}
	// Checked again by heartbeat.New, but only once the cluster has joined, which may be
	// much later: a bad flag should fail at startup.
	if o.HeartbeatInterval > 0 && o.LeaseDuration > 0 && o.LeaseDuration <= o.HeartbeatInterval {
		return fmt.Errorf("lease duration %s must be longer than the heartbeat interval %s", o.LeaseDuration, o.HeartbeatInterval)
	}
	if o.StaleClusterTTL < 0 {
		return fmt.Errorf("the stale cluster TTL %s must not be negative; pass 0 for the default %s", o.StaleClusterTTL, servicediscovery.DefaultStaleClusterTTL)
	}
	if o.ExportWorkers < 0 || o.ImportWorkers < 0 {
		return fmt.Errorf("the export and import workers (%d, %d) must not be negative; pass 0 for the default %d", o.ExportWorkers, o.ImportWorkers, servicediscovery.DefaultWorkers)
	}
	mgr, err := manager.New(o.MemberRESTConfig(), o.managerOptions())
	if err != nil {
		return fmt.Errorf("creating the controller manager: %w", err)
	}
	if err := kube.AddPingProbes(mgr, o.HealthProbeBindAddress); err != nil {
		return err
	}
	hubRunner := &hubComponents{opts: o, mgr: mgr}
	if err := mgr.Add(hubRunner); err != nil {
		return fmt.Errorf("adding the hub components: %w", err)
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the controller manager: %w", err)
	}
	return nil
}

// hubComponents runs, on the elected replica, everything that talks to the hub. It waits for
// the hub credential inside the manager rather than before starting it, so that health probes
// and leader election work while the cluster has not joined yet.
type hubComponents struct {
	opts ControllerOptions
	mgr  manager.Manager
}

func (r *hubComponents) NeedLeaderElection() bool { return true }

func (r *hubComponents) Start(ctx context.Context) error {
	cred, err := hubaccess.WaitForCredential(ctx, r.mgr.GetAPIReader(), r.opts.CredentialPollInterval)
	if err != nil {
		if ctx.Err() != nil {
			return nil //nolint:nilerr // shutting down before the cluster joined is not a failure
		}
		return err
	}
	// The credential expires: renew it for as long as this replica leads, with every hub
	// client below sending the current token.
	live := hubaccess.NewLive(cred)
	// Uncached: the manager's client would watch every Secret of the cluster for this one.
	member, err := client.New(r.mgr.GetConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		return fmt.Errorf("creating a client of the member cluster: %w", err)
	}
	go func() {
		if err := live.Renew(ctx, hubaccess.RenewOptions{Member: member, Fraction: r.opts.CredentialRenewFraction}); err != nil {
			logf.FromContext(ctx).Error(err, "Not renewing the hub credential")
		}
	}()
	hubCfg := r.opts.HubRESTConfig(live)
	hubClient, err := client.New(hubCfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return fmt.Errorf("creating a client of the hub %s: %w", cred.Server, err)
	}
	// The hub may be down when the agent starts (docs/architecture.md §6b): what was imported
	// stays in place meanwhile, since nothing here writes to the member until the hub's caches
	// have synced.
	hubReturned, err := waitForHub(ctx, hubClient, cred)
	if err != nil {
		if ctx.Err() != nil {
			return nil //nolint:nilerr // shutting down while the hub is unreachable is not a failure
		}
		return err
	}
	// This cluster's addressing (join set it and it does not change while joined).
	cl := &v1alpha1.Cluster{}
	if err := hubClient.Get(ctx, client.ObjectKey{Namespace: cred.Namespace, Name: cred.ClusterID}, cl); err != nil {
		return fmt.Errorf("reading this cluster's Cluster %s on the hub for its addressing: %w", cred.ClusterID, err)
	}
	addresses, err := r.setupAddressing(ctx, cl)
	if err != nil {
		return err
	}
	// Added now rather than with the manager: they need the credential, and the MCS CRDs
	// they watch exist only once the cluster has joined.
	if err := servicediscovery.Setup(r.mgr, servicediscovery.ExportOptions{
		Hub: hubCfg, HubNamespace: cred.Namespace, ClusterID: cred.ClusterID, Addresses: addresses,
		StaleClusterTTL: r.opts.StaleClusterTTL, HubMapper: hubClient.RESTMapper(),
		ExportWorkers: r.opts.ExportWorkers, ImportWorkers: r.opts.ImportWorkers, HubReturned: hubReturned,
	}); err != nil {
		return err
	}
	// Other clusters' VPC gateways, which this cluster's VpcNatTunnels end at (issue 33).
	copies, err := NewGatewayExIPCopies(r.mgr)
	if err != nil {
		return err
	}
	if err := SetupGatewayExIPSync(r.mgr, copies, hubCfg, cred.Namespace, cred.ClusterID); err != nil {
		return err
	}
	// This cluster's VPC gateways, published for the others' VpcNatTunnels (issue 33).
	if err := SetupGatewayExIPPublish(r.mgr, hubCfg, cred.Namespace, cred.ClusterID, cl.Spec.GlobalCIDR); err != nil {
		return err
	}
	// The VpcNatTunnels' status: the remote gateways above, and this cluster's global CIDR.
	if err := SetupVpcNatTunnels(r.mgr, copies, cl.Spec.GlobalCIDR, KernelGREProbe()); err != nil {
		return err
	}
	// The cluster's CoreDNS asks octopus-dns for the PTR records of other clusters' endpoints
	// only in the reverse zones Octopus's block names; they follow the clusters that come and go.
	go keepReverseZones(ctx, hubClient, member, cred.Namespace, cred.ClusterID)
	hb, err := heartbeat.New(heartbeat.Options{
		Hub:           hubClient,
		Namespace:     cred.Namespace,
		ClusterID:     cred.ClusterID,
		Interval:      r.opts.HeartbeatInterval,
		LeaseDuration: r.opts.LeaseDuration,
		Identity:      r.opts.Identity,
		Version:       r.opts.Version,
	})
	if err != nil {
		return err
	}
	return hb.Start(ctx)
}

// setupAddressing returns, from this cluster's Cluster on the hub, the export side's address
// policy: nil (direct), SecondaryAddresses (the pods' net1 addresses, docs/architecture.md
// §6s) or GlobalAddresses. A globalnet cluster also gets the allocator of its global ingress addresses
// (docs/architecture.md §6h), on this elected replica only: two allocators would hand out one
// free address twice.
func (r *hubComponents) setupAddressing(ctx context.Context, cl *v1alpha1.Cluster) (servicediscovery.AddressPolicy, error) {
	switch cl.Spec.Addressing {
	case v1alpha1.AddressingGlobalnet:
	case v1alpha1.AddressingSecondary:
		logf.FromContext(ctx).Info("Secondary addressing: services are exported with their pods' net1 addresses", "secondaryCIDR", cl.Spec.SecondaryCIDR)
		return servicediscovery.SecondaryAddresses{}, nil
	default:
		return nil, nil
	}
	layout, err := globalnet.ClusterLayout(cl.Spec)
	if err != nil {
		return nil, err
	}
	if err := globalnet.SetupAllocator(r.mgr, layout); err != nil {
		return nil, err
	}
	logf.FromContext(ctx).Info("Globalnet addressing", "globalCIDR", layout.CIDR.String(), "egress", layout.ClusterEgress.String(), "pool", layout.Pool.String())
	return servicediscovery.GlobalAddresses{}, nil
}

// resolveKinds asks m for the mapping of every kind, so that it has them cached.
func resolveKinds(m meta.RESTMapper, kinds []schema.GroupVersionKind) error {
	for _, gvk := range kinds {
		if _, err := m.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return fmt.Errorf("discovering %s on the hub: %w", gvk.Kind, err)
		}
	}
	return nil
}

const (
	// hubRetryInitial and hubRetryMax bound the backoff between attempts to reach the hub at
	// start: quick when the hub is only restarting, at most one request every few seconds
	// when it is down for long.
	hubRetryInitial = 200 * time.Millisecond
	hubRetryMax     = 5 * time.Second
)

// waitForHub returns once the hub answers a read of this cluster's Cluster object and
// hubClient's RESTMapper has resolved servicediscovery.HubKinds (the controllers' hub caches
// share that mapper, so setting them up needs no further request), retrying with backoff
// while the hub is unreachable and logging when it starts and stops waiting. It returns when
// the hub answered if it had to wait, zero otherwise. Only ctx ends it early: an agent that
// exits because the hub is down would gain nothing by restarting.
func waitForHub(ctx context.Context, hubClient client.Client, cred hubaccess.Credential) (time.Time, error) {
	log := logf.FromContext(ctx)
	key := client.ObjectKey{Namespace: cred.Namespace, Name: cred.ClusterID}
	delay := hubRetryInitial
	start := time.Now()
	for attempt := 0; ; attempt++ {
		reqCtx, cancel := context.WithTimeout(ctx, hubRetryMax)
		err := hubClient.Get(reqCtx, key, &v1alpha1.Cluster{})
		cancel()
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			err = resolveKinds(hubClient.RESTMapper(), servicediscovery.HubKinds)
		}
		if err == nil {
			// The hub answers: a missing Cluster or a refused credential is the heartbeat's to
			// report, and the controllers' to retry.
			if attempt == 0 {
				return time.Time{}, nil
			}
			log.Info("Reached the hub", "hub", cred.Server, "after", time.Since(start).Round(time.Millisecond).String())
			return time.Now(), nil
		}
		if attempt == 0 {
			log.Info("Waiting for the hub to become reachable; imported services stay as they are meanwhile", "hub", cred.Server, "reason", err.Error())
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for the hub %s: %w", cred.Server, context.Cause(ctx))
		case <-time.After(delay):
		}
		delay = min(2*delay, hubRetryMax)
	}
}
