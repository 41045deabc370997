package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/hub"
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
	// labUnderlayProbeInterval measures the underlay paths often enough for fault tests to
	// see a change within seconds; a measurement of the lab's underlay takes milliseconds.
	labUnderlayProbeInterval = "5s"
)

// GatewayProcessName names the supervised gateway process of a node (its log is
// <Dir>/logs/<name>.log and its pidfile <Dir>/pids/<name>.pid).
func GatewayProcessName(node string) string { return "gateway-" + node }

// RouteAgentProcessName names the supervised route agent process of a node.
func RouteAgentProcessName(node string) string { return "route-agent-" + node }

// hubGatewayTokenTTL is how long the hub gateways' hub token lives: longer than any lab session.
const hubGatewayTokenTTL = 7 * 24 * time.Hour

// HubGatewayHealthCheckIP is the address the clusters probe the hub's gateway at: the first
// host of the hub's own pod CIDR, which no member cluster uses (clusterCIDRs).
func HubGatewayHealthCheckIP() string {
	pods, _ := clusterCIDRs(0, false)
	return pods.Addr().Next().String()
}

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
	for _, n := range c.Nodes {
		if n.Gateway {
			err := env.StartProcess(controlplane.ProcessOptions{
				Name:           GatewayProcessName(n.Name),
				Binary:         binary,
				Args:           gatewayArgs(opts, cp.Name, cp.Kubeconfig, n.Name, n.UnderlayAddr.Addr().String()),
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

// gatewayArgs are the flags of `octopus-agent gateway` in the lab, for cluster's gateway
// (HubName: the hub's) on node, tunnelling from endpoint.
func gatewayArgs(opts Options, cluster, kubeconfig, node, endpoint string) []string {
	backend := opts.Backends[cluster]
	if backend == "" {
		backend = "wireguard"
	}
	return []string{"gateway", "--kubeconfig", kubeconfig, "--node-name", node,
		"--backend", backend, "--device", GatewayDevice(cluster), "--endpoint-ip", endpoint,
		"--lease-duration", labGatewayLeaseDuration, "--renew-deadline", labGatewayRenewDeadline,
		"--retry-period", labGatewayRetryPeriod, "--status-interval", labGatewayStatus,
		"--liveness-interval", labGatewayLivenessInterval, "--underlay-probe-interval", labUnderlayProbeInterval}
}

// startHubGateways runs `octopus-agent gateway --hub` in each hub gateway's namespace
// (process GatewayProcessName(h.Name), Lease identity h.Name), with a kubeconfig holding a
// token of the ServiceAccount hub deploy made for them (not the hub's admin credential),
// supervised like the clusters' gateways. One is elected; the others stand by.
func startHubGateways(ctx context.Context, opts Options, env *controlplane.Environment, nets []labnet.HubGatewayNet, namespace string) error {
	if len(nets) == 0 {
		return nil
	}
	binary, err := filepath.Abs(opts.AgentBinary)
	if err != nil {
		return fmt.Errorf("starting the hub's gateways: %w", err)
	}
	cfg, err := hub.GatewayConfig(ctx, env.Cluster(HubName).RESTConfig(), namespace, hubGatewayTokenTTL)
	if err != nil {
		return fmt.Errorf("starting the hub's gateways: %w", err)
	}
	path := filepath.Join(env.Dir, "hub-gateway.kubeconfig")
	err = controlplane.WriteKubeconfig(path, HubName, cfg.Host, cfg.CAData, v1alpha1.HubGatewayServiceAccount, &clientcmdapi.AuthInfo{Token: cfg.BearerToken})
	if err != nil {
		return fmt.Errorf("writing the hub gateway's kubeconfig: %w", err)
	}
	for _, h := range nets {
		args := append(gatewayArgs(opts, HubName, path, h.Name, h.UnderlayAddr.Addr().String()),
			"--hub", "--hub-namespace", namespace, "--health-check-ip", HubGatewayHealthCheckIP())
		err := env.StartProcess(controlplane.ProcessOptions{
			Name: GatewayProcessName(h.Name), Binary: binary, Args: args, Netns: h.NetnsPath(), RestartOnCrash: true,
		})
		if err != nil {
			return fmt.Errorf("starting the hub's gateway on %s: %w", h.Name, err)
		}
	}
	return nil
}
