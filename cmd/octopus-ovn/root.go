package main

import (
	goflag "flag"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/octopus-mcs/octopus/internal/version"
)

// newRootCommand builds the octopus-ovn command tree.
func newRootCommand() *cobra.Command {
	zapOpts := zap.Options{}
	root := &cobra.Command{
		Use:   "octopus-ovn",
		Short: "The OVN secondary network of a member cluster",
		Long: `octopus-ovn runs the components of the secondary network (addressing "secondary"), one
per subcommand.

Examples:
  # Give every pod of cluster east an address from 10.112.0.0/16 on OVN:
  octopus-ovn master --cluster-id east --secondary-cidr 10.112.0.0/16 --nb unix:/run/ovn/ovnnb_db.sock

  # On every node of east, add net1 to its pods as they start:
  octopus-ovn nri --cluster-id east --secondary-cidr 10.112.0.0/16 --route 10.112.0.0/12

  # On every gateway node of east, keep the gateway's interface on the switch:
  octopus-ovn gateway-port --cluster-id east --secondary-cidr 10.112.0.0/16

  # Make east an OVN-IC availability zone as its ovn-ic-config says:
  octopus-ovn ic --cluster-id east --secondary-cidr 10.112.0.0/24 --secondary-pool 10.112.0.0/12

  # Run ovn-ic on the IC endpoints the icmaster writes from ovn-ic-config, restarting it on a change:
  octopus-ovn ic-supervisor --endpoints-file /var/run/ovn-ic/ic-endpoints.json -- ovn-ic ...`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(*cobra.Command, []string) {
			logger := zap.New(zap.UseFlagOptions(&zapOpts))
			ctrl.SetLogger(logger)
			// client-go's leader election logs through klog: same sink, same format.
			klog.SetLogger(logger)
		},
	}
	zapFlags := goflag.NewFlagSet("zap", goflag.ContinueOnError)
	zapOpts.BindFlags(zapFlags)
	root.PersistentFlags().AddGoFlagSet(zapFlags)
	root.AddCommand(newMasterCommand(), newNRICommand(), newGatewayPortCommand(), newICCommand(), newICSignerCommand(), newDBProxyCommand(), newICSupervisorCommand(), newICProbeCommand())
	return root
}
