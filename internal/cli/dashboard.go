package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/dashboard"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// dashboardRequestTimeout bounds each API request of a collection, so that a cluster that does
// not answer shows as an error on the page within a few polls instead of stalling it.
const dashboardRequestTimeout = 5 * time.Second

type dashboardOptions struct {
	IOStreams
	kubeconfigs   []string
	hubKubeconfig string
	hubNamespace  string
	listen        string
	allowRemote   bool
	refresh       time.Duration

	members []*rest.Config
	hub     *rest.Config
}

func newDashboardCommand(streams IOStreams) *cobra.Command {
	o := &dashboardOptions{IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "dashboard --kubeconfig A [--kubeconfig B ...] [--hub-kubeconfig H]",
		Short: "Serve a local web page that shows the cluster set live",
		Long: `Serves a page (everything embedded, nothing loaded from elsewhere) that draws the cluster set
and refreshes it every --refresh: the hub, every cluster and its active gateway, the tunnels
between gateways colored by state with their round-trip time and loss (each half of a tunnel is
what the gateway at that end reports), and the exported services with the clusters that export
and import them. Clicking a cluster shows its conditions (the Cluster's and its gateway Peer's).

It only reads (get and list), with your kubeconfigs: the hub through --hub-kubeconfig or else
through the first cluster's own hub credential (Secret octopus-system/octopus-hub); gateway
liveness (the gateway Lease) and imports are read from the clusters given with --kubeconfig.

The page has no authentication, so it listens on 127.0.0.1 and answers only requests for a
loopback host unless --allow-remote is given.

  octopus dashboard --kubeconfig east.yaml --kubeconfig west.yaml
  octopus dashboard --hub-kubeconfig hub.yaml --listen 127.0.0.1:0`,
		Args: cobra.NoArgs,
		RunE: runE(o),
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.kubeconfigs, "kubeconfig", nil, "kubeconfig of a joined cluster (its current context); give it once per cluster")
	f.StringVar(&o.hubKubeconfig, "hub-kubeconfig", "", "kubeconfig of the hub (default: reach the hub through the first cluster's hub credential)")
	f.StringVar(&o.hubNamespace, "hub-namespace", v1alpha1.DefaultHubNamespace, "hub namespace, with --hub-kubeconfig")
	f.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to serve on (port 0 picks a free one)")
	f.BoolVar(&o.allowRemote, "allow-remote", false, "allow a non-loopback --listen address and any Host header: anyone who reaches the port sees what your kubeconfigs can read")
	f.DurationVar(&o.refresh, "refresh", dashboard.DefaultRefresh, "least time between two reads of the clusters")
	return cmd
}

// Complete loads the kubeconfigs.
func (o *dashboardOptions) Complete([]string) error {
	o.members = nil
	for _, path := range o.kubeconfigs {
		cfg, err := loadKubeconfig(path)
		if err != nil {
			return err
		}
		o.members = append(o.members, withTimeout(cfg))
	}
	o.hub = nil
	if o.hubKubeconfig != "" {
		cfg, err := loadKubeconfig(o.hubKubeconfig)
		if err != nil {
			return err
		}
		o.hub = withTimeout(cfg)
	}
	return nil
}

// Validate checks the flags.
func (o *dashboardOptions) Validate() error {
	var errs []string
	if len(o.kubeconfigs) == 0 && o.hubKubeconfig == "" {
		errs = append(errs, "nothing to show: pass --kubeconfig once per joined cluster, or --hub-kubeconfig")
	}
	errs = append(errs, duplicateKubeconfigs(o.kubeconfigs)...)
	if err := dashboard.CheckListen(o.listen, o.allowRemote); err != nil {
		errs = append(errs, err.Error())
	}
	if o.refresh <= 0 {
		errs = append(errs, fmt.Sprintf("--refresh %s: want a positive duration", o.refresh))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	return nil
}

// Run serves until ctx ends. The URL goes to Out, so that scripts (and tests) can read the
// port of --listen HOST:0.
func (o *dashboardOptions) Run(ctx context.Context) error {
	collector := &dashboard.Collector{}
	for i, cfg := range o.members {
		c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
		if err != nil {
			return fmt.Errorf("client for %s (%s): %w", o.kubeconfigs[i], cfg.Host, err)
		}
		collector.Members = append(collector.Members, dashboard.Member{Source: o.kubeconfigs[i], Client: c})
	}
	hubCfg, hubNamespace := o.hub, o.hubNamespace
	if hubCfg == nil {
		hubCfg = o.members[0]
	}
	// As `show`: a joined cluster's own hub credential, or the configuration itself when it
	// is the hub's.
	hc, ns, err := hubClientFor(ctx, hubCfg, hubNamespace)
	if err != nil {
		return fmt.Errorf("reaching the hub through %s: %w (pass --hub-kubeconfig)", hubCfg.Host, err)
	}
	collector.Hub, collector.HubNamespace = hc, ns

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", o.listen, err)
	}
	srv := &http.Server{
		Handler:           (&dashboard.Server{Collect: collector.Collect, Refresh: o.refresh, AllowRemote: o.allowRemote}).Handler(),
		ReadHeaderTimeout: 10 * time.Second,
	}
	fmt.Fprintf(o.Out, "Serving the dashboard on http://%s/ (Ctrl-C to stop)\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving the dashboard: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// withTimeout copies cfg with a per-request timeout unless it has a shorter one.
func withTimeout(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if cfg.Timeout == 0 || cfg.Timeout > dashboardRequestTimeout {
		cfg.Timeout = dashboardRequestTimeout
	}
	return cfg
}
