// Package cli is the `octopus` command: each subcommand is an Options struct that owns its
// flags and output streams, with Complete, Validate and Run.
package cli

import (
	"io"
	"os"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/octopus-mcs/octopus/internal/version"
)

// IOStreams are where a command reads and writes, so that tests can capture them.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// StdStreams are the process's standard streams.
func StdStreams() IOStreams { return IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr} }

// NewRootCommand builds the whole command tree.
func NewRootCommand(streams IOStreams) *cobra.Command {
	// Library logging is for daemons; the CLI reports through its own output.
	log.SetLogger(logr.Discard())
	root := &cobra.Command{
		Use:   "octopus",
		Short: "Connect Kubernetes clusters into one secure network",
		Long: `octopus deploys a hub, joins clusters to it and shows what is connected.

  octopus hub deploy --kubeconfig hub.yaml            # writes ./broker-info
  octopus join broker-info --cluster-id east --kubeconfig east.yaml
  octopus show clusters --kubeconfig east.yaml
  octopus leave --kubeconfig east.yaml
  octopus lab up                                      # a hub and two clusters on this machine`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version,
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.AddCommand(
		newHubCommand(streams),
		newJoinCommand(streams),
		newLeaveCommand(streams),
		newShowCommand(streams),
		newLabCommand(streams),
		newExportCommand(streams),
		newUnexportCommand(streams),
		newVerifyCommand(streams),
		newDiagnoseCommand(streams),
		newGatherCommand(streams),
		newBenchCommand(streams),
		newDashboardCommand(streams),
	)
	return root
}
