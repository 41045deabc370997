package main

import (
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/metricsserver"
	"github.com/octopus-mcs/octopus/internal/secondarynet/nriplugin"
)

// nriOptions are the flags of `octopus-ovn nri`.
type nriOptions struct {
	kubeconfig    string
	nodeName      string
	clusterID     string
	secondaryCIDR string
	routes        []string
	socket        string
	pluginIdx     string
	ovsdb         string
	bridge        string
	mtu           int
	addressWait   time.Duration
	metricsAddr   string
	healthAddr    string
}

func newNRICommand() *cobra.Command {
	o := nriOptions{}
	cmd := &cobra.Command{
		Use:   "nri",
		Short: "Give every pod of this node its net1 on the OVN logical switch when its sandbox starts",
		Long: `nri is an NRI plugin of the node's containerd. When a pod's sandbox starts, it waits (at most
--address-wait) for the address the ovnmaster wrote to the pod's k8s.v1.cni.cncf.io/network-status
annotation, then adds net1 to the pod: a veth whose node end is a port of the OVS integration
bridge bound to the pod's logical switch port, with the pod's address and MAC and routes to the
--route blocks through the cluster's gateway. It removes net1 and the port when the sandbox stops.

A pod that should have net1 and cannot get it does not start: the reason is in the pod's
FailedCreatePodSandBox event, and the kubelet retries. Host-network pods, the system namespaces
and pods annotated octopus.io/secondary-network: "false" are not touched.

It runs on every node, in the network namespace of the node's ovs-vswitchd (the host's).`,
		Example: `  octopus-ovn nri --cluster-id east --secondary-cidr 10.112.0.0/16 --route 10.112.0.0/12`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cidr, err := netip.ParsePrefix(o.secondaryCIDR)
			if err != nil {
				return fmt.Errorf("--secondary-cidr %q: %w", o.secondaryCIDR, err)
			}
			var routes []netip.Prefix
			for _, r := range o.routes {
				p, err := netip.ParsePrefix(r)
				if err != nil {
					return fmt.Errorf("--route %q: %w", r, err)
				}
				routes = append(routes, p)
			}
			kube, err := memberConfig(o.kubeconfig)
			if err != nil {
				return err
			}
			// Listening before anything else makes a taken port fail the start, not go unnoticed.
			ls, err := metricsserver.ListenBoth(o.metricsAddr, o.healthAddr)
			if err != nil {
				return err
			}
			return nriplugin.Run(ctrl.SetupSignalHandler(), nriplugin.Options{
				Config: nriplugin.Config{
					ClusterID: o.clusterID, CIDR: cidr, Routes: routes, MTU: o.mtu, AddressWait: o.addressWait,
					Node: podport.Node{OVSDB: o.ovsdb, Bridge: o.bridge},
				},
				Kube: kube, NodeName: o.nodeName, Socket: o.socket, PluginIdx: o.pluginIdx, Log: ctrl.Log.WithName("nri"),
				MetricsListener: ls.Metrics, HealthListener: ls.Health,
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the member cluster; empty means in-cluster configuration")
	f.StringVar(&o.clusterID, "cluster-id", "", "this cluster's ID (required)")
	f.StringVar(&o.secondaryCIDR, "secondary-cidr", "", "this cluster's secondary CIDR, allocated by the hub at join (required)")
	f.StringSliceVar(&o.routes, "route", nil, "other clusters' secondary blocks, or the hub's secondary pool, reached through the gateway (repeatable)")
	f.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "name of the node this plugin runs on, whose pods it watches (default $NODE_NAME)")
	f.StringVar(&o.socket, "nri-socket", nriplugin.DefaultSocket, "containerd's NRI socket")
	f.StringVar(&o.pluginIdx, "plugin-index", nriplugin.DefaultPluginIdx, "the plugin's place among the node's NRI plugins")
	f.StringVar(&o.ovsdb, "ovsdb", "", `the node's Open vSwitch database, in ovs-vsctl's --db syntax; "" is ovs-vsctl's default`)
	f.StringVar(&o.bridge, "bridge", "br-int", "the OVS integration bridge ovn-controller manages")
	f.IntVar(&o.mtu, "mtu", 1400, "MTU of net1: the node's MTU less the Geneve overhead")
	f.DurationVar(&o.addressWait, "address-wait", nriplugin.DefaultAddressWait, "how long a starting pod waits for its address (below NRI's request timeout)")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", fmt.Sprintf(":%d", nriplugin.DefaultMetricsPort),
		`address of the Prometheus metrics endpoint (/metrics: the time RunPodSandbox adds to each pod's start); "0" turns it off`)
	f.StringVar(&o.healthAddr, "health-probe-bind-address", fmt.Sprintf(":%d", nriplugin.DefaultHealthPort),
		`address of the health probes: /healthz (the process serves) and /readyz (registered with containerd's NRI); "0" turns them off`)
	_ = cmd.MarkFlagRequired("cluster-id")
	_ = cmd.MarkFlagRequired("secondary-cidr")
	return cmd
}
