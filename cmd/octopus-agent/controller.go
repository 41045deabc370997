package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/heartbeat"
	"github.com/octopus-mcs/octopus/internal/servicediscovery"
	"github.com/octopus-mcs/octopus/internal/version"
)

// controllerOptions are the flags of `octopus-agent controller`.
type controllerOptions struct {
	kubeconfig             string
	heartbeatInterval      time.Duration
	leaseDuration          time.Duration
	staleClusterTTL        time.Duration
	healthProbeBindAddress string
	metricsBindAddress     string
	pprofBindAddress       string
	leaderElect            bool
	kubeAPIQPS             float32
	kubeAPIBurst           int
	hubAPIQPS              float32
	hubAPIBurst            int
	exportWorkers          int
	importWorkers          int
}

// agentOptions turns the flags into the options of agent.RunController.
func (o controllerOptions) agentOptions() (agent.ControllerOptions, error) {
	member, err := agent.MemberConfig(o.kubeconfig)
	if err != nil {
		return agent.ControllerOptions{}, err
	}
	return agent.ControllerOptions{
		Member:                 member,
		HeartbeatInterval:      o.heartbeatInterval,
		LeaseDuration:          o.leaseDuration,
		StaleClusterTTL:        o.staleClusterTTL,
		HealthProbeBindAddress: o.healthProbeBindAddress,
		MetricsBindAddress:     o.metricsBindAddress,
		PprofBindAddress:       o.pprofBindAddress,
		LeaderElection:         o.leaderElect,
		Version:                version.Version,
		MemberQPS:              o.kubeAPIQPS,
		MemberBurst:            o.kubeAPIBurst,
		HubQPS:                 o.hubAPIQPS,
		HubBurst:               o.hubAPIBurst,
		ExportWorkers:          o.exportWorkers,
		ImportWorkers:          o.importWorkers,
	}, nil
}

func newControllerCommand() *cobra.Command {
	return controllerCommand(&controllerOptions{})
}

// controllerCommand is the controller command with its flags bound to o.
func controllerCommand(o *controllerOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Register the cluster with the hub and heartbeat to it",
		Long: `controller waits for the hub credential that 'octopus join' stores in the
octopus-system/octopus-hub Secret, then renews the cluster's heartbeat Lease on the hub and keeps
its Cluster's AgentConnected condition up to date. It exports this cluster's services (ServiceExports)
to the hub and imports every cluster's as ServiceImports and EndpointSlices; the endpoints of a
cluster whose heartbeat Lease has been expired for longer than --stale-cluster-ttl are withdrawn
until it heartbeats again. It runs until SIGTERM or SIGINT.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ao, err := o.agentOptions()
			if err != nil {
				return err
			}
			return agent.RunController(ctrl.SetupSignalHandler(), ao)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the member cluster; empty means in-cluster configuration")
	f.DurationVar(&o.heartbeatInterval, "heartbeat-interval", heartbeat.DefaultInterval, "how often to renew the heartbeat Lease on the hub")
	f.DurationVar(&o.leaseDuration, "lease-duration", 3*heartbeat.DefaultInterval, "how long the hub considers the cluster connected after a renewal; must exceed --heartbeat-interval")
	f.DurationVar(&o.staleClusterTTL, "stale-cluster-ttl", servicediscovery.DefaultStaleClusterTTL, "how long another cluster's heartbeat Lease may stay expired before its exported endpoints are withdrawn from this cluster; restored when it heartbeats again")
	f.StringVar(&o.healthProbeBindAddress, "health-probe-bind-address", "0", `address of the /healthz and /readyz endpoints, e.g. ":8081"; "0" turns them off`)
	f.StringVar(&o.metricsBindAddress, "metrics-bind-address", fmt.Sprintf(":%d", agent.DefaultMetricsPort), `address of the Prometheus metrics endpoint (/metrics); "0" turns it off`)
	f.StringVar(&o.pprofBindAddress, "pprof-bind-address", "0", `address of Go's /debug/pprof endpoints (heap and CPU profiles), e.g. "127.0.0.1:6060"; "0" turns them off`)
	f.Float32Var(&o.kubeAPIQPS, "kube-api-qps", agent.DefaultKubeAPIQPS, "requests per second to the member cluster's API server; a negative value turns the client-side limit off")
	f.IntVar(&o.kubeAPIBurst, "kube-api-burst", agent.DefaultKubeAPIBurst, "burst of requests to the member cluster's API server above --kube-api-qps")
	f.Float32Var(&o.hubAPIQPS, "hub-api-qps", agent.DefaultHubAPIQPS, "requests per second to the hub's API server, per client (heartbeat, export, import); a negative value turns the client-side limit off")
	f.IntVar(&o.hubAPIBurst, "hub-api-burst", agent.DefaultHubAPIBurst, "burst of requests to the hub's API server above --hub-api-qps")
	f.IntVar(&o.exportWorkers, "export-workers", servicediscovery.DefaultWorkers, "ServiceExports reconciled at once")
	f.IntVar(&o.importWorkers, "import-workers", servicediscovery.DefaultWorkers, "imported services reconciled at once")
	f.BoolVar(&o.leaderElect, "leader-elect", true, "elect one active replica through the octopus-controller Lease in octopus-system")
	return cmd
}
