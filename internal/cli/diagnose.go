package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/diagnose"
)

type diagnoseOptions struct {
	IOStreams
	checks         []string
	kubeconfigs    []string
	hubKubeconfig  string
	hubNamespace   string
	checkTimeout   time.Duration
	requestTimeout time.Duration
	output         outputFormat

	clusters []diagnose.Target
	hub      *diagnose.Target
}

func newDiagnoseCommand(streams IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "diagnose",
		Short: "Explain what is wrong with the cluster set, and how to fix it",
		Long: `Reads every cluster given and the hub through their APIs (nothing is written, nothing runs
on the nodes) and reports one finding per thing checked: the check, the cluster, a severity
(ok, info, warning, error), what it means and the command or change that fixes it. Checks run
concurrently, each under --check-timeout. The exit status is non-zero when any finding is an
error.

The hub is reached through each cluster's own hub credential (Secret
octopus-system/octopus-hub), or through --hub-kubeconfig.

  octopus diagnose all --kubeconfig east.yaml --kubeconfig west.yaml
  octopus diagnose gateway --kubeconfig east.yaml -o json`,
	}
	cmd.AddCommand(newDiagnoseCheckCommand(streams, "all", "Run every check", nil))
	for _, c := range diagnose.Checks() {
		cmd.AddCommand(newDiagnoseCheckCommand(streams, c.Name, strings.ToUpper(c.Summary[:1])+c.Summary[1:], []string{c.Name}))
	}
	return cmd
}

// newDiagnoseCheckCommand is `diagnose all` (checks nil) or the subcommand of one check.
func newDiagnoseCheckCommand(streams IOStreams, name, short string, checks []string) *cobra.Command {
	o := &diagnoseOptions{IOStreams: streams, checks: checks}
	cmd := &cobra.Command{
		Use:   name + " --kubeconfig A [--kubeconfig B ...]",
		Short: short,
		Args:  cobra.NoArgs,
		RunE:  runE(o),
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.kubeconfigs, "kubeconfig", nil, "kubeconfig of a joined cluster (its current context); give it once per cluster")
	f.StringVar(&o.hubKubeconfig, "hub-kubeconfig", "", "kubeconfig of the hub (default: reach the hub through the clusters' hub credentials)")
	f.StringVar(&o.hubNamespace, "hub-namespace", v1alpha1.DefaultHubNamespace, "hub namespace, with --hub-kubeconfig")
	f.DurationVar(&o.checkTimeout, "check-timeout", diagnose.DefaultCheckTimeout, "time each check may take on each cluster")
	f.DurationVar(&o.requestTimeout, "request-timeout", diagnose.DefaultRequestTimeout, "time each API request may take")
	o.output.addFlag(f)
	return cmd
}

// Complete loads the kubeconfigs.
func (o *diagnoseOptions) Complete([]string) error {
	o.clusters = nil
	for _, path := range o.kubeconfigs {
		cfg, err := loadKubeconfig(path)
		if err != nil {
			return err
		}
		o.clusters = append(o.clusters, diagnose.Target{Config: cfg, Source: path})
	}
	o.hub = nil
	if o.hubKubeconfig != "" {
		cfg, err := loadKubeconfig(o.hubKubeconfig)
		if err != nil {
			return err
		}
		o.hub = &diagnose.Target{Config: cfg, Source: o.hubKubeconfig}
	}
	return nil
}

// Validate checks the flags.
func (o *diagnoseOptions) Validate() error {
	var errs []string
	if len(o.kubeconfigs) == 0 && o.hubKubeconfig == "" {
		errs = append(errs, "nothing to diagnose: pass --kubeconfig once per joined cluster (and --hub-kubeconfig for the hub's own view)")
	}
	errs = append(errs, duplicateKubeconfigs(o.kubeconfigs)...)
	if err := o.output.validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if o.checkTimeout <= 0 || o.requestTimeout <= 0 {
		errs = append(errs, fmt.Sprintf("--check-timeout %s, --request-timeout %s: want positive durations", o.checkTimeout, o.requestTimeout))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	return nil
}

// Run diagnoses, prints the findings (table or JSON) to Out and progress to ErrOut, and fails
// naming the checks that found errors.
func (o *diagnoseOptions) Run(ctx context.Context) error {
	report, err := diagnose.Run(ctx, diagnose.Options{
		Clusters: o.clusters, Hub: o.hub, HubNamespace: o.hubNamespace, Checks: o.checks,
		CheckTimeout: o.checkTimeout, RequestTimeout: o.requestTimeout, Progress: o.ErrOut,
	})
	if err != nil {
		return err
	}
	if o.output == outputJSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	} else if err := diagnose.Render(o.Out, report); err != nil {
		return err
	}
	if report.Failed() {
		return fmt.Errorf("diagnose found errors (%s): each finding's fix says what to do", report.Errors())
	}
	return nil
}
