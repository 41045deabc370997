// Command octopus-operator reconciles the cluster's Fabric (internal/operator): it makes the
// cluster the hub or joins it to one, from one custom resource. A binary of its own, so that
// the daemons (octopus-agent, octopus-dns) never link provisioning code (internal/archtest).
package main

import (
	goflag "flag"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/octopus-mcs/octopus/internal/operator"
	"github.com/octopus-mcs/octopus/internal/version"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	zapOpts := zap.Options{}
	var o operator.RunOptions
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "octopus-operator",
		Short: "Reconcile the cluster's Fabric: deploy a hub, or join a hub, from one custom resource",
		Long: `octopus-operator watches the cluster-scoped Fabric named octopus. With spec.hubConfig it
makes the cluster the hub and publishes broker-info in the Secret broker-info of the hub
namespace; with spec.joinConfig it joins the hub of the referenced broker-info Secret and
installs the member chart, upgrading it when the joinConfig changes. Deleting the Fabric
leaves the hub. Replicas elect one active operator (--leader-elect).`,
		Version:       version.Version,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			logger := zap.New(zap.UseFlagOptions(&zapOpts))
			ctrl.SetLogger(logger)
			klog.SetLogger(logger)
			// With no path, the in-cluster configuration.
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return fmt.Errorf("loading the cluster's configuration: %w", err)
			}
			o.Config, o.Log, o.AppVersion = cfg, logger.WithName("operator"), version.Version
			return operator.Run(ctrl.SetupSignalHandler(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster; empty means in-cluster configuration")
	f.BoolVar(&o.LeaderElection, "leader-elect", true, "elect one active replica through the Lease "+operator.LeaseName)
	f.StringVar(&o.HubNamespace, "hub-namespace", "", `the one hub namespace the operator's RBAC covers (the chart's hub.namespace), "`+operator.NoHubNamespace+`" for none; a hub Fabric naming another gets a condition saying what to change. Empty: no check`)
	f.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader-election Lease (default $POD_NAMESPACE, else octopus-operator)")
	f.StringVar(&o.MetricsBindAddress, "metrics-bind-address", fmt.Sprintf(":%d", operator.DefaultMetricsPort), `address of the Prometheus metrics endpoint; "0" turns it off`)
	f.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", `address of /healthz and /readyz; "0" turns them off`)
	zapFlags := goflag.NewFlagSet("zap", goflag.ContinueOnError)
	zapOpts.BindFlags(zapFlags)
	f.AddGoFlagSet(zapFlags)
	return cmd
}
