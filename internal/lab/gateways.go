package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/images"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/lab/realnode"
	"github.com/octopus-mcs/octopus/internal/manifests/release"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
	"github.com/octopus-mcs/octopus/internal/version"
)

// GatewayTimings are the lab's gateway timing: short, so failover and status show within
// seconds. A standby probes the active gateway every LivenessInterval and takes over after 3
// failed probes once the Lease went unrenewed for 2 retry periods (1 s;
// internal/gateway/takeover.go), well before the Lease expires. The tests derive their bounds
// from these values rather than from what one machine measured. The Lease is long, so that an
// active gateway keeps it through the stalls of a machine running a lab beside the rest of the
// suite (a 6 s stall, load 49, made a 4 s RenewDeadline end the active term in the middle of
// TestGatewayFailover's hub outage): what is killed or cut off is taken over by the fast
// takeover, whatever the Lease's length.
var GatewayTimings = struct {
	LeaseDuration, RenewDeadline, RetryPeriod, StatusInterval, LivenessInterval time.Duration
	// UnderlayProbeInterval measures the underlay paths often enough for fault tests to see
	// a change within seconds; a measurement of the lab's underlay takes milliseconds.
	UnderlayProbeInterval time.Duration
}{
	LeaseDuration: 12 * time.Second, RenewDeadline: 8 * time.Second, RetryPeriod: 500 * time.Millisecond,
	StatusInterval: 2 * time.Second, LivenessInterval: 100 * time.Millisecond,
	UnderlayProbeInterval: 5 * time.Second,
}

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
// chart (charts/octopus-member) rather than running them as processes: unless
// ComponentProcesses asks for processes, when the nodes can get the project's image, which the
// lab builds only when the agent binary's directory holds every binary (hasOctopusBinaries;
// `go build -o bin/ ./cmd/...`).
func chartsOnNodes(opts Options) bool {
	return !opts.ComponentProcesses && hasOctopusBinaries(filepath.Dir(opts.AgentBinary))
}

// startComponents runs a joined cluster's controller, gateways and route agents: as the pods of
// the member chart where chartsOnNodes says so, installed as `octopus join --agent charts`
// installs it; otherwise as supervised processes in the nodes' namespaces (startAgent,
// startGateways).
//
// secondary are the chart's secondaryNetwork values (prepareSecondaryNetwork), nil without
// Options.SecondaryNetwork.
func startComponents(ctx context.Context, opts Options, env *controlplane.Environment, cp *controlplane.ControlPlane, c labnet.ClusterNet, secondary map[string]any) error {
	if !chartsOnNodes(opts) {
		if secondary != nil {
			return fmt.Errorf("%s: the secondary network runs only as the member chart's pods, and the nodes have no Octopus image: build every binary into %s (go build -o DIR/ ./cmd/...)",
				cp.Name, filepath.Dir(opts.AgentBinary))
		}
		if !opts.ComponentProcesses {
			opts.Progress.Step("%s: the components run as processes: %s lacks some of %v, so the nodes have no Octopus image (go build -o DIR/ ./cmd/...)",
				cp.Name, filepath.Dir(opts.AgentBinary), images.OctopusBinaries)
		}
		if err := startAgent(opts, env, cp); err != nil {
			return err
		}
		return startGateways(opts, env, cp, c)
	}
	return installMemberChart(ctx, opts, cp, c, secondary)
}

