package main

import (
	"fmt"
	"net/netip"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/globalnet"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
	"github.com/octopus-mcs/octopus/internal/secondarynet/ovnmaster"
)

// masterOptions are the flags of `octopus-ovn master`.
type masterOptions struct {
	kubeconfig             string
	clusterID              string
	secondaryCIDR          string
	nb                     string
	nbTLS                  tlsFlags
	leaderElect            bool
	leaderElectionNS       string
	healthProbeBindAddress string
	metricsBindAddress     string
	interconnect           bool
	globalCIDR             string
	globalEgressSize       int32
	globalPool             string
}

func newMasterCommand() *cobra.Command {
	o := masterOptions{}
	cmd := &cobra.Command{
		Use:   "master",
		Short: "Give every pod a port and an address on the cluster's OVN logical switch",
		Long: `master watches the pods of the member cluster and keeps the OVN northbound database in step:
one logical switch for the cluster's secondary CIDR, one port with an address from it (and port
security) for every pod, released when the pod goes. Each pod's address and MAC are written to
its k8s.v1.cni.cncf.io/network-status annotation (interface net1); a pod that cannot get one
gets the reason in its octopus.io/secondary-network-error annotation and an event. Pods opt out
with the annotation octopus.io/secondary-network: "false"; host-network pods and the system
namespaces are never on the network. The NB database is the only record of the addresses: a
restarted master keeps every one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cidr, err := netip.ParsePrefix(o.secondaryCIDR)
			if err != nil {
				return fmt.Errorf("--secondary-cidr %q: %w (the cluster's secondaryCIDR, e.g. 10.112.0.0/16: see `kubectl get clusters -o wide` on the hub)", o.secondaryCIDR, err)
			}
			nbTLS, err := o.nbTLS.clientConfig(o.nb)
			if err != nil {
				return err
			}
			global, err := o.globalLayout()
			if err != nil {
				return err
			}
			pool, err := o.parseGlobalPool()
			if err != nil {
				return err
			}
			member, err := memberConfig(o.kubeconfig)
			if err != nil {
				return err
			}
			return ovnmaster.Run(ctrl.SetupSignalHandler(), ovnmaster.Options{
				Member: member, ClusterID: o.clusterID, CIDR: cidr, NBEndpoint: o.nb, NBTLS: nbTLS,
				LeaderElection: o.leaderElect, LeaderElectionNamespace: o.leaderElectionNS,
				HealthProbeBindAddress: o.healthProbeBindAddress, MetricsBindAddress: o.metricsBindAddress,
				Interconnect: o.interconnect, Global: global, GlobalPool: pool, Log: ctrl.Log.WithName("ovnmaster"),
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the member cluster; empty means in-cluster configuration")
	f.StringVar(&o.clusterID, "cluster-id", "", "this cluster's ID (required)")
	f.StringVar(&o.secondaryCIDR, "secondary-cidr", "", "this cluster's secondary CIDR, allocated by the hub at join (required)")
	f.StringVar(&o.nb, "nb", "unix:/run/ovn/ovnnb_db.sock", "the OVN northbound database: unix:PATH, ssl:HOST:PORT (with --nb-private-key, --nb-certificate, --nb-ca-cert) or tcp:HOST:PORT")
	o.nbTLS.register(f, "nb")
	f.BoolVar(&o.leaderElect, "leader-elect", true, "elect one active replica through the "+ovnmaster.LeaderElectionID+" Lease")
	f.StringVar(&o.leaderElectionNS, "leader-election-namespace", "octopus-system", "namespace of the leader-election Lease")
	f.StringVar(&o.healthProbeBindAddress, "health-probe-bind-address", "0", `address of the /healthz and /readyz endpoints, e.g. ":8081"; "0" turns them off`)
	f.StringVar(&o.metricsBindAddress, "metrics-bind-address", fmt.Sprintf(":%d", ovnmaster.DefaultMetricsPort), `address of the Prometheus metrics endpoint (/metrics); "0" turns it off`)
	f.BoolVar(&o.interconnect, "interconnect", false, "the cluster is an OVN-IC availability zone (octopus-ovn ic): leave the block's gateway address to the interconnection router, making no gateway port")
	f.StringVar(&o.globalCIDR, "global-cidr", "", "this cluster's global CIDR, allocated by the hub at join (optional): each Vpc's gateway gets an external address from its pool; empty means none")
	f.Int32Var(&o.globalEgressSize, "global-egress-size", 0, "the cluster's spec.globalEgressSize (0: the default, 8), which lays out --global-cidr as the agent's allocator does")
	f.StringVar(&o.globalPool, "global-pool", "", "the hub's globalnet pool, where every cluster's global CIDR is (optional): VPC pods route it through their VPC's router, so that traffic to other clusters' global addresses leaves by the VPC's gateway")
	_ = cmd.MarkFlagRequired("cluster-id")
	_ = cmd.MarkFlagRequired("secondary-cidr")
	return cmd
}

// parseGlobalPool parses --global-pool; the zero prefix without one.
func (o masterOptions) parseGlobalPool() (netip.Prefix, error) {
	if o.globalPool == "" {
		return netip.Prefix{}, nil
	}
	p, err := netip.ParsePrefix(o.globalPool)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("--global-pool %q: want an IPv4 CIDR, the hub's globalnet pool (globalnet.cidr in the hub's broker-info, 242.0.0.0/8 by default)", o.globalPool)
	}
	return p.Masked(), nil
}

// globalLayout lays out --global-cidr as the agent's allocator lays out the Cluster's spec
// (globalnet.ClusterLayout), so that both count the same pool; nil without a global CIDR.
func (o masterOptions) globalLayout() (*globalip.Layout, error) {
	if o.globalCIDR == "" {
		return nil, nil
	}
	l, err := globalnet.ClusterLayout(v1alpha1.ClusterSpec{ClusterID: o.clusterID, GlobalCIDR: o.globalCIDR, GlobalEgressSize: o.globalEgressSize})
	if err != nil {
		return nil, fmt.Errorf("--global-cidr %q, --global-egress-size %d: %w (pass the Cluster's spec.globalCIDR and spec.globalEgressSize: kubectl get clusters -o yaml on the hub)", o.globalCIDR, o.globalEgressSize, err)
	}
	return &l, nil
}
