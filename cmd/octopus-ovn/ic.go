package main

import (
	"crypto/tls"
	"fmt"
	"net/netip"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/octopus-mcs/octopus/internal/pki"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icmaster"
)

// icOptions are the flags of `octopus-ovn ic`.
type icOptions struct {
	kubeconfig, clusterID, secondaryCIDR, pool, nb string
	endpointsFile                                  string
	leaderElect                                    bool
	leaderElectionNS                               string
	healthProbeBindAddress, metricsBindAddress     string
	nbTLS                                          tlsFlags
	icCert, icKey, icCA                            string
}

func newICCommand() *cobra.Command {
	o := icOptions{}
	cmd := &cobra.Command{
		Use:   "ic",
		Short: "Make the cluster's OVN network an availability zone of OVN interconnection",
		Long: `ic reads the cluster's ovn-ic-config ConfigMap (kube-system; Kube-OVN's keys: enable-ic,
az-name, ic-db-host, ic-nb-port, ic-sb-port, gw-nodes, auto-route) and keeps the cluster's OVN
northbound database in step: the AZ named after the cluster ID, a router joining the secondary
network's switch to the transit switch, its transit port on the gw-nodes' chassis by priority,
and ovn-ic's route advertisement and learning. The annotation
octopus.io/disable-interconnection: "true" on the ConfigMap keeps the cluster's block from being
advertised. What it did is in the ConfigMap's octopus.io/interconnection-status annotation.
ovn-ic itself runs beside it (Debian's ovn-ic, under octopus-ovn ic-supervisor), on the IC
endpoints this writes to --endpoints-file on every replica, so that a changed ic-db-host,
ic-nb-port or ic-sb-port reaches it without a new pod.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cidr, err := netip.ParsePrefix(o.secondaryCIDR)
			if err != nil {
				return fmt.Errorf("--secondary-cidr %q: %w", o.secondaryCIDR, err)
			}
			pool, err := netip.ParsePrefix(o.pool)
			if err != nil {
				return fmt.Errorf("--secondary-pool %q: %w (the hub's pool of secondary blocks, e.g. 10.112.0.0/12)", o.pool, err)
			}
			member, err := memberConfig(o.kubeconfig)
			if err != nil {
				return err
			}
			nbTLS, err := o.nbTLS.clientConfig(o.nb)
			if err != nil {
				return err
			}
			var icTLS *tls.Config
			if o.icCert != "" || o.icKey != "" || o.icCA != "" {
				// No server name: each IC database member's certificate is checked against
				// the address dialed (the hub's certificate names every node's address).
				if icTLS, err = pki.ClientConfig(o.icCert, o.icKey, o.icCA, ""); err != nil {
					return fmt.Errorf("--ic-certificate: %w", err)
				}
			}
			return icmaster.Run(ctrl.SetupSignalHandler(), icmaster.Options{
				Member: member, ClusterID: o.clusterID, CIDR: cidr, Pool: pool, NBEndpoint: o.nb, NBTLS: nbTLS, ICTLS: icTLS,
				EndpointsFile:  o.endpointsFile,
				LeaderElection: o.leaderElect, LeaderElectionNamespace: o.leaderElectionNS,
				HealthProbeBindAddress: o.healthProbeBindAddress, MetricsBindAddress: o.metricsBindAddress,
				Log: ctrl.Log.WithName("icmaster"),
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the member cluster; empty means in-cluster configuration")
	f.StringVar(&o.clusterID, "cluster-id", "", "this cluster's ID, the AZ's name (required)")
	f.StringVar(&o.secondaryCIDR, "secondary-cidr", "", "this cluster's secondary block, allocated by the hub at join (required)")
	f.StringVar(&o.pool, "secondary-pool", "", "the hub's pool of secondary blocks; the block's place in it gives the transit address (required)")
	f.StringVar(&o.nb, "nb", "unix:/run/ovn/ovnnb_db.sock", "the OVN northbound database: unix:PATH, tcp:HOST:PORT or ssl:HOST:PORT (with --nb-private-key, --nb-certificate, --nb-ca-cert)")
	o.nbTLS.register(f, "nb")
	f.StringVar(&o.icKey, "ic-private-key", "", "PEM private key of the cluster's IC client certificate (join's Secret octopus-ovn-ic-tls)")
	f.StringVar(&o.icCert, "ic-certificate", "", "PEM IC client certificate the hub's signer issued for this cluster, for the IC SB at ovn-ic-config's ssl: endpoints")
	f.StringVar(&o.icCA, "ic-ca-cert", "", "PEM certificate of the hub's IC CA, the only one the IC databases' certificate is checked against")
	f.StringVar(&o.endpointsFile, "endpoints-file", "", "write ovn-ic-config's IC endpoints here, on every replica, for the ovn-ic of this pod (octopus-ovn ic-supervisor); empty: not written")
	f.BoolVar(&o.leaderElect, "leader-elect", true, "elect one active replica through the "+icmaster.LeaderElectionID+" Lease")
	f.StringVar(&o.leaderElectionNS, "leader-election-namespace", "octopus-system", "namespace of the leader-election Lease")
	f.StringVar(&o.healthProbeBindAddress, "health-probe-bind-address", "0", `address of the /healthz and /readyz endpoints; "0" turns them off`)
	f.StringVar(&o.metricsBindAddress, "metrics-bind-address", "0", `address of the Prometheus metrics endpoint (/metrics); "0" turns it off`)
	for _, name := range []string{"cluster-id", "secondary-cidr", "secondary-pool"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
