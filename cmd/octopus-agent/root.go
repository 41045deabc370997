package main

import (
	goflag "flag"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/octopus-mcs/octopus/internal/memlimit"
	"github.com/octopus-mcs/octopus/internal/version"
)

// newRootCommand builds the octopus-agent command tree.
func newRootCommand() *cobra.Command {
	zapOpts := zap.Options{}
	root := &cobra.Command{
		Use:   "octopus-agent",
		Short: "The Octopus daemon of a member cluster",
		Long: `octopus-agent runs the Octopus components of a member cluster, one per subcommand.

Every flag can also be set from the environment: OCTOPUS_<FLAG>, e.g.
OCTOPUS_HEARTBEAT_INTERVAL=5s for --heartbeat-interval; the command line wins.

Examples:
  # Heartbeat to the hub this cluster joined, outside the cluster:
  octopus-agent controller --kubeconfig east.yaml`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := flagsFromEnv(cmd.Flags(), os.LookupEnv); err != nil {
				return err
			}
			logger := zap.New(zap.UseFlagOptions(&zapOpts))
			ctrl.SetLogger(logger)
			// client-go's leader election and transport log through klog: same sink, same format.
			klog.SetLogger(logger)
			// In a container with a memory limit, collect garbage harder near it rather than
			// be killed at it; not being able to read the limit is no reason not to run.
			if limit, err := memlimit.Set(memlimit.DefaultRatio); err != nil {
				logger.Error(err, "Could not read the cgroup memory limit; running without a soft memory limit (set GOMEMLIMIT to choose one)")
			} else if limit > 0 {
				logger.Info("Set the Go soft memory limit from the cgroup's", "limitBytes", limit, "ratio", memlimit.DefaultRatio)
			}
			return nil
		},
	}
	zapFlags := goflag.NewFlagSet("zap", goflag.ContinueOnError)
	zapOpts.BindFlags(zapFlags)
	root.PersistentFlags().AddGoFlagSet(zapFlags)

	root.AddCommand(newControllerCommand())
	root.AddCommand(newRouteAgentCommand())
	root.AddCommand(newGatewayCommand())
	return root
}
