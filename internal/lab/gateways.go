package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/images"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/release"
	"github.com/octopus-mcs/octopus/internal/version"
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

// memberChartTimeout bounds the install of a cluster's member chart, its pods' readiness
// included: the nodes pull the project's image from the lab's registry first.
const memberChartTimeout = 3 * time.Minute

// chartsOnNodes reports whether the lab installs a joined cluster's components with the member
// chart (charts/octopus-member) rather than running them as processes: on real nodes, when the
// nodes can get the project's image, which the lab builds only when the agent binary's
// directory holds every binary (hasOctopusBinaries; `go build -o bin/ ./cmd/...`).
func chartsOnNodes(opts Options) bool {
	return opts.NodeRuntime == NodeRuntimeKubelet && hasOctopusBinaries(filepath.Dir(opts.AgentBinary))
}

// startComponents runs a joined cluster's controller, gateways and route agents: as the pods of
// the member chart where chartsOnNodes says so, installed as `octopus join --agent charts`
// installs it; otherwise as supervised processes in the nodes' namespaces (startAgent,
// startGateways), since the stand-in's pods cannot run them.
func startComponents(ctx context.Context, opts Options, env *controlplane.Environment, cp *controlplane.ControlPlane, c labnet.ClusterNet) error {
	if !chartsOnNodes(opts) {
		if opts.NodeRuntime == NodeRuntimeKubelet {
			opts.Progress.Step("%s: the components run as processes: %s lacks some of %v, so the nodes have no Octopus image (go build -o DIR/ ./cmd/...)",
				cp.Name, filepath.Dir(opts.AgentBinary), images.OctopusBinaries)
		}
		if err := startAgent(opts, env, cp); err != nil {
			return err
		}
		return startGateways(opts, env, cp, c)
	}
	return installMemberChart(ctx, opts, cp, c)
}

// installMemberChart annotates cluster c's gateway nodes with their underlay address, where
// other clusters reach them (a DaemonSet has one set of flags for every node; the Nodes' own
// addresses are on the cluster's LAN), and installs the member chart with the lab's settings,
// waiting until its pods are ready. The gateway nodes already carry labnet.GatewayLabel, the
// chart's gateway node selector, from their registration.
func installMemberChart(ctx context.Context, opts Options, cp *controlplane.ControlPlane, c labnet.ClusterNet) error {
	start := time.Now()
	p := opts.Progress
	cs, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return fmt.Errorf("installing the components of %s: %w", cp.Name, err)
	}
	gateways := 0
	for _, n := range c.Nodes {
		if !n.Gateway {
			continue
		}
		gateways++
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			v1alpha1.EndpointIPAnnotation: n.UnderlayAddr.Addr().String(),
		}}})
		if err != nil {
			return err
		}
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("giving gateway node %s its endpoint address: %w", n.Name, err)
		}
	}
	p.Step("%s: installing chart %s (controller, gateways on the %d nodes labelled %s=true, route agents on all %d, octopus-dns) and waiting for its pods",
		cp.Name, charts.Member, gateways, labnet.GatewayLabel, len(c.Nodes))
	_, err = release.Install(ctx, cp.RESTConfig(), release.Options{
		Chart: charts.Member, Namespace: v1alpha1.SystemNamespace, AppVersion: version.Version,
		Values: chartValues(opts, cp.Name), Wait: true, Timeout: memberChartTimeout,
	})
	if err != nil {
		return fmt.Errorf("installing the components of %s (kubectl -n %s get pods; the kubelet logs under the lab dir's logs/): %w",
			cp.Name, v1alpha1.SystemNamespace, err)
	}
	p.Done(start, "%s: the member chart's pods are ready", cp.Name)
	return cluster.ForwardDNS(ctx, cp.RESTConfig(), p)
}

// chartValues are the member chart's values for the lab's cluster: the settings the lab gives
// its processes (controllerSettings, gatewaySettings), as the components' flags.
func chartValues(opts Options, cluster string) map[string]any {
	return map[string]any{
		"controller": map[string]any{"extraArgs": toAny(controllerSettings(opts))},
		"gateway":    map[string]any{"extraArgs": toAny(gatewaySettings(opts, cluster))},
	}
}

// toAny is args as chart values hold lists.
func toAny(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

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
	return append([]string{"gateway", "--kubeconfig", kubeconfig, "--node-name", node, "--endpoint-ip", endpoint},
		gatewaySettings(opts, cluster)...)
}

// gatewaySettings are the flags of cluster's gateways that the lab sets alike on every node,
// whether they run as processes (gatewayArgs) or as the member chart's DaemonSet (chartValues):
// the backend, the device and the fast failover timing.
func gatewaySettings(opts Options, cluster string) []string {
	backend := opts.Backends[cluster]
	if backend == "" {
		backend = "wireguard"
	}
	return []string{"--backend=" + backend, "--device=" + GatewayDevice(cluster),
		"--lease-duration=" + labGatewayLeaseDuration, "--renew-deadline=" + labGatewayRenewDeadline,
		"--retry-period=" + labGatewayRetryPeriod, "--status-interval=" + labGatewayStatus,
		"--liveness-interval=" + labGatewayLivenessInterval, "--underlay-probe-interval=" + labUnderlayProbeInterval}
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
