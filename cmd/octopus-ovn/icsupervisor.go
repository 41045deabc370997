package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/octopus-mcs/octopus/internal/datapath/ovnic"
)

// newICSupervisorCommand is `octopus-ovn ic-supervisor`, the ovn-ic container's entry
// (icconfig.SupervisorCommand): ovn-ic takes its IC databases only on its command line and
// has no command to change them, so this runs it on the endpoints the icmaster writes from
// ovn-ic-config and restarts it when they change (ovnic.Supervisor).
func newICSupervisorCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "ic-supervisor --endpoints-file FILE -- ovn-ic [ARGS...]",
		Short: "Run ovn-ic on the IC endpoints of a file and restart it when they change",
		Long: `ic-supervisor starts ovn-ic (the command line after --) with --ic-nb-db and --ic-sb-db
from FILE, which the icmaster in the same pod writes from kube-system/ovn-ic-config (ic-db-host,
ic-nb-port, ic-sb-port). When the file's endpoints change it stops ovn-ic (SIGTERM) and starts it
on the new ones; until the file exists it waits, and a malformed file leaves ovn-ic as it is.
It exits with ovn-ic's error when ovn-ic exits by itself.

Example:
  octopus-ovn ic-supervisor --endpoints-file /var/run/ovn-ic/ic-endpoints.json -- \
    ovn-ic --ovnnb-db=unix:/var/run/ovn-ic/nb.sock --ovnsb-db=unix:/var/run/ovn-ic/sb.sock`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 {
				return errors.New("ovn-ic's command line goes after --, e.g. -- ovn-ic --ovnnb-db=unix:/var/run/ovn-ic/nb.sock")
			}
			s := &ovnic.Supervisor{File: file, Argv: args, Log: ctrl.Log.WithName("ic-supervisor")}
			return s.Run(ctrl.SetupSignalHandler())
		},
	}
	cmd.Flags().StringVar(&file, "endpoints-file", "", "the IC endpoints file the icmaster writes (required)")
	_ = cmd.MarkFlagRequired("endpoints-file")
	return cmd
}

// newICProbeCommand is `octopus-ovn ic-probe`, the ovn-ic container's liveness probe
// (icconfig.ProbeCommand): ovn-ic answering on its control socket, as before the supervisor,
// except while the supervisor waits for the endpoints file. Then there is no ovn-ic to ask, and
// a failing probe would restart the container over and over, the kubelet's growing backoff
// delaying ovn-ic's start once the icmaster writes the file.
func newICProbeCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "ic-probe --endpoints-file FILE -- COMMAND [ARGS...]",
		Short: "Probe ovn-ic with COMMAND, or succeed while its supervisor waits for the endpoints file",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 {
				return errors.New("the probe's command goes after --, e.g. -- ovn-appctl -t /var/run/ovn-ic/ovn-ic.ctl version")
			}
			waiting, err := ovnic.Probe(cmd.Context(), file, args)
			if waiting {
				_, _ = fmt.Fprintf(cmd.OutOrStdout(), "ovn-ic not started: its supervisor waits for %s\n", file)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&file, "endpoints-file", "", "the IC endpoints file the supervisor waits for (required)")
	_ = cmd.MarkFlagRequired("endpoints-file")
	return cmd
}
