package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/ipam/hostaddr"
	"github.com/octopus-mcs/octopus/internal/secondarynet/gatewayuplink"
)

// gatewayPortOptions are the flags of `octopus-ovn gateway-port`.
type gatewayPortOptions struct {
	clusterID     string
	secondaryCIDR string
	ovsdb         string
	bridge        string
	mtu           int
	interval      time.Duration
	healthAddr    string
	// The VPC gateways: off without --sb or --nb.
	sb          string
	sbTLS       tlsFlags
	nb          string
	nbTLS       tlsFlags
	nodeName    string
	vpcNetnsDir string
	// clusterCIDRs are the cluster's pod and service CIDRs, which no VPC may reach.
	clusterCIDRs []string
}

func newGatewayPortCommand() *cobra.Command {
	o := gatewayPortOptions{}
	cmd := &cobra.Command{
		Use:   "gateway-port",
		Short: "Keep this gateway node's interface on the cluster's OVN logical switch",
		Long: `gateway-port runs on every gateway node, active or standing by. It gives the node an interface
on the cluster's logical switch: octgw, with the block's first host (the address the pods route
the other clusters' blocks to) and its MAC, whose other end octgw-ovs is a port of the OVS
integration bridge bound to the logical port <cluster>_gateway. It checks it at start and every
--interval, repairing what drifted and leaving what is right alone, so the active gateway's
traffic is not interrupted. Before each check it writes the nftables table
octopus-gateway-guard: what the pods send to the node itself through octgw is dropped, but
replies to the node's own connections and ICMP, so that a service listening on all of the
node's addresses does not answer the secondary network.

The ovnmaster requests the logical port on the chassis of the active gateway's node (the one
the ConfigMap octopus-gateway names, else the gateway Lease's holder; the chassis is the node's
name), and OVN binds it only there: the interface of a standby node
carries nothing until its node takes over. For the same reason the interface stays when the
process stops (a rolling update must not cut the active gateway's traffic) and when the node
stops being a gateway node.

With --sb (or --nb) it also keeps the gateways of the cluster's VPCs whose gateway port the
ovnmaster requested on this node's chassis (--node-name), read from the port's southbound
binding (with the certificate of the node's ovn-controller, which the node holds anyway) or its
northbound row: each in a network namespace of its own,
octvpc-<vpc> in --vpc-netns-dir, holding the VPC's end of its gateway link, with routes back to
the VPC's subnets. A VPC gone or whose gateway moved to another node loses its namespace here;
a database out of reach changes nothing. Making namespaces needs CAP_SYS_ADMIN besides
NET_ADMIN.

It runs in the network namespace of the node's ovs-vswitchd (the host's).`,
		Example: `  octopus-ovn gateway-port --cluster-id east --secondary-cidr 10.112.0.0/16 --ovsdb unix:/var/run/openvswitch/db.sock`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := o.options()
			if err != nil {
				return err
			}
			opts.Log = ctrl.Log.WithName("gateway-port")
			if opts.Vpcs != nil {
				opts.Vpcs.Log = opts.Log.WithName("vpc")
				if src, ok := opts.Vpcs.Source.(*gatewayuplink.DBSource); ok {
					src.Log = opts.Vpcs.Log
					defer src.Close()
				}
			}
			return gatewayuplink.Run(ctrl.SetupSignalHandler(), opts, o.healthAddr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.clusterID, "cluster-id", "", "this cluster's ID (required)")
	f.StringVar(&o.secondaryCIDR, "secondary-cidr", "", "this cluster's secondary CIDR, allocated by the hub at join (required)")
	f.StringVar(&o.ovsdb, "ovsdb", "", `the node's Open vSwitch database, in ovs-vsctl's --db syntax; "" is ovs-vsctl's default`)
	f.StringVar(&o.bridge, "bridge", "br-int", "the OVS integration bridge ovn-controller manages")
	f.IntVar(&o.mtu, "mtu", 1400, "MTU of the interface: the node's MTU less the Geneve overhead, as the pods' net1")
	f.DurationVar(&o.interval, "interval", gatewayuplink.DefaultInterval, "how often the interface is checked and repaired")
	f.StringVar(&o.healthAddr, "health-probe-bind-address", fmt.Sprintf(":%d", gatewayuplink.DefaultHealthPort),
		`address of /healthz and /readyz (ready once the interface is attached); "0" turns them off`)
	f.StringVar(&o.sb, "sb", "", `the OVN southbound database (unix:PATH, ssl:HOST:PORT with --sb-private-key, --sb-certificate, --sb-ca-cert, or tcp:HOST:PORT), to keep the VPC gateways requested on this node; "" keeps none`)
	o.sbTLS.register(f, "sb")
	f.StringVar(&o.nb, "nb", "", `the OVN northbound database instead of --sb (same syntax, --nb-private-key, --nb-certificate, --nb-ca-cert)`)
	o.nbTLS.register(f, "nb")
	f.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name, its OVN chassis name (system-id), with --sb or --nb (default $NODE_NAME)")
	f.StringVar(&o.vpcNetnsDir, "vpc-netns-dir", podport.DefaultNetnsDir, "where the VPC gateways' network namespaces are made, with --sb or --nb")
	f.StringSliceVar(&o.clusterCIDRs, "cluster-cidr", nil, "this cluster's pod and service CIDRs (repeat, or a comma list; required with --sb or --nb): no VPC opens a connection to them, nor to --secondary-cidr, through its gateway")
	_ = cmd.MarkFlagRequired("cluster-id")
	_ = cmd.MarkFlagRequired("secondary-cidr")
	return cmd
}

// options checks the flags, each error naming its flag and what to pass instead.
func (o gatewayPortOptions) options() (gatewayuplink.Options, error) {
	var errs []error
	if msgs := validation.IsDNS1123Label(o.clusterID); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--cluster-id %q is not a cluster ID (%s): pass the ID the cluster joined with (kubectl get clusters on the hub)", o.clusterID, msgs[0]))
	}
	cidr, err := netip.ParsePrefix(o.secondaryCIDR)
	if err == nil {
		_, err = hostaddr.NewBlock(cidr)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("--secondary-cidr %q: %w (pass the cluster's secondaryCIDR, e.g. 10.112.0.0/16: kubectl get clusters -o wide on the hub)", o.secondaryCIDR, err))
	}
	if o.bridge == "" {
		errs = append(errs, errors.New(`--bridge is empty: pass the integration bridge ovn-controller manages ("br-int")`))
	}
	if o.mtu < 68 || o.mtu > 65535 {
		errs = append(errs, fmt.Errorf("--mtu %d is out of range: pass the pods' net1 MTU, the nodes' less Geneve's 100 bytes (1400 on a 1500 network)", o.mtu))
	}
	if o.interval <= 0 {
		errs = append(errs, fmt.Errorf("--interval %v must be positive: a repair waits at most this long (e.g. 10s)", o.interval))
	}
	protected, err := gatewayuplink.ProtectedCIDRs(cidr, o.clusterCIDRs)
	if err != nil {
		errs = append(errs, fmt.Errorf("--cluster-cidr %w", err))
	}
	var vpcs *gatewayuplink.VpcOptions
	if o.sb != "" && o.nb != "" {
		errs = append(errs, errors.New("--sb and --nb both given: pass one, --sb on a gateway node (with its ovn-controller's certificate)"))
	}
	if endpoint, flag, tlsOf := o.vpcDatabase(); endpoint != "" {
		dbTLS, err := tlsOf.clientConfig(endpoint)
		if err != nil {
			errs = append(errs, err)
		}
		if len(o.clusterCIDRs) == 0 {
			errs = append(errs, fmt.Errorf("--%s without --cluster-cidr: pass the cluster's pod and service CIDRs, so that no VPC reaches the cluster's pods and Services through its gateway", flag))
		}
		if o.nodeName == "" {
			errs = append(errs, fmt.Errorf("--%s without --node-name: pass this node's name (its OVN chassis name), e.g. from the pod's spec.nodeName as $NODE_NAME", flag))
		}
		if !filepath.IsAbs(o.vpcNetnsDir) {
			errs = append(errs, fmt.Errorf("--vpc-netns-dir %q is not an absolute path: pass %s, where `ip netns` finds namespaces", o.vpcNetnsDir, podport.DefaultNetnsDir))
		}
		vpcs = &gatewayuplink.VpcOptions{
			ClusterID: o.clusterID, Chassis: o.nodeName, NetnsDir: o.vpcNetnsDir, MTU: o.mtu, Interval: o.interval,
			Node: podport.Node{OVSDB: o.ovsdb, Bridge: o.bridge}, Protected: protected,
			Source: &gatewayuplink.DBSource{Endpoint: endpoint, TLS: dbTLS, Southbound: flag == "sb"},
		}
	}
	if err := errors.Join(errs...); err != nil {
		return gatewayuplink.Options{}, err
	}
	return gatewayuplink.Options{
		Config: gatewayuplink.Config{
			ClusterID: o.clusterID, CIDR: cidr, MTU: o.mtu,
			Node: podport.Node{OVSDB: o.ovsdb, Bridge: o.bridge}, Protected: protected,
		},
		Interval: o.interval,
		Vpcs:     vpcs,
	}, nil
}

// vpcDatabase is the database the VPC gateways are read from, its flag and TLS flags: --sb's,
// else --nb's, else none ("").
func (o *gatewayPortOptions) vpcDatabase() (endpoint, flag string, tlsOf *tlsFlags) {
	if o.sb != "" {
		return o.sb, "sb", &o.sbTLS
	}
	return o.nb, "nb", &o.nbTLS
}
