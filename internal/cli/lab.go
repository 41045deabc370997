package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab"
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
	cmd.AddCommand(newLabUpCommand(streams, &dir), newLabDownCommand(streams, &dir))
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
}

func newLabUpCommand(streams IOStreams, dir *string) *cobra.Command {
	o := &labUpOptions{IOStreams: streams, dir: dir}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a hub and N clusters, join them, and run until Ctrl-C",
		Long: `Starts one etcd and, for the hub and each cluster, a real kube-apiserver and
kube-controller-manager; deploys the hub, joins every cluster and runs its agent; then shows
the cluster set and keeps running until interrupted, when it stops everything it started.
The control-plane binaries are built from pinned Go modules on first use (several minutes).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.Run(cmd.Context()) },
	}
	cmd.Flags().IntVar(&o.clusters, "clusters", 2, "number of member clusters")
	return cmd
}

func (o *labUpOptions) Run(ctx context.Context) error {
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
	l, err := lab.Up(ctx, lab.Options{Clusters: o.clusters, Dir: *o.dir, BinDir: binDir, AgentBinary: agent, Progress: p})
	if err != nil {
		return err
	}
	defer func() {
		p.Step("Stopping the lab")
		if err := l.Stop(); err != nil {
			fmt.Fprintln(o.ErrOut, "Error stopping the lab:", err)
		}
	}()

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
			if s.State == cluster.StateConnected {
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
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := controlplane.CleanupStale(*dir); err != nil {
				return err
			}
			fmt.Fprintf(streams.Out, "Lab in %s removed.\n", *dir)
			return nil
		},
	}
}
