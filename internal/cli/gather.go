package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/gather"
	"github.com/octopus-mcs/octopus/internal/lab"
)

type gatherOptions struct {
	IOStreams
	kubeconfigs   []string
	hubKubeconfig string
	hubNamespace  string
	outputDir     string
	labDir        string

	opts gather.Options
}

func newGatherCommand(streams IOStreams) *cobra.Command {
	o := &gatherOptions{IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "gather --kubeconfig A [--kubeconfig B ...] [-o DIR]",
		Short: "Write one archive with what it takes to debug the cluster set",
		Long: `Collects into one archive (DIR/octopus-gather-<time>.tar.gz): the Octopus objects of the hub
(Clusters, Peers, Leases, CIDR claims, exported services' records and EndpointSlices, and its
pods and events with --hub-kubeconfig) and of every cluster (octopus-system's pods, events,
Deployments, DaemonSets, Services, EndpointSlices, ConfigMaps and Leases; ClusterProperties,
Fabrics, Nodes; ServiceExports, ServiceImports, the exported Services and their
EndpointSlices, the imported EndpointSlices; the CoreDNS and kube-proxy ConfigMaps), and the
logs of the components that run as pods, previous containers included. index.json lists every
file and what could not be collected, and why.

No Secret is read, and every file is redacted: private keys, tokens and other credentials are
replaced by <redacted>.

The nodes' kernel state (routes, rules, nftables, tunnel devices) needs access to the nodes,
which the Kubernetes API does not give; with --lab-dir it is collected from a lab's nodes
(root), together with the logs of the lab's Octopus processes.

  octopus gather --kubeconfig east.yaml --kubeconfig west.yaml -o /tmp
  octopus gather --kubeconfig cluster1.kubeconfig --hub-kubeconfig hub.kubeconfig --lab-dir`,
		Args: cobra.NoArgs,
		RunE: runE(o),
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.kubeconfigs, "kubeconfig", nil, "kubeconfig of a joined cluster (its current context); give it once per cluster")
	f.StringVar(&o.hubKubeconfig, "hub-kubeconfig", "", "kubeconfig of the hub (default: read the hub through a cluster's hub credential)")
	f.StringVar(&o.hubNamespace, "hub-namespace", v1alpha1.DefaultHubNamespace, "hub namespace, with --hub-kubeconfig")
	f.StringVarP(&o.outputDir, "output-dir", "o", ".", "directory to write the archive into")
	f.StringVar(&o.labDir, "lab-dir", "", "also collect the kernel state of the nodes of the lab in DIR: --lab-dir=DIR, or --lab-dir alone for the default lab directory (root)")
	f.Lookup("lab-dir").NoOptDefVal = defaultLabDir()
	return cmd
}

// Complete loads the kubeconfigs.
func (o *gatherOptions) Complete([]string) error {
	o.opts = gather.Options{HubNamespace: o.hubNamespace, Dir: o.outputDir, Progress: o.ErrOut}
	for _, path := range o.kubeconfigs {
		cfg, err := loadKubeconfig(path)
		if err != nil {
			return err
		}
		o.opts.Clusters = append(o.opts.Clusters, gather.Target{Config: cfg, Source: path})
	}
	if o.hubKubeconfig != "" {
		cfg, err := loadKubeconfig(o.hubKubeconfig)
		if err != nil {
			return err
		}
		o.opts.Hub = &gather.Target{Config: cfg, Source: o.hubKubeconfig}
	}
	if o.labDir != "" {
		o.opts.Nodes = lab.NodeState{Dir: o.labDir}
	}
	return nil
}

// Validate checks the flags.
func (o *gatherOptions) Validate() error {
	var errs []string
	if len(o.kubeconfigs) == 0 && o.hubKubeconfig == "" {
		errs = append(errs, "nothing to gather: pass --kubeconfig once per joined cluster (and --hub-kubeconfig for the hub's pods and events)")
	}
	errs = append(errs, duplicateKubeconfigs(o.kubeconfigs)...)
	if st, err := os.Stat(o.outputDir); err != nil || !st.IsDir() {
		errs = append(errs, fmt.Sprintf("--output-dir %s: not a directory", o.outputDir))
	}
	if o.labDir != "" && os.Geteuid() != 0 {
		errs = append(errs, "--lab-dir: reading the lab's nodes needs root (they are network namespaces)")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	return nil
}

// Run writes the archive and prints its path; progress goes to ErrOut.
func (o *gatherOptions) Run(ctx context.Context) error {
	res, err := gather.Run(ctx, o.opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "%s: %d files", res.Path, len(res.Index.Files))
	if n := len(res.Index.Skipped); n > 0 {
		fmt.Fprintf(o.Out, ", %d things not collected (index.json says why)", n)
	}
	fmt.Fprintln(o.Out, ".")
	return nil
}
