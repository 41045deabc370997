package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/heartbeat"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
)

func newShowCommand(streams IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "show", Short: "Show what is connected"}
	cmd.AddCommand(newShowClustersCommand(streams), newShowServicesCommand(streams), newShowConnectionsCommand(streams),
		newShowPodsCommand(streams), newShowVpcsCommand(streams), newShowRoutesCommand(streams))
	return cmd
}

type showClustersOptions struct {
	IOStreams
	kube      kubeconfigFlags
	namespace string
	output    outputFormat
}

func newShowClustersCommand(streams IOStreams) *cobra.Command {
	o := &showClustersOptions{IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "clusters",
		Short: "List the clusters of the cluster set with their CIDRs and heartbeat",
		Long: `Reads the hub through the given kubeconfig: either a joined cluster's (its own hub
credential is used) or the hub's own.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.output.validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.kube.addFlags(cmd.Flags(), "hub or of a joined cluster")
	cmd.Flags().StringVar(&o.namespace, "hub-namespace", v1alpha1.DefaultHubNamespace, "hub namespace, when --kubeconfig is the hub's")
	o.output.addFlag(cmd.Flags())
	return cmd
}

func (o *showClustersOptions) Run(ctx context.Context) error {
	cfg, err := o.kube.restConfig()
	if err != nil {
		return err
	}
	hc, ns, err := hubClientFor(ctx, cfg, o.namespace)
	if err != nil {
		return err
	}
	statuses, err := cluster.CollectStatus(ctx, hc, ns, time.Now())
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("%s is neither a joined cluster nor a hub: run `octopus join` there, or pass the hub's kubeconfig", cfg.Host)
	}
	if err != nil {
		return err
	}
	if o.output == outputJSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(statuses)
	}
	return renderClusters(o.Out, statuses)
}

// hubClientFor returns a hub client: through the cluster's own hub credential when cfg is a
// joined cluster, otherwise cfg itself is taken to be the hub.
func hubClientFor(ctx context.Context, cfg *rest.Config, hubNamespace string) (client.Client, string, error) {
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, "", fmt.Errorf("connecting to %s: %w", cfg.Host, err)
	}
	cred, err := hubaccess.LoadCredential(ctx, c)
	switch {
	case err == nil:
		hc, err := client.New(cred.RESTConfig(), client.Options{Scheme: kube.Scheme})
		return hc, cred.Namespace, err
	case errors.Is(err, hubaccess.ErrNotJoined):
		return c, hubNamespace, nil
	default:
		return nil, "", err
	}
}

func renderClusters(w io.Writer, statuses []cluster.Status) error {
	if len(statuses) == 0 {
		_, err := fmt.Fprintln(w, "No clusters have joined yet: run `octopus join BROKER-INFO --cluster-id ID`.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tPOD CIDRS\tSERVICE CIDRS\tADDRESSING\tGLOBAL CIDR\tSECONDARY CIDR\tHEARTBEAT\tSTATE")
	connected := 0
	for _, s := range statuses {
		age := "never"
		if s.HeartbeatAge != nil {
			age = s.HeartbeatAge.Round(time.Second).String() + " ago"
		}
		if s.State == heartbeat.StateConnected {
			connected++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ClusterID, strings.Join(s.PodCIDRs, ","), strings.Join(s.ServiceCIDRs, ","),
			s.Addressing, s.GlobalCIDR, s.SecondaryCIDR, age, s.State)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d of %d clusters connected.\n", connected, len(statuses))
	return err
}
