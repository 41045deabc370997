package lab

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"

	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/images"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
)

// nodeAgents holds what the lab runs in its own process for the real nodes until stop: the
// registry they pull images from. Everything else of a node is a supervised process of the
// environment.
type nodeAgents struct {
	registry *images.Registry
}

func (n *nodeAgents) stop() {
	if n == nil || n.registry == nil {
		return
	}
	_ = n.registry.Close()
}

// startNodes starts every cluster's real nodes (startAllRealNodes: a kubelet and containerd
// on each, all clusters' at once), runs kube-proxy in every node namespace and deploys each
// cluster's DNS (deployClusterDNS).
func startNodes(ctx context.Context, env *controlplane.Environment, plan labnet.Plan, opts Options) (*nodeAgents, error) {
	registry, err := startAllRealNodes(ctx, env, plan, opts)
	agents := &nodeAgents{registry: registry}
	if err != nil {
		agents.stop()
		return nil, err
	}
	if hubGatewayNodes(opts) {
		cp := env.Cluster(HubName)
		for _, n := range hubNodes(plan).Nodes {
			// The hub gateway pods reach the hub's API server at its Service address.
			if err := env.StartProcess(kubeProxyProcess(cp, n)); err != nil {
				agents.stop()
				return nil, fmt.Errorf("starting kube-proxy on node %s: %w", n.Name, err)
			}
		}
	}
	for _, c := range plan.Clusters {
		cp := env.Cluster(c.Name)
		if cp == nil {
			agents.stop()
			return nil, fmt.Errorf("starting nodes: no control plane for cluster %s", c.Name)
		}
		cs, err := kubernetes.NewForConfig(cp.RESTConfig())
		if err != nil {
			agents.stop()
			return nil, fmt.Errorf("starting nodes of %s: %w", c.Name, err)
		}
		for _, n := range c.Nodes {
			if err := env.StartProcess(kubeProxyProcess(cp, n)); err != nil {
				agents.stop()
				return nil, fmt.Errorf("starting kube-proxy on node %s: %w", n.Name, err)
			}
		}
		// Cluster DNS comes with the nodes, as kubeadm deploys it with the control plane.
		if err := deployClusterDNS(ctx, cs, cp.ServiceCIDR, cp.SecondaryServiceCIDR); err != nil {
			agents.stop()
			return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
		}
	}
	return agents, nil
}

// kubeProxyProcess runs the real kube-proxy in a node's namespace.
func kubeProxyProcess(cp *controlplane.ControlPlane, n labnet.NodeNet) controlplane.ProcessOptions {
	return controlplane.ProcessOptions{
		Name:   n.Name + "-kube-proxy",
		Binary: "kube-proxy",
		Args: []string{
			// The admin kubeconfig: kube-proxy reaches the API server at labnet.APIAddress
			// through the node's route. A per-node identity is not worth it in a lab.
			"--kubeconfig=" + cp.Kubeconfig,
			"--hostname-override=" + n.Name,
			"--proxy-mode=nftables",
			// 0 leaves the global nf_conntrack_max alone: the lab must not change host sysctls.
			"--conntrack-max-per-core=0",
			// Traffic from outside the pod range to a Service gets masqueraded, as in a
			// real cluster.
			"--cluster-cidr=" + cp.PodRanges(),
			"--v=2",
		},
		Netns: n.NetnsPath(),
		// A real node restarts a crashed kube-proxy (DaemonSet); so does the lab.
		RestartOnCrash: true,
	}
}
