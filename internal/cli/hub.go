package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
	"github.com/octopus-mcs/octopus/internal/operator"
	"github.com/octopus-mcs/octopus/internal/progress"
	"github.com/octopus-mcs/octopus/internal/version"
)

func newHubCommand(streams IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "hub", Short: "Manage the hub clusters exchange state through"}
	cmd.AddCommand(newHubDeployCommand(streams), newHubRevokeCommand(streams))
	return cmd
}

func newHubRevokeCommand(streams IOStreams) *cobra.Command {
	var hubKube kubeconfigFlags
	var namespace string
	cmd := &cobra.Command{
		Use:   "revoke CLUSTER-ID",
		Short: "End one cluster's access to the hub",
		Long: `Deletes the cluster's ServiceAccount and RoleBinding on the hub, which invalidates every
token of that cluster at once, and everything it published (its Cluster, Peer, heartbeat Lease,
service records and slices), so that every gateway drops its tunnel and routes and every
cluster its imports within seconds. Touches no other cluster. Needs the hub's admin kubeconfig.
The cluster can join again with broker-info; rotate broker-info to keep it out.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := hubKube.client()
			if err != nil {
				return err
			}
			if err := hub.Revoke(cmd.Context(), c, namespace, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(streams.Out, "Cluster %s's hub credential revoked.\n", args[0])
			return nil
		},
	}
	hubKube.addFlags(cmd.Flags(), "hub cluster")
	cmd.Flags().StringVar(&namespace, "namespace", v1alpha1.DefaultHubNamespace, "hub namespace holding shared state")
	return cmd
}

type hubDeployOptions struct {
	IOStreams
	kube      kubeconfigFlags
	output    string
	deploy    hub.DeployOptions
	globalnet hub.PoolConfig
	secondary hub.PoolConfig
	useChart  bool
	chart     chartFlags
	// interconnect and the flags after it: hub.InterconnectOptions.
	interconnect      bool
	icImage           string
	icTransitSwitches []string
	icAddresses       []string
}

func newHubDeployCommand(streams IOStreams) *cobra.Command {
	o := &hubDeployOptions{IOStreams: streams, globalnet: hub.DefaultGlobalnetPool, secondary: hub.DefaultSecondaryPool}
	cmd := &cobra.Command{
		Use:   "deploy",
		Short: "Turn a cluster into the hub and write broker-info for joining it",
		Long: `Installs the hub's namespace, CRDs, RBAC and admission policy, and writes broker-info
(mode 0600): the hub's URL and CA, a join credential, and the address pools. Treat broker-info
like a password: whoever has it can join clusters. Running deploy again changes nothing.

With --chart the hub's objects are installed as the Helm release octopus-hub from the embedded
chart (the same objects: the chart is generated from them), so that helm list, helm upgrade
and helm uninstall manage them; broker-info is written as without it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	o.kube.addFlags(fs, "hub cluster")
	fs.StringVar(&o.output, "broker-info", "broker-info", "where to write broker-info")
	fs.StringVar(&o.deploy.HubURL, "hub-url", "", "URL clusters use to reach the hub's API server (default: the kubeconfig's server)")
	fs.StringVar(&o.deploy.Namespace, "namespace", v1alpha1.DefaultHubNamespace, "hub namespace holding shared state")
	fs.StringVar(&o.globalnet.CIDR, "globalnet-cidr", o.globalnet.CIDR, "pool of global CIDRs for clusters with overlapping addresses")
	fs.IntVar(&o.globalnet.ClusterPrefixLength, "globalnet-prefix-length", o.globalnet.ClusterPrefixLength, "prefix length of each cluster's global CIDR")
	fs.StringVar(&o.secondary.CIDR, "secondary-cidr", o.secondary.CIDR, "pool of secondary-network CIDRs")
	fs.IntVar(&o.secondary.ClusterPrefixLength, "secondary-prefix-length", o.secondary.ClusterPrefixLength, "prefix length of each cluster's secondary CIDR")
	fs.BoolVar(&o.interconnect, "interconnect", false, "also run OVN-IC's interconnection databases (IC NB, IC SB: 3-member raft clusters on TLS) on the hub's nodes, for members joined with --interconnect ovn-ic")
	fs.StringVar(&o.icImage, "interconnect-image", "", "with --interconnect: the secondary network's image (octopus-ovn), which holds ovsdb-server (default: "+defaultOVNImage+" at this CLI's version)")
	fs.StringSliceVar(&o.icTransitSwitches, "transit-switch", []string{render.DefaultTransitSwitch}, "with --interconnect: the transit switches to make (comma list)")
	fs.StringSliceVar(&o.icAddresses, "interconnect-address", nil, "with --interconnect: the hub nodes' IP addresses members reach the databases at, written into their certificate (comma list)")
	fs.BoolVar(&o.useChart, "chart", false, "install the hub as the Helm release of the embedded chart octopus-hub")
	o.chart.addFlags(fs)
	return cmd
}

func (o *hubDeployOptions) Validate() error {
	if _, err := o.globalnet.Pool(); err != nil {
		return fmt.Errorf("--globalnet-cidr/--globalnet-prefix-length: %w", err)
	}
	if _, err := o.secondary.Pool(); err != nil {
		return fmt.Errorf("--secondary-cidr/--secondary-prefix-length: %w", err)
	}
	if !o.interconnect {
		if o.icImage != "" || len(o.icAddresses) > 0 {
			return fmt.Errorf("--interconnect-image and --interconnect-address configure the interconnection databases: add --interconnect")
		}
		return nil
	}
	ic := &hub.InterconnectOptions{Image: o.icImage, TransitSwitches: o.icTransitSwitches}
	if ic.Image == "" {
		ic.Image = defaultOVNImage + ":" + version.Version
	}
	for _, a := range o.icAddresses {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return fmt.Errorf("--interconnect-address %q: give a hub node's IP address: %w", a, err)
		}
		ic.Addresses = append(ic.Addresses, addr)
	}
	o.deploy.Interconnect = ic
	return nil
}

