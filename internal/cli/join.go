package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/progress"
)

// Agent modes of join: how the agent's controller starts.
const (
	agentProcess = "process"
	agentNone    = "none"
	// agentCharts installs the member chart (charts/octopus-member): the components as pods.
	agentCharts = "charts"
)

type joinOptions struct {
	IOStreams
	kube       kubeconfigFlags
	brokerInfo string
	join       cluster.JoinOptions
	addressing string
	topology   string
	agent      string
	chart      chartFlags
}

func newJoinCommand(streams IOStreams) *cobra.Command {
	o := &joinOptions{IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "join BROKER-INFO --cluster-id ID",
		Short: "Join a cluster to the hub described by BROKER-INFO",
		Long: `Registers the cluster on the hub with its own credential (which can only change this
cluster's objects), allocates its global and secondary CIDR blocks, stores the credential in
the cluster and starts the agent. The pod and service CIDRs are discovered when the cluster
records them; otherwise pass --pod-cidr and --service-cidr. Running join again resumes.

With --agent charts the components (controller, gateways on the nodes labelled
octopus.io/gateway=true, route agents, octopus-dns) run in the cluster, installed from the embedded Helm chart
octopus-member (no network needed; --set changes its values); ` + "`octopus leave`" + ` uninstalls it.
With --agent process (the default while the lab's stand-in nodes cannot run the chart's pods; a
development mode) the agent's controller runs as a process on this machine, logging under
~/.local/state/octopus; ` + "`octopus leave`" + ` stops it.`,
		Args: cobra.ExactArgs(1),
		RunE: runE(o),
	}
	fs := cmd.Flags()
	o.kube.addFlags(fs, "cluster to join")
	fs.StringVar(&o.join.ClusterID, "cluster-id", "", "the cluster's ID in the cluster set: lower-case letters, digits and '-', at most 63 (required)")
	fs.StringSliceVar(&o.join.PodCIDRs, "pod-cidr", nil, "the cluster's pod CIDR(s) (default: discovered)")
	fs.StringSliceVar(&o.join.ServiceCIDRs, "service-cidr", nil, "the cluster's service CIDR(s) (default: discovered)")
	fs.StringVar(&o.addressing, "addressing", string(v1alpha1.AddressingDirect), "direct, globalnet (overlapping CIDRs) or secondary")
	fs.StringVar(&o.topology, "topology", string(v1alpha1.TopologyMesh), "how the gateway reaches other clusters: mesh (direct tunnels) or hub (only through the hub's gateway, `octopus-agent gateway --hub`)")
	fs.StringVar(&o.agent, "agent", agentProcess, "how to run the agent: charts (pods installed by the member chart), process (on this machine, for development) or none")
	o.chart.addFlags(fs)
	_ = cmd.MarkFlagRequired("cluster-id")
	return cmd
}

func (o *joinOptions) Complete(args []string) error {
	o.brokerInfo = args[0]
	info, err := hub.ReadBrokerInfo(o.brokerInfo)
	if err != nil {
		return err
	}
	o.join.BrokerInfo = info
	o.join.Addressing = v1alpha1.Addressing(o.addressing)
	o.join.Topology = v1alpha1.Topology(o.topology)
	o.join.Progress = &progress.Reporter{W: o.ErrOut}
	return nil
}

func (o *joinOptions) Validate() error {
	if err := cluster.ValidateClusterID(o.join.ClusterID); err != nil {
		return fmt.Errorf("--cluster-id: %w", err)
	}
	if t := v1alpha1.Topology(o.topology); t != v1alpha1.TopologyMesh && t != v1alpha1.TopologyHub {
		return fmt.Errorf("--topology %q: want %s or %s", o.topology, v1alpha1.TopologyMesh, v1alpha1.TopologyHub)
	}
	if o.agent != agentProcess && o.agent != agentNone && o.agent != agentCharts {
		return fmt.Errorf("--agent %q: want %s, %s or %s", o.agent, agentCharts, agentProcess, agentNone)
	}
	return nil
}

func (o *joinOptions) Run(ctx context.Context) error {
	cfg, err := o.kube.restConfig()
	if err != nil {
		return err
	}
	// The member chart deploys octopus-dns; the cluster DNS forwards to it once installed.
	o.join.DNSByChart = o.agent == agentCharts
	joined, err := cluster.Join(ctx, cfg, o.join)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "Cluster %s joined the hub at %s (global CIDR %s, secondary CIDR %s).\n",
		joined.Cluster.Spec.ClusterID, o.join.BrokerInfo.HubURL, joined.Cluster.Spec.GlobalCIDR, joined.Cluster.Spec.SecondaryCIDR)
	if o.agent == agentCharts {
		if err := o.chart.install(ctx, o.IOStreams, cfg, charts.Member, v1alpha1.SystemNamespace); err != nil {
			return fmt.Errorf("the cluster joined, but installing its components failed (run join again to retry): %w", err)
		}
		if err := cluster.ForwardDNS(ctx, cfg, o.join.Progress); err != nil {
			return fmt.Errorf("the cluster joined and its components are installed, but the cluster DNS does not forward to octopus-dns (run join again to retry): %w", err)
		}
		return nil
	}
	if o.agent == agentNone {
		fmt.Fprintln(o.Out, "Agent not started (--agent none): run `octopus-agent controller` with this cluster's kubeconfig.")
		return nil
	}
	proc, err := startDetachedAgent(o.kube, joined.Cluster.Spec.ClusterID)
	if err != nil {
		return fmt.Errorf("the cluster joined, but starting its agent failed: %w", err)
	}
	fmt.Fprintf(o.Out, "Agent started (pid %d), logging to %s.\n", proc.pid, proc.log)
	return nil
}
