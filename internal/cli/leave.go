package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/manifests/release"
	"github.com/octopus-mcs/octopus/internal/progress"
)

type leaveOptions struct {
	IOStreams
	kube  kubeconfigFlags
	leave cluster.LeaveOptions
}

func newLeaveCommand(streams IOStreams) *cobra.Command {
	o := &leaveOptions{IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "leave",
		Short: "Remove a cluster from its hub: everything it has on the hub and in the cluster",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.Run(cmd.Context()) },
	}
	o.kube.addFlags(cmd.Flags(), "cluster that leaves")
	cmd.Flags().BoolVar(&o.leave.KeepHub, "keep-hub", false, "clean up only this cluster, for a hub that is gone for good")
	return cmd
}

func (o *leaveOptions) Run(ctx context.Context) error {
	c, cfg, err := o.kube.client()
	if err != nil {
		return err
	}
	cred, err := hubaccess.LoadCredential(ctx, c)
	if err != nil {
		return err
	}
	// Stop a local agent first, so that it cannot recreate its heartbeat while we clean up.
	if err := stopDetachedAgent(cred.ClusterID); err != nil {
		return fmt.Errorf("stopping the agent of %s: %w", cred.ClusterID, err)
	}
	// And the components the member chart installed (`join --agent charts`), for the same reason.
	if err := release.Uninstall(ctx, cfg, charts.Member, v1alpha1.SystemNamespace, 0); err != nil {
		return fmt.Errorf("uninstalling the components of %s: %w", cred.ClusterID, err)
	}
	o.leave.Progress = &progress.Reporter{W: o.ErrOut}
	if err := cluster.Leave(ctx, cfg, o.leave); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "Cluster %s left the hub at %s.\n", cred.ClusterID, cred.Server)
	return nil
}
