package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/heartbeat"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/cni"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/progress"
)

func newLabCommand(streams IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Run a hub and several real clusters on this machine",
	}
	dir := defaultLabDir()
	cmd.PersistentFlags().StringVar(&dir, "dir", dir, "directory for everything the lab writes")
	cmd.AddCommand(newLabUpCommand(streams, &dir), newLabDownCommand(streams, &dir), newLabStatusCommand(streams, &dir))
	return cmd
}

func defaultLabDir() string {
	if d, err := stateDir(); err == nil {
		return filepath.Join(d, "lab")
	}
	return filepath.Join(os.TempDir(), "octopus-lab")
}

type labUpOptions struct {
	IOStreams
	dir      *string
	clusters int
	demo     bool
	nodes    int
	// nodesSet tells a --nodes-per-cluster given from the default, which grows with
	// --gateways-per-cluster.
	nodesSet bool
	gateways int
	backend  string
	topology string
	// hubGateways is the number of the hub's gateways with --topology hub; 0 is lab.Up's default.
	hubGateways int
	// overlapping gives every cluster the same pod and service CIDRs.
	overlapping bool
	// direct is lab.Options.DirectClusters: with overlapping, a mixed cluster set.
	direct []string
	// cni is lab.Options.CNI.
	cni string
	// secondary is lab.Options.SecondaryNetwork.
	secondary bool
	// vpcs is lab.Options.Vpcs.
	vpcs bool
	// ipFamily is lab.Options.IPFamily.
	ipFamily string
	// ipv4 is lab.Options.IPv4Clusters: with --ip-family dual, a mixed cluster set.
	ipv4 []string
}

// labFlags names the flag of each lab.Options field that lab up sets, so that the lab's own
// validation speaks to the user in flags.
var labFlags = map[string]string{
	"Clusters": "--clusters", "NodesPerCluster": "--nodes-per-cluster", "GatewaysPerCluster": "--gateways-per-cluster",
	"Backends": "--backend", "Topology": "--topology", "HubGateways": "--hub-gateways", "Dir": "--dir",
	"OverlappingCIDRs": "--overlapping-cidrs", "DirectClusters": "--direct-clusters",
	"CNI": "--cni", "SecondaryNetwork": "--secondary-network", "Vpcs": "--vpcs", "IPFamily": "--ip-family", "IPv4Clusters": "--ipv4-clusters",
}

// labOptions maps the flags onto lab.Options (without the binaries and the progress reporter,
// which Run adds) and has the lab validate them, its errors naming the flags.
func (o *labUpOptions) labOptions() (lab.Options, error) {
	nodes := 0 // the lab's default: one worker besides the gateways
	if o.nodesSet {
		nodes = o.nodes
	}
	backends := map[string]string{lab.HubName: o.backend}
	for i := 1; i <= o.clusters; i++ {
		backends[lab.ClusterName(i)] = o.backend
	}
	opts := lab.Options{Clusters: o.clusters, NodesPerCluster: nodes, GatewaysPerCluster: o.gateways, Backends: backends,
		OverlappingCIDRs: o.overlapping, DirectClusters: o.direct, Topology: v1alpha1.Topology(o.topology), HubGateways: o.hubGateways, Dir: *o.dir,
		CNI: o.cni, SecondaryNetwork: o.secondary, Vpcs: o.vpcs, IPFamily: o.ipFamily, IPv4Clusters: o.ipv4}
	if err := opts.Validate(); err != nil {
		return lab.Options{}, inFlagTerms(err, labFlags)
	}
	return opts, nil
}

// inFlagTerms rewrites every lab.OptionError joined in err with the flag names of flags.
func inFlagTerms(err error, flags map[string]string) error {
	var errs []error
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	} else {
		errs = []error{err}
	}
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		var oe *lab.OptionError
		if !errors.As(e, &oe) {
			out = append(out, e)
			continue
		}
		out = append(out, errors.New(oe.Format(func(field string) string {
			if flag, ok := flags[field]; ok {
				return flag
			}
			return field
		})))
	}
	return errors.Join(out...)
}