// installMemberChart annotates cluster c's gateway nodes with their underlay address, where
// other clusters reach them (a DaemonSet has one set of flags for every node; the Nodes' own
// addresses are on the cluster's LAN), and installs the member chart with the lab's settings,
// waiting until its pods are ready. The gateway nodes already carry labnet.GatewayLabel, the
// chart's gateway node selector (labelGateways).
func installMemberChart(ctx context.Context, opts Options, cp *controlplane.ControlPlane, c labnet.ClusterNet, secondary map[string]any) error {
	start := time.Now()
	p := opts.Progress
	gateways, err := annotateEndpoints(ctx, cp, c)
	if err != nil {
		return err
	}
	also := ""
	values := chartValues(opts, cp.Name)
	if secondary != nil {
		also = ", the secondary network's OVN central, OVN node pods, ovnmaster and NRI plugin"
		values["secondaryNetwork"] = secondary
		if err := cluster.EnsureOVNCertificates(ctx, cp.RESTConfig(), v1alpha1.SystemNamespace, p); err != nil {
			return fmt.Errorf("%s: %w", cp.Name, err)
		}
	}
	p.Step("%s: installing chart %s (controller, gateways on the %d nodes labelled %s=true, route agents on all %d, octopus-dns%s) and waiting for its pods",
		cp.Name, charts.Member, gateways, labnet.GatewayLabel, len(c.Nodes), also)
	_, err = release.Install(ctx, cp.RESTConfig(), release.Options{
		Chart: charts.Member, Namespace: v1alpha1.SystemNamespace, AppVersion: version.Version,
		Values: values, Wait: true, Timeout: memberChartTimeout,
	})
	if err != nil {
		return fmt.Errorf("installing the components of %s (the kubelet logs under the lab dir's logs/): %w%s",
			cp.Name, err, unreadyPods(ctx, cp, v1alpha1.SystemNamespace))
	}
	p.Done(start, "%s: the member chart's pods are ready", cp.Name)
	return cluster.ForwardDNS(ctx, cp.RESTConfig(), p)
}

// annotateEndpoints gives cluster c's gateway nodes their underlay address, where other
// clusters reach them, as the Node annotation v1alpha1.EndpointIPAnnotation: a gateway pod of
// a DaemonSet has one set of flags for every node, and the Nodes' own addresses are on the
// cluster's LAN. It returns the number of gateway nodes.
func annotateEndpoints(ctx context.Context, cp *controlplane.ControlPlane, c labnet.ClusterNet) (int, error) {
	cs, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return 0, fmt.Errorf("annotating the gateway nodes of %s: %w", cp.Name, err)
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
			return 0, fmt.Errorf("annotating gateway node %s: %w", n.Name, err)
		}
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return 0, fmt.Errorf("giving gateway node %s its endpoint address: %w", n.Name, err)
		}
	}
	return gateways, nil
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

// Charts reports whether the member clusters' components run as the member chart's pods
// (real nodes with the project's image) rather than as the lab's supervised processes.
func (l *Lab) Charts() bool { return l.charts }

// KillGateway SIGKILLs the gateway of a member cluster's node or of a hub gateway node, as a
// crash: its supervisor restarts it, the lab's for a process (GatewayProcessName) and the
// kubelet for the container of a chart's pod, and the restarted gateway stands by if another
// took the Lease meanwhile.
func (l *Lab) KillGateway(ctx context.Context, node string) error {
	if !l.chartGateway(node) {
		pidfile := filepath.Join(l.Env.Dir, "pids", GatewayProcessName(node)+".pid")
		b, err := os.ReadFile(pidfile)
		if err != nil {
			return fmt.Errorf("the gateway process of %s: %w", node, err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("pidfile %s: %w", pidfile, err)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("killing the gateway process of %s (pid %d): %w", node, pid, err)
		}
		return nil
	}
	_, pod, err := l.gatewayPod(ctx, node)
	if err != nil {
		return err
	}
	pids, err := realnode.PodProcesses(l.Network.ID, string(pod.UID))
	if err != nil {
		return fmt.Errorf("the processes of gateway pod %s: %w", pod.Name, err)
	}
	for _, pid := range pids {
		// The pod's cgroups also hold its sandbox's pause process, whose death would
		// recreate the whole pod rather than restart the container.
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err != nil || strings.TrimSpace(string(comm)) != "octopus-agent" {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("killing the gateway of pod %s (pid %d): %w", pod.Name, pid, err)
		}
		return nil
	}
	return fmt.Errorf("gateway pod %s on %s has no octopus-agent process (pids %v)", pod.Name, node, pids)
}

// StopGateway stops the gateway of a member cluster's node or of a hub gateway node for good,
// as when the node is no longer a gateway: the lab's supervised process is killed without a
// restart, or, for a chart's pods, the node loses labnet.GatewayLabel (so the DaemonSet does
// not bring it back) and its pod is deleted with no grace period. The kubelet still stops that
// container with SIGTERM first, so a pod's gateway exits cleanly, giving its Lease up, where a
// process dies at once; KillGateway is the crash.
func (l *Lab) StopGateway(ctx context.Context, node string) error {
	if !l.chartGateway(node) {
		return l.Env.StopProcess(GatewayProcessName(node), 0)
	}
	// The pod first: once the label is off, the DaemonSet controller may mark it for deletion
	// before we look, and gatewayPod skips pods being deleted.
	c, pod, err := l.gatewayPod(ctx, node)
	if err != nil {
		return err
	}
	patch := []byte(`{"metadata":{"labels":{"` + labnet.GatewayLabel + `":null}}}`)
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("taking %s off node %s: %w", labnet.GatewayLabel, node, err)
	}
	err = c.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting gateway pod %s: %w", pod.Name, err)
	}
	return nil
}