// defaultOVNImage is the secondary network's image (internal/image's OVNRepo, which the CLI
// does not link), tagged with the CLI's version as the charts' images are.
const defaultOVNImage = "ghcr.io/octopus-mcs/octopus-ovn"

func (o *hubDeployOptions) Run(ctx context.Context) error {
	cfg, err := o.kube.restConfig()
	if err != nil {
		return err
	}
	o.deploy.Globalnet, o.deploy.Secondary = o.globalnet, o.secondary
	o.deploy.Progress = &progress.Reporter{W: o.ErrOut}
	if done, err := o.viaOperator(ctx, cfg); done || err != nil {
		return err
	}
	if o.useChart {
		if err := o.chart.install(ctx, o.IOStreams, cfg, charts.Hub, o.deploy.Namespace, nil); err != nil {
			return err
		}
	}
	// With the chart too: Deploy re-applies the chart's objects unchanged (server-side apply
	// shares the fields with Helm's manager) and waits for the join token broker-info needs.
	info, err := hub.Deploy(ctx, cfg, o.deploy)
	if err != nil {
		return err
	}
	if err := info.WriteFile(o.output); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "Hub deployed at %s. Join clusters with:\n  octopus join %s --cluster-id ID --kubeconfig CLUSTER.yaml\n", info.HubURL, o.output)
	return nil
}

// viaOperator deploys the hub through the cluster's Fabric when the Octopus operator runs
// there (charts/octopus-operator), so that the operator, not this run, owns the hub from then
// on; done is false when there is no operator.
func (o *hubDeployOptions) viaOperator(ctx context.Context, cfg *rest.Config) (done bool, err error) {
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return false, fmt.Errorf("connecting to the hub at %s: %w", cfg.Host, err)
	}
	if ok, err := operator.Installed(ctx, c); !ok || err != nil {
		return false, err
	}
	p := o.deploy.Progress
	// The operator's own address for its API server is an in-cluster one; clusters reach the
	// hub where this kubeconfig does, unless --hub-url says otherwise.
	hubURL := o.deploy.HubURL
	if hubURL == "" {
		hubURL = cfg.Host
	}
	p.Step("The Octopus operator runs in this cluster: deploying the hub through Fabric %s", v1alpha1.FabricName)
	spec := v1alpha1.FabricSpec{HubConfig: &v1alpha1.HubConfig{
		Namespace: o.deploy.Namespace, HubURL: hubURL,
		Globalnet: &v1alpha1.CIDRPool{CIDR: o.globalnet.CIDR, ClusterPrefixLength: int32(o.globalnet.ClusterPrefixLength)}, //nolint:gosec // validated prefix length
		Secondary: &v1alpha1.CIDRPool{CIDR: o.secondary.CIDR, ClusterPrefixLength: int32(o.secondary.ClusterPrefixLength)}, //nolint:gosec // validated prefix length
	}}
	if ic := o.deploy.Interconnect; ic != nil {
		spec.HubConfig.Interconnect = &v1alpha1.HubInterconnect{Image: ic.Image, TransitSwitches: ic.TransitSwitches}
		for _, a := range ic.Addresses {
			spec.HubConfig.Interconnect.Addresses = append(spec.HubConfig.Interconnect.Addresses, a.String())
		}
	}
	if err := operator.ApplyFabric(ctx, c, spec); err != nil {
		return true, err
	}
	f, err := operator.WaitFabric(ctx, c, p, operatorTimeout, v1alpha1.FabricBrokerReady)
	if err != nil {
		return true, err
	}
	secret := &corev1.Secret{}
	ns, name, _ := strings.Cut(f.Status.BrokerInfoSecret, "/")
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, secret); err != nil {
		return true, fmt.Errorf("reading the broker-info the operator published (Secret %s): %w", f.Status.BrokerInfoSecret, err)
	}
	info, err := hub.DecodeBrokerInfo(bytes.NewReader(secret.Data[v1alpha1.BrokerInfoKey]))
	if err != nil {
		return true, fmt.Errorf("the broker-info the operator published (Secret %s): %w", f.Status.BrokerInfoSecret, err)
	}
	if err := info.WriteFile(o.output); err != nil {
		return true, err
	}
	fmt.Fprintf(o.Out, "Hub deployed at %s by the operator (Fabric %s; broker-info also in Secret %s). Join clusters with:\n  octopus join %s --cluster-id ID --kubeconfig CLUSTER.yaml\n",
		info.HubURL, v1alpha1.FabricName, f.Status.BrokerInfoSecret, o.output)
	return true, nil
}