func newLabUpCommand(streams IOStreams, dir *string) *cobra.Command {
	o := &labUpOptions{IOStreams: streams, dir: dir}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a hub and N clusters, join them, and run until Ctrl-C",
		Long: `Starts one etcd and, for the hub and each cluster, a real kube-apiserver and
kube-controller-manager (and a kube-scheduler per member cluster). Each member cluster gets
nodes as network namespaces on its own LAN, the first --gateways-per-cluster of them
gateway-labelled (one active gateway, the others standbys), each registered
a real Kubernetes node (containerd with runc and NRI, a kubelet, a CNI: --cni bridge or
flannel) running the real kube-proxy in nftables mode; an underlay namespace joins the
gateways. The nodes run images built on this machine (busybox, alpine/socat, a toolbox,
CoreDNS, the project's own image with the echo server and octopus-dns) from a registry inside
the lab, and Octopus's components as the member chart's pods. Only documentation
addresses (198.51.100.0/24, 203.0.113.0/24) are used outside the clusters. Then it deploys the hub, joins every cluster and runs its
agent, shows the cluster set and keeps running until interrupted, when it stops everything it
started. Each gateway node runs the Octopus gateway (--backend wireguard or vxlan) and every
node a route agent. With --topology mesh the gateways tunnel directly to each other; with
--topology hub every cluster tunnels only to the hub's gateway, which runs in a namespace of
its own on the underlay and forwards between them (--hub-gateways 2 adds a standby that takes
over when it dies). Needs root. The control-plane binaries are built from pinned Go modules on first use
(several minutes). After a crash, ` + "`octopus lab down`" + ` removes what is left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.nodesSet = cmd.Flags().Changed("nodes-per-cluster")
			return o.Run(cmd.Context())
		},
	}
	o.bindFlags(cmd.Flags())
	return cmd
}

func (o *labUpOptions) bindFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.clusters, "clusters", 2, "number of member clusters")
	fs.BoolVar(&o.demo, "demo", false, "also deploy an echo server in cluster1, export it, start a toolbox in cluster2 and show what works across clusters")
	fs.IntVar(&o.nodes, "nodes-per-cluster", 2, "nodes of each member cluster, the first --gateways-per-cluster of them gateways (if not given: one more than the gateways)")
	fs.IntVar(&o.gateways, "gateways-per-cluster", 1, "gateway nodes of each member cluster: one active, the others take over when it dies")
	fs.BoolVar(&o.overlapping, "overlapping-cidrs", false, "give every cluster the same pod and service CIDRs, joined with globalnet addressing (exported services are reached by global IPs)")
	fs.StringSliceVar(&o.direct, "direct-clusters", nil, "with --overlapping-cidrs or --secondary-network, these clusters (e.g. cluster3) keep CIDRs of their own and join with direct addressing: a mixed cluster set")
	fs.StringVar(&o.backend, "backend", string(v1alpha1.BackendWireGuard), "tunnel backend of every cluster's gateway: wireguard or vxlan (unencrypted)")
	fs.StringVar(&o.topology, "topology", string(v1alpha1.TopologyMesh), "how gateways connect: mesh (direct tunnels between all clusters) or hub (every cluster through the hub's gateway)")
	fs.StringVar(&o.cni, "cni", cni.Bridge, "the nodes' CNI: bridge (the reference bridge and host-local plugins, routes between nodes written by the lab) or flannel (flanneld with its VXLAN backend on every node)")
	fs.BoolVar(&o.secondary, "secondary-network", false, "join every cluster with secondary addressing: each pod gets net1 on the cluster's OVN switch, with OVN, the ovnmaster and the NRI plugin as the member chart's pods")
	fs.BoolVar(&o.vpcs, "vpcs", false, "with --secondary-network: in every cluster, VPCs red and blue with identical subnets, a namespace bound to each (red, blue) and an echo pod per VPC on every node; their gateways on the active gateway node")
	fs.StringVar(&o.ipFamily, "ip-family", lab.IPFamilyIPv4, "the member clusters' address family: ipv4, or dual (dual-stack: pods, services and nodes of both families, IPv6 in 2001:db8::/32; the tunnels carry both)")
	fs.StringSliceVar(&o.ipv4, "ipv4-clusters", nil, "with --ip-family dual, these clusters (e.g. cluster2) stay IPv4-only: a mixed cluster set, whose connections say why IPv6 is not offered")
	fs.IntVar(&o.hubGateways, "hub-gateways", 0, "with --topology hub: the hub's gateway nodes, one active, the others take over when it dies (if not given: 1)")
}

func (o *labUpOptions) Run(ctx context.Context) error {
	opts, err := o.labOptions()
	if err != nil {
		return err
	}
	p := &progress.Reporter{W: o.ErrOut}
	agent, err := agentBinary()
	if err != nil {
		return err
	}
	root, _ := os.Getwd()
	binDir, err := controlplane.EnsureBinaries(ctx, root, o.ErrOut)
	if err != nil {
		return fmt.Errorf("%w (run `make k8s-binaries` from the repository)", err)
	}
	opts.BinDir, opts.AgentBinary, opts.Progress = binDir, agent, p
	if _, opts.ContainerdBinDir, err = controlplane.EnsureNodeRuntime(ctx, root, o.ErrOut); err != nil {
		return fmt.Errorf("%w (run `make k8s-binaries` from the repository)", err)
	}
	if opts.CNI == cni.Flannel {
		if opts.FlannelBinDir, err = controlplane.EnsureFlannel(ctx, root, o.ErrOut); err != nil {
			return fmt.Errorf("%w (run hack/flannel.sh from the repository)", err)
		}
	}
	l, err := lab.Up(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		p.Step("Stopping the lab")
		if err := l.Stop(); err != nil {
			fmt.Fprintln(o.ErrOut, "Error stopping the lab:", err)
		}
	}()

	fmt.Fprintln(o.Out, "\nNodes (network namespaces, `ip netns exec <netns> ...`):")
	for _, c := range l.Network.Clusters {
		for _, n := range c.Nodes {
			role := "worker"
			if n.Gateway {
				role = "gateway"
			}
			addr := n.LANAddr.Addr().String()
			if n.LANAddr6.IsValid() {
				addr += "," + n.LANAddr6.Addr().String()
			}
			fmt.Fprintf(o.Out, "  %-16s %-8s %-16s %s\n", n.Name, role, addr, n.Netns)
		}
	}
	fmt.Fprintln(o.Out, "\nKubeconfigs:")
	for _, cp := range l.Env.Clusters {
		fmt.Fprintf(o.Out, "  %-10s %s\n", cp.Name, cp.Kubeconfig)
	}
	fmt.Fprintf(o.Out, "Broker-info: %s\n\n", l.BrokerInfo)

	hc, err := client.New(l.Env.Cluster(lab.HubName).RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		return err
	}
	statuses, err := waitConnected(ctx, hc, len(l.Members))
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "$ octopus show clusters --kubeconfig %s\n", l.Env.Cluster(lab.ClusterName(1)).Kubeconfig)
	if err := renderClusters(o.Out, statuses); err != nil {
		return err
	}
	if o.demo {
		if err := o.runDemo(ctx, l, p); err != nil {
			return err
		}
	}
	fmt.Fprintln(o.Out, "\nThe lab is running. Press Ctrl-C to stop it.")
	<-ctx.Done()
	return nil
}

// waitConnected waits until every member's heartbeat reached the hub.
func waitConnected(ctx context.Context, hc client.Client, members int) ([]cluster.Status, error) {
	var statuses []cluster.Status
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if statuses, err = cluster.CollectStatus(ctx, hc, v1alpha1.DefaultHubNamespace, time.Now()); err != nil {
			return false, nil //nolint:nilerr // the hub was just started; keep polling until the timeout
		}
		connected := 0
		for _, s := range statuses {
			if s.State == heartbeat.StateConnected {
				connected++
			}
		}
		return connected == members, nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return statuses, fmt.Errorf("waiting for the agents' heartbeats: %w (agent logs are in the lab's logs directory)", err)
	}
	return statuses, err
}

func newLabDownCommand(streams IOStreams, dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Remove everything a lab left behind, also after a crash",
		Long: `Kills the lab's processes (found by their pidfiles in --dir), deletes its network
namespaces and links (found by the lab ID derived from --dir) and then --dir. Safe to run twice.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := lab.Down(*dir); err != nil {
				return err
			}
			fmt.Fprintf(streams.Out, "Lab in %s removed.\n", *dir)
			return nil
		},
	}
}