// chartGateway reports whether node's gateway is a chart's pod rather than a process.
func (l *Lab) chartGateway(node string) bool {
	for _, h := range l.Network.HubGateways {
		if h.Name == node {
			return hubGatewayNodes(l.opts)
		}
	}
	return l.charts
}

// gatewayPod is the gateway pod on node, a member cluster's or a hub gateway node, that is not
// being deleted, and a client of its cluster.
func (l *Lab) gatewayPod(ctx context.Context, node string) (kubernetes.Interface, *corev1.Pod, error) {
	cluster, namespace, app := "", v1alpha1.SystemNamespace, "octopus-gateway"
	for _, h := range l.Network.HubGateways {
		if h.Name == node {
			cluster, namespace, app = HubName, v1alpha1.DefaultHubNamespace, render.HubGatewayName
		}
	}
	for _, c := range l.Network.Clusters {
		for _, n := range c.Nodes {
			if n.Name == node {
				cluster = c.Name
			}
		}
	}
	if cluster == "" {
		return nil, nil, fmt.Errorf("the lab has no node %s", node)
	}
	c, err := kubernetes.NewForConfig(l.Env.Cluster(cluster).RESTConfig())
	if err != nil {
		return nil, nil, err
	}
	pod, err := gatewayPodIn(ctx, c, namespace, app, node)
	return c, pod, err
}

// GatewayPod is the member chart's gateway pod on node that is not being deleted.
func GatewayPod(ctx context.Context, c kubernetes.Interface, node string) (*corev1.Pod, error) {
	return gatewayPodIn(ctx, c, v1alpha1.SystemNamespace, "octopus-gateway", node)
}

// gatewayPodIn is the pod labelled app.kubernetes.io/name=app in namespace on node that is
// not being deleted.
func gatewayPodIn(ctx context.Context, c kubernetes.Interface, namespace, app, node string) (*corev1.Pod, error) {
	pods, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=" + app, FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		return nil, fmt.Errorf("listing the gateway pods of %s: %w", node, err)
	}
	var seen []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			return &p, nil
		}
		seen = append(seen, fmt.Sprintf("%s (%s, being deleted since %s)", p.Name, p.Status.Phase, p.DeletionTimestamp.Format(time.RFC3339)))
	}
	return nil, fmt.Errorf("node %s runs no gateway pod (pods there: %v)", node, seen)
}

// startGateways runs, in a joined cluster, `octopus-agent gateway` in each gateway node's
// namespace (at its underlay address) and `octopus-agent route-agent` in every node's
// namespace, supervised like kube-proxy: restarted when they exit, as a DaemonSet would.
func startGateways(opts Options, env *controlplane.Environment, cp *controlplane.ControlPlane, c labnet.ClusterNet) error {
	return startGatewaysNamed(opts, env, cp, c, "")
}

