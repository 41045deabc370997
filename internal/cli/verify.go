package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/octopus-mcs/octopus/internal/verify"
)

type verifyOptions struct {
	IOStreams
	kubeconfigs  []string
	namespace    string
	serverImage  string
	clientImage  string
	timeout      time.Duration
	checkTimeout time.Duration
	readyTimeout time.Duration
	output       outputFormat

	clusters []verify.Cluster
}

func newVerifyCommand(streams IOStreams) *cobra.Command {
	o := &verifyOptions{IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "verify --kubeconfig A --kubeconfig B [--kubeconfig C ...]",
		Short: "Check pod-to-pod, ClusterSet IP and DNS connectivity between joined clusters",
		Long: `Deploys, in a temporary namespace (octopus-verify-<random>) of every cluster, a probe server
behind an exported Service and a client pod, waits for them and for every cluster to import the
others' probe services, and then checks from each cluster to each other one:

  pod-to-pod      the client requests the other cluster's probe server by pod IP
  clusterset-ip   ... the other cluster's exported Service by its ClusterSet IP
  dns             <svc>.<ns>.svc.clusterset.local resolves to that IP and answers

A check passes only when the answer names the other cluster. The namespace is deleted at the
end, also on Ctrl-C. Each kubeconfig's current context is used. The exit status is non-zero
when a check fails, and the summary names the failed checks.

  octopus verify --kubeconfig east.yaml --kubeconfig west.yaml
  octopus verify --kubeconfig east.yaml --kubeconfig west.yaml -o json`,
		Args: cobra.NoArgs,
		RunE: runE(o),
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.kubeconfigs, "kubeconfig", nil, "kubeconfig of a joined cluster; give it once per cluster (at least two)")
	f.StringVar(&o.namespace, "namespace", "", "namespace to create for the probes in every cluster (default octopus-verify-<random>)")
	f.StringVar(&o.serverImage, "server-image", verify.DefaultServerImage, "probe server image (answers HTTP on 8080 with cluster=, node=, pod=)")
	f.StringVar(&o.clientImage, "client-image", verify.DefaultClientImage, "probe client image (needs curl and dig)")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "deadline of the whole run")
	f.DurationVar(&o.checkTimeout, "check-timeout", verify.DefaultCheckTimeout, "time each check may take, retries included")
	f.DurationVar(&o.readyTimeout, "ready-timeout", verify.DefaultReadyTimeout, "time to wait for the probe pods, and then for the service imports")
	o.output.addFlag(f)
	return cmd
}

// Complete loads the kubeconfigs.
func (o *verifyOptions) Complete([]string) error {
	o.clusters = nil
	for _, path := range o.kubeconfigs {
		cfg, err := loadKubeconfig(path)
		if err != nil {
			return err
		}
		o.clusters = append(o.clusters, verify.Cluster{Config: cfg, Source: path})
	}
	return nil
}

// Validate checks the flags.
func (o *verifyOptions) Validate() error {
	var errs []string
	if len(o.kubeconfigs) < 2 {
		errs = append(errs, fmt.Sprintf("verify checks between clusters: pass --kubeconfig at least twice (got %d)", len(o.kubeconfigs)))
	}
	errs = append(errs, duplicateKubeconfigs(o.kubeconfigs)...)
	if err := o.output.validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if o.namespace != "" {
		if msgs := validation.IsDNS1123Label(o.namespace); len(msgs) > 0 {
			errs = append(errs, fmt.Sprintf("--namespace %q: %s", o.namespace, strings.Join(msgs, "; ")))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--timeout", o.timeout}, {"--check-timeout", o.checkTimeout}, {"--ready-timeout", o.readyTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Sprintf("%s %s: want a positive duration", d.name, d.v))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// Run verifies, prints the table or JSON to Out and progress to ErrOut, and fails naming
// the failed checks.
func (o *verifyOptions) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	report, err := verify.Run(ctx, verify.Options{
		Clusters: o.clusters, Namespace: o.namespace, ServerImage: o.serverImage, ClientImage: o.clientImage,
		CheckTimeout: o.checkTimeout, ReadyTimeout: o.readyTimeout, Progress: o.ErrOut,
	})
	if err != nil {
		return fmt.Errorf("verify could not run its checks: %w", err)
	}
	if o.output == outputJSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	} else if err := verify.Render(o.Out, report); err != nil {
		return err
	}
	if !report.Passed {
		return fmt.Errorf("%s (`octopus show connections` and `octopus show services` show the tunnels and imports)", report.Summary())
	}
	return nil
}
