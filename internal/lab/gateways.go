package lab

import (
	"fmt"
	"path/filepath"

	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
)

// Gateway timing in the lab: short, so failover and status show within seconds. A standby
// probes the active gateway every 100 ms and takes over after 3 failed probes once the Lease
// went unrenewed for 2 retry periods (1 s; internal/gateway/takeover.go), well before the
// Lease expires.
const (
	labGatewayLeaseDuration    = "6s"
	labGatewayRenewDeadline    = "4s"
	labGatewayRetryPeriod      = "500ms"
	labGatewayStatus           = "2s"
	labGatewayLivenessInterval = "100ms"
)

// GatewayProcessName names the supervised gateway process of a node (its log is
// <Dir>/logs/<name>.log and its pidfile <Dir>/pids/<name>.pid).
func GatewayProcessName(node string) string { return "gateway-" + node }

// RouteAgentProcessName names the supervised route agent process of a node.
func RouteAgentProcessName(node string) string { return "route-agent-" + node }

// GatewayDevice is the tunnel device of a cluster's gateway. All the lab's gateways share one
// machine, and wireguard-go's control sockets are machine-wide, so each cluster gets its own
// name ("og-cluster15" fits IFNAMSIZ).
func GatewayDevice(cluster string) string { return "og-" + cluster }

// startGateways runs, in a joined cluster, `octopus-agent gateway` in each gateway node's
// namespace (at its underlay address) and `octopus-agent route-agent` in every node's
// namespace, supervised like kube-proxy: restarted when they exit, as a DaemonSet would.
func startGateways(opts Options, env *controlplane.Environment, cp *controlplane.ControlPlane, c labnet.ClusterNet) error {
	binary, err := filepath.Abs(opts.AgentBinary)
	if err != nil {
		return fmt.Errorf("starting the gateways of %s: %w", cp.Name, err)
	}
	backend := opts.Backends[cp.Name]
	if backend == "" {
		backend = "wireguard"
	}
	for _, n := range c.Nodes {
		if n.Gateway {
			err := env.StartProcess(controlplane.ProcessOptions{
				Name:   GatewayProcessName(n.Name),
				Binary: binary,
				Args: []string{"gateway", "--kubeconfig", cp.Kubeconfig, "--node-name", n.Name,
					"--backend", backend, "--device", GatewayDevice(cp.Name), "--endpoint-ip", n.UnderlayAddr.Addr().String(),
					"--lease-duration", labGatewayLeaseDuration, "--renew-deadline", labGatewayRenewDeadline,
					"--retry-period", labGatewayRetryPeriod, "--status-interval", labGatewayStatus,
					"--liveness-interval", labGatewayLivenessInterval},
				Netns:          n.NetnsPath(),
				RestartOnCrash: true,
			})
			if err != nil {
				return fmt.Errorf("starting the gateway on %s: %w", n.Name, err)
			}
		}
		err := env.StartProcess(controlplane.ProcessOptions{
			Name:           RouteAgentProcessName(n.Name),
			Binary:         binary,
			Args:           []string{"route-agent", "--kubeconfig", cp.Kubeconfig, "--node-name", n.Name},
			Netns:          n.NetnsPath(),
			RestartOnCrash: true,
		})
		if err != nil {
			return fmt.Errorf("starting the route agent on %s: %w", n.Name, err)
		}
	}
	return nil
}
