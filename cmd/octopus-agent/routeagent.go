package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/metricsserver"
	"github.com/octopus-mcs/octopus/internal/routeagent"
)

// routeAgentOptions are the flags of `octopus-agent route-agent`.
type routeAgentOptions struct {
	kubeconfig     string
	nodeName       string
	resyncInterval time.Duration
	metricsAddr    string
	healthAddr     string
	daemonSet      string
}

func newRouteAgentCommand() *cobra.Command {
	o := routeAgentOptions{}
	cmd := &cobra.Command{
		Use:   "route-agent",
		Short: "Route remote clusters' CIDRs to the active gateway (every node)",
		Long: `route-agent runs on every node, in the node's network namespace. It routes the remote
clusters' CIDRs, which the active gateway mirrors into the octopus-system/octopus-gateway
ConfigMap, via the InternalIP of the gateway node that ConfigMap names (the active gateway
writes its name there once its tunnels are up; without it, the node holding the
octopus-system/octopus-gateway Lease), and follows failover and handovers. Its routes carry protocol 212 and metric 212; it never touches other routes.
It needs no hub credential. It runs until SIGTERM or SIGINT and leaves its routes in place for
the next agent, unless Octopus is being removed: its namespace is terminating or gone, or the
DaemonSet named by --daemonset is; then it withdraws them first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.nodeName == "" {
				return errors.New("--node-name is required (in a DaemonSet, set it from spec.nodeName through the NODE_NAME variable)")
			}
			member, err := agent.MemberConfig(o.kubeconfig)
			if err != nil {
				return err
			}
			// Listening before anything else makes a taken port fail the start, not go unnoticed.
			ls, err := metricsserver.ListenBoth(o.metricsAddr, o.healthAddr)
			if err != nil {
				return err
			}
			return routeagent.Run(ctrl.SetupSignalHandler(), routeagent.Options{
				Member: member, NodeName: o.nodeName, ResyncInterval: o.resyncInterval, Log: ctrl.Log.WithName("route-agent"),
				MetricsListener: ls.Metrics, HealthListener: ls.Health, DaemonSet: o.daemonSet,
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the member cluster; empty means in-cluster configuration")
	f.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "name of the node this agent runs on (default $NODE_NAME)")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", fmt.Sprintf(":%d", routeagent.DefaultMetricsPort),
		`address of the Prometheus metrics endpoint (/metrics); "0" turns it off`)
	f.StringVar(&o.healthAddr, "health-probe-bind-address", fmt.Sprintf(":%d", routeagent.DefaultHealthPort),
		`address of the health probes: /healthz (the process serves) and /readyz (the node's routes were applied, and the last attempt succeeded); "0" turns them off`)
	f.StringVar(&o.daemonSet, "daemonset", "", "the DaemonSet in octopus-system that runs this agent, if one does: when it is deleted (helm uninstall), the agent withdraws its routes as it stops")
	f.DurationVar(&o.resyncInterval, "resync-interval", routeagent.DefaultResyncInterval, "how often to re-read the kernel and re-apply the routes without an event")
	return cmd
}
