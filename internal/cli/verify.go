package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/octopus-mcs/octopus/internal/verify"
)

type verifyOptions struct {
	IOStreams
	workloadFlags
	serverImage  string
	clientImage  string
	checkTimeout time.Duration
}

func newVerifyCommand(streams IOStreams) *cobra.Command {
	o := &verifyOptions{IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "verify --kubeconfig A --kubeconfig B [--kubeconfig C ...]",
		Short: "Check pod-to-pod, pod-to-service and DNS connectivity between joined clusters",
		Long: `Deploys, in a temporary namespace (octopus-verify-<random>) of every cluster, a probe server
behind an exported Service and a client pod, waits for them and for every cluster to import the
others' probe services, and then checks from each cluster to each other one:

  pod-to-pod      the client requests the other cluster's probe server by pod IP (globalnet:
                  its global IP; secondary addressing: its net1 address)
  clusterset-ip   ... the other cluster's exported Service by its ClusterSet IP
  dns             <svc>.<ns>.svc.clusterset.local resolves to that IP and answers

Between clusters joined with --addressing secondary there is no ClusterSet IP, and clients
reach the exporters' pods on the service's target port:

  pod-to-pod         the other cluster's probe server by its net1 address (from the pod's
                     k8s.v1.cni.cncf.io/network-status annotation)
  secondary-service  the ServiceImport is marked octopus.io/addressing: secondary, its
                     EndpointSlices hold that net1 address, and the endpoint answers
  dns                the name resolves to only that net1 address and answers on the target port

A check passes only when the answer names the other cluster. Each cluster's addressing is read
from its Cluster on the hub with the cluster's own credential; when the hub cannot be read, a
probe server carrying the secondary network's annotations shows a cluster on it, and any other
cluster is checked as direct (the report says which). A pair of clusters of which only one uses
secondary addressing cannot connect: its checks fail at once with AddressingMismatch. The
namespace is deleted at the end, also on Ctrl-C. Each kubeconfig's current context is used. The
exit status is non-zero when a check fails, and the summary names the failed checks.

  octopus verify --kubeconfig east.yaml --kubeconfig west.yaml
  octopus verify --kubeconfig east.yaml --kubeconfig west.yaml -o json`,
		Args: cobra.NoArgs,
		RunE: runE(o),
	}
	f := cmd.Flags()
	o.addFlags(f, "verify", 10*time.Minute, verify.DefaultReadyTimeout)
	f.StringVar(&o.serverImage, "server-image", verify.DefaultServerImage, "probe server image (answers HTTP on 8080 with cluster=, node=, pod=)")
	f.StringVar(&o.clientImage, "client-image", verify.DefaultClientImage, "probe client image (needs curl and dig)")
	f.DurationVar(&o.checkTimeout, "check-timeout", verify.DefaultCheckTimeout, "time each check may take, retries included")
	return cmd
}

// Validate checks the flags.
func (o *verifyOptions) Validate() error {
	errs := o.validate("verify checks")
	errs = append(errs, positiveDurations(map[string]time.Duration{"--check-timeout": o.checkTimeout})...)
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
	if err := o.output.print(o.Out, report, func(w io.Writer) error { return verify.Render(w, report) }); err != nil {
		return err
	}
	if !report.Passed {
		return fmt.Errorf("%s (`octopus show connections` and `octopus show services` show the tunnels and imports)", report.Summary())
	}
	return nil
}
