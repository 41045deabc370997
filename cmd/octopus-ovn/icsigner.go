package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/octopus-mcs/octopus/internal/pki"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icsigner"
)

// icSignerOptions are the flags of `octopus-ovn ic-signer`.
type icSignerOptions struct {
	kubeconfig, namespace, caCert, caKey       string
	healthProbeBindAddress, metricsBindAddress string
}

func newICSignerCommand() *cobra.Command {
	o := icSignerOptions{}
	cmd := &cobra.Command{
		Use:   "ic-signer",
		Short: "Sign the member clusters' OVN-IC client certificates on the hub",
		Long: `ic-signer runs on the hub beside the interconnection databases. Each member cluster that joins
with --interconnect ovn-ic publishes a certificate request in the hub namespace (ConfigMap
interconnect-csr-<cluster ID>, written with its own hub credential); ic-signer signs it with the
interconnection CA for the cluster ID of the ConfigMap's octopus.io/cluster label, which the
hub's admission policy confines to the writer's own ID, and writes the certificate back.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			certPEM, err := os.ReadFile(o.caCert)
			if err != nil {
				return fmt.Errorf("--ca-cert: %w (the interconnection CA's certificate, Secret octopus-ic-ca)", err)
			}
			keyPEM, err := os.ReadFile(o.caKey)
			if err != nil {
				return fmt.Errorf("--ca-key: %w (the interconnection CA's key, Secret octopus-ic-ca)", err)
			}
			ca, err := pki.ParseCA(certPEM, keyPEM)
			if err != nil {
				return fmt.Errorf("--ca-cert, --ca-key: %w", err)
			}
			hub, err := memberConfig(o.kubeconfig)
			if err != nil {
				return err
			}
			return icsigner.Run(ctrl.SetupSignalHandler(), icsigner.Options{
				Hub: hub, Namespace: o.namespace, CA: ca,
				HealthProbeBindAddress: o.healthProbeBindAddress, MetricsBindAddress: o.metricsBindAddress,
				Log: ctrl.Log.WithName("ic-signer"),
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the hub; empty means in-cluster configuration")
	f.StringVar(&o.namespace, "namespace", "octopus-hub", "the hub namespace, where the requests are")
	f.StringVar(&o.caCert, "ca-cert", "/etc/octopus/ic-ca/tls.crt", "the interconnection CA's certificate")
	f.StringVar(&o.caKey, "ca-key", "/etc/octopus/ic-ca/tls.key", "the interconnection CA's key")
	f.StringVar(&o.healthProbeBindAddress, "health-probe-bind-address", "0", `address of the /healthz and /readyz endpoints; "0" turns them off`)
	f.StringVar(&o.metricsBindAddress, "metrics-bind-address", "0", `address of the Prometheus metrics endpoint (/metrics); "0" turns it off`)
	return cmd
}