type labStatusOptions struct {
	IOStreams
	dir    *string
	output outputFormat
}

func newLabStatusCommand(streams IOStreams, dir *string) *cobra.Command {
	o := &labStatusOptions{IOStreams: streams, dir: dir}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List the lab's clusters, nodes, kubeconfigs and network namespaces",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.Run(cmd.Context()) },
	}
	o.output.addFlag(cmd.Flags())
	return cmd
}

func (o *labStatusOptions) Run(ctx context.Context) error {
	if err := o.output.validate(); err != nil {
		return err
	}
	st, err := lab.CollectStatus(ctx, *o.dir)
	if err != nil {
		return err
	}
	if o.output == outputJSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	if len(st.Clusters) == 0 && len(st.Namespaces) == 0 {
		fmt.Fprintf(o.Out, "No lab in %s. Start one with `octopus lab up`.\n", st.Dir)
		return nil
	}
	tw := tabwriter.NewWriter(o.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tNODE\tSTATUS\tROLE\tINTERNAL-IP\tPOD-CIDR")
	for _, c := range st.Clusters {
		if c.Error != "" {
			fmt.Fprintf(tw, "%s\t-\tunreachable\t-\t-\t-\n", c.Name)
			continue
		}
		for _, n := range c.Nodes {
			status, role := "NotReady", "worker"
			if n.Ready {
				status = "Ready"
			}
			if n.Gateway {
				role = "gateway"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, n.Name, status, role, n.InternalIP, n.PodCIDR)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(o.Out, "\nKubeconfigs:")
	for _, c := range st.Clusters {
		fmt.Fprintf(o.Out, "  %-10s %s\n", c.Name, c.Kubeconfig)
	}
	fmt.Fprintf(o.Out, "\nNetwork namespaces (lab ID %s): %d\n", st.ID, len(st.Namespaces))
	for _, ns := range st.Namespaces {
		fmt.Fprintf(o.Out, "  %s\n", ns)
	}
	return nil
}

func (o *labUpOptions) runDemo(ctx context.Context, l *lab.Lab, p *progress.Reporter) error {
	exporter, importer := lab.ClusterName(1), lab.ClusterName(2)
	p.Step("Demo: echo server in %s exported, toolbox in %s", exporter, importer)
	r, err := l.Demo(ctx)
	if err != nil {
		return err
	}
	kubectl := fmt.Sprintf("KUBECONFIG=%s kubectl -n %s", l.Env.Cluster(importer).Kubeconfig, lab.DemoNamespace)
	fmt.Fprintf(o.Out, "\n%s imported the echo service exported by %s (MCS API):\n", importer, exporter)
	fmt.Fprintf(o.Out, "  ServiceImport %s/echo  ClusterSet IP %s  endpoints %s\n", lab.DemoNamespace, strings.Join(r.ImportIPs, ","), strings.Join(r.ImportedEndpoints, ","))
	fmt.Fprintf(o.Out, "  %s get serviceimports,endpointslices\n", kubectl)
	fmt.Fprintf(o.Out, "\nFrom the toolbox pod %s, through the gateways' tunnel:\n", r.Toolbox)
	fmt.Fprintf(o.Out, "$ %s exec toolbox -- dig +short %s\n%s\n", kubectl, r.DNSName, r.DNSAnswer)
	fmt.Fprintf(o.Out, "$ %s exec toolbox -- busybox wget -qO- http://%s/\n%s\n", kubectl, r.DNSName, r.CrossClusterReply)
	return nil
}
