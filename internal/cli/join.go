package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/operator"
	"github.com/octopus-mcs/octopus/internal/progress"
)

// Agent modes of join: how the agent's components start.
const (
	// agentCharts installs the member chart (charts/octopus-member): the components as pods.
	// The default.
	agentCharts = "charts"
	// agentProcess runs only the controller, as a detached process on the machine that runs
	// join: a development mode, for clusters whose nodes cannot run the project's image (the
	// gateways and route agents are not started).
	agentProcess = "process"
	agentNone    = "none"
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
	ic         interconnectFlags
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

By default (--agent charts) the components (controller, gateways on the nodes labelled
node-restriction.kubernetes.io/octopus-gateway=true, route agents, octopus-dns) run in the cluster, installed from the
embedded Helm chart octopus-member (no network needed; --set changes its values);
` + "`octopus leave`" + ` uninstalls it, and ` + "`helm upgrade octopus-member`" + ` upgrades it.

--agent process is for development only: the agent's controller runs as a process on this
machine with your kubeconfig, logging under ~/.local/state/octopus, and dies with the machine;
no gateway or route agent starts. ` + "`octopus leave`" + ` stops it. --agent none starts nothing.`,
		Args: cobra.ExactArgs(1),
		RunE: runE(o),
	}
	fs := cmd.Flags()
	o.kube.addFlags(fs, "cluster to join")
	fs.StringVar(&o.join.ClusterID, "cluster-id", "", "the cluster's ID in the cluster set: lower-case letters, digits and '-', at most 63 (required)")
	fs.StringSliceVar(&o.join.PodCIDRs, "pod-cidr", nil, "the cluster's pod CIDR(s), at most one per address family: IPv4,IPv6 for a dual-stack cluster (default: discovered)")
	fs.StringSliceVar(&o.join.ServiceCIDRs, "service-cidr", nil, "the cluster's service CIDR(s), at most one per address family (default: discovered)")
	fs.StringVar(&o.addressing, "addressing", string(v1alpha1.AddressingDirect), "direct, globalnet (overlapping CIDRs) or secondary")
	fs.Int32Var(&o.join.GlobalEgressSize, "global-egress-size", 0,
		fmt.Sprintf("with --addressing globalnet: how many addresses at the start of the cluster's global CIDR are its egress range, the source of its pods' traffic to other clusters (default %d); fixed until the cluster leaves", globalip.DefaultClusterEgressSize))
	fs.StringVar(&o.topology, "topology", string(v1alpha1.TopologyMesh), "how the gateway reaches other clusters: mesh (direct tunnels) or hub (only through the hub's gateway, `octopus-agent gateway --hub`)")
	fs.StringVar(&o.agent, "agent", agentCharts, "how to run the components: charts (pods installed by the member chart), process (development only: the controller alone, as a process on this machine) or none")
	o.chart.addFlags(fs)
	o.ic.addFlags(fs)
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
	o.join.Interconnect, err = o.ic.config()
	return err
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
	if done, err := o.viaOperator(ctx, cfg); done || err != nil {
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
		// With secondary addressing the chart's secondary network is on, for the block the
		// hub allocated; --set secondaryNetwork.* (the datapath, an underlay interface, the
		// NRI socket) says the rest.
		var values map[string]any
		if sn := cluster.SecondaryNetworkValues(joined, o.join.BrokerInfo.Secondary.CIDR, o.join.BrokerInfo.Globalnet.CIDR); sn != nil {
			if ic := o.join.Interconnect; ic != nil {
				// ovn-ic's endpoints and the pool; ovn-ic-config (join wrote it) the rest.
				sn["interconnect"] = cluster.InterconnectValues(*ic, o.join.BrokerInfo.Secondary.CIDR)
			}
			values = map[string]any{"secondaryNetwork": sn}
			// The OVN databases take only clients with a certificate of the cluster's CA.
			if err := cluster.EnsureOVNCertificates(ctx, cfg, v1alpha1.SystemNamespace, o.join.Progress); err != nil {
				return fmt.Errorf("the cluster joined, but issuing the OVN certificates failed (run join again to retry): %w", err)
			}
		}
		if err := o.chart.install(ctx, o.IOStreams, cfg, charts.Member, v1alpha1.SystemNamespace, values); err != nil {
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

// operatorTimeout bounds the wait for the operator to deploy the hub or join the cluster.
const operatorTimeout = 5 * time.Minute

// viaOperator joins through the cluster's Fabric when the Octopus operator runs there
// (charts/octopus-operator): broker-info goes into the Secret the Fabric refers to, and the
// operator joins and installs the components (--agent does not apply). done is false when
// there is no operator.
func (o *joinOptions) viaOperator(ctx context.Context, cfg *rest.Config) (done bool, err error) {
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return false, fmt.Errorf("connecting to the cluster at %s: %w", cfg.Host, err)
	}
	if ok, err := operator.Installed(ctx, c); !ok || err != nil {
		return false, err
	}
	p := o.join.Progress
	p.Step("The Octopus operator runs in this cluster: joining through Fabric %s (--agent does not apply)", v1alpha1.FabricName)
	raw, err := os.ReadFile(o.brokerInfo)
	if err != nil {
		return true, fmt.Errorf("reading broker-info: %w", err)
	}
	const secret = "broker-info"
	if err := operator.PutBrokerInfo(ctx, c, secret, raw); err != nil {
		return true, err
	}
	spec := v1alpha1.FabricSpec{JoinConfig: &v1alpha1.JoinConfig{
		ClusterID: o.join.ClusterID, BrokerInfoSecretRef: v1alpha1.SecretReference{Name: secret, Namespace: v1alpha1.OperatorNamespace},
		PodCIDRs: o.join.PodCIDRs, ServiceCIDRs: o.join.ServiceCIDRs, Topology: o.join.Topology, Addressing: o.join.Addressing,
		GlobalEgressSize: o.join.GlobalEgressSize,
	}}
	if ic := o.join.Interconnect; ic != nil {
		spec.JoinConfig.Interconnect = &v1alpha1.JoinInterconnect{Type: interconnectOvnIC, ICDBHost: ic.DBHosts,
			ICNBPort: int32(ic.NBPort), ICSBPort: int32(ic.SBPort), GWNodes: ic.GatewayNodes, AutoRoute: &ic.AutoRoute} //nolint:gosec // ports checked by icconfig.Parse
	}
	if err := operator.ApplyFabric(ctx, c, spec); err != nil {
		return true, err
	}
	f, err := operator.WaitFabric(ctx, c, p, operatorTimeout, v1alpha1.FabricJoined, v1alpha1.FabricComponentsReady)
	if err != nil {
		return true, err
	}
	fmt.Fprintf(o.Out, "Cluster %s joined the hub at %s through the operator (Fabric %s, components at revision %d); kubectl get fabric %s shows its progress.\n",
		f.Status.ClusterID, o.join.BrokerInfo.HubURL, v1alpha1.FabricName, f.Status.ComponentsRevision, v1alpha1.FabricName)
	return true, nil
}