// startGatewaysNamed is startGateways with suffix ("" for none) appended to each process's
// name, so that a cluster's gateways and route agents can run again after an earlier set
// was stopped for good (a process name is used once per lab).
func startGatewaysNamed(opts Options, env *controlplane.Environment, cp *controlplane.ControlPlane, c labnet.ClusterNet, suffix string) error {
	binary, err := filepath.Abs(opts.AgentBinary)
	if err != nil {
		return fmt.Errorf("starting the gateways of %s: %w", cp.Name, err)
	}
	for _, n := range c.Nodes {
		if n.Gateway {
			err := env.StartProcess(controlplane.ProcessOptions{
				Name:           GatewayProcessName(n.Name) + suffix,
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
			Name:           RouteAgentProcessName(n.Name) + suffix,
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

// StartComponentProcesses runs member cluster's gateways and route agents as the lab's
// supervised processes in its nodes' namespaces, with the lab's settings, as the lab runs them
// where the nodes cannot run the member chart: what `octopus join --agent process`, which
// starts the controller alone, leaves to the user. Each process's name ends in suffix, which
// must be new to the lab; StopComponentProcesses with the same suffix stops them.
// BenchmarkFabricJoin's process mode.
func (l *Lab) StartComponentProcesses(cluster, suffix string) error {
	c := l.Network.Cluster(cluster)
	if c == nil {
		return fmt.Errorf("starting the component processes: no member cluster %q", cluster)
	}
	return startGatewaysNamed(l.opts, l.Env, l.Env.Cluster(cluster), *c, suffix)
}

// StopComponentProcesses stops for good the processes StartComponentProcesses started with
// suffix, with SIGTERM and up to grace each, so that the gateways hand their Lease over and
// delete their firewall table as on a clean shutdown.
func (l *Lab) StopComponentProcesses(cluster, suffix string, grace time.Duration) error {
	c := l.Network.Cluster(cluster)
	if c == nil {
		return fmt.Errorf("stopping the component processes: no member cluster %q", cluster)
	}
	var errs []error
	for _, n := range c.Nodes {
		if n.Gateway {
			errs = append(errs, l.Env.StopProcess(GatewayProcessName(n.Name)+suffix, grace))
		}
		errs = append(errs, l.Env.StopProcess(RouteAgentProcessName(n.Name)+suffix, grace))
	}
	return errors.Join(errs...)
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
	t := GatewayTimings
	return []string{"--backend=" + backend, "--device=" + GatewayDevice(cluster),
		"--lease-duration=" + t.LeaseDuration.String(), "--renew-deadline=" + t.RenewDeadline.String(),
		"--retry-period=" + t.RetryPeriod.String(), "--status-interval=" + t.StatusInterval.String(),
		"--liveness-interval=" + t.LivenessInterval.String(), "--underlay-probe-interval=" + t.UnderlayProbeInterval.String()}
}

// hubGatewayNodes reports whether the hub's gateways run as the hub chart's pods on real nodes
// of the hub cluster (one per labnet.HubGatewayNet) rather than as the lab's processes: with
// the hub topology, wherever the member clusters run the member chart.
func hubGatewayNodes(opts Options) bool {
	return opts.HubGateways > 0 && chartsOnNodes(opts)
}

// installHubChart installs the hub chart with its gateway, as `octopus hub deploy --chart
// --set gateway.enabled=true,...` does, on the hub's gateway nodes (labelled
// labnet.GatewayLabel by labelGateways, the chart's default selector), with the lab's gateway
// settings as the gateway's environment, and waits until its pods are ready.
func installHubChart(ctx context.Context, opts Options, cp *controlplane.ControlPlane, nets []labnet.HubGatewayNet) error {
	start := time.Now()
	p := opts.Progress
	config := map[string]any{}
	backend := "wireguard"
	for _, f := range gatewaySettings(opts, HubName) {
		name, value, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if name == "backend" {
			backend = value // a value of the chart, which passes it as the flag
			continue
		}
		// OCTOPUS_<FLAG> sets --<flag> of octopus-agent (cmd/octopus-agent/env.go).
		config["OCTOPUS_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))] = value
	}
	p.Step("hub: installing chart %s with its gateway on the %d nodes labelled %s=true, and waiting for its pods",
		charts.Hub, len(nets), labnet.GatewayLabel)
	_, err := release.Install(ctx, cp.RESTConfig(), release.Options{
		Chart: charts.Hub, Namespace: v1alpha1.DefaultHubNamespace, AppVersion: version.Version,
		Values: map[string]any{"gateway": map[string]any{
			"enabled": true, "backend": backend, "healthCheckIP": HubGatewayHealthCheckIP(), "config": config,
		}},
		Wait: true, Timeout: memberChartTimeout,
	})
	if err != nil {
		return fmt.Errorf("installing the hub's gateways (kubectl -n %s get pods on the hub; the kubelet logs under the lab dir's logs/): %w%s",
			v1alpha1.DefaultHubNamespace, err, unreadyPods(ctx, cp, v1alpha1.DefaultHubNamespace))
	}
	p.Done(start, "hub: the hub chart's gateway pods are ready")
	return nil
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
