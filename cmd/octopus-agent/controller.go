package main

import (
	"time"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/cluster"
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
	leaderElect            bool
}

func newControllerCommand() *cobra.Command {
	o := controllerOptions{}
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
			member, err := agent.MemberConfig(o.kubeconfig)
			if err != nil {
				return err
			}
			return agent.RunController(ctrl.SetupSignalHandler(), agent.ControllerOptions{
				Member:                 member,
				HeartbeatInterval:      o.heartbeatInterval,
				LeaseDuration:          o.leaseDuration,
				StaleClusterTTL:        o.staleClusterTTL,
				HealthProbeBindAddress: o.healthProbeBindAddress,
				MetricsBindAddress:     o.metricsBindAddress,
				LeaderElection:         o.leaderElect,
				Version:                version.Version,
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the member cluster; empty means in-cluster configuration")
	f.DurationVar(&o.heartbeatInterval, "heartbeat-interval", cluster.DefaultHeartbeatInterval, "how often to renew the heartbeat Lease on the hub")
	f.DurationVar(&o.leaseDuration, "lease-duration", 3*cluster.DefaultHeartbeatInterval, "how long the hub considers the cluster connected after a renewal; must exceed --heartbeat-interval")
	f.DurationVar(&o.staleClusterTTL, "stale-cluster-ttl", servicediscovery.DefaultStaleClusterTTL, "how long another cluster's heartbeat Lease may stay expired before its exported endpoints are withdrawn from this cluster; restored when it heartbeats again")
	f.StringVar(&o.healthProbeBindAddress, "health-probe-bind-address", "0", `address of the /healthz and /readyz endpoints, e.g. ":8081"; "0" turns them off`)
	f.StringVar(&o.metricsBindAddress, "metrics-bind-address", "0", `address of the metrics endpoint, e.g. ":8080"; "0" turns it off`)
	f.BoolVar(&o.leaderElect, "leader-elect", true, "elect one active replica through the octopus-controller Lease in octopus-system")
	return cmd
}
