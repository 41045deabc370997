package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/octopus-mcs/octopus/internal/bench"
)

type benchOptions struct {
	IOStreams
	workloadFlags
	kind     bench.Kind
	image    string
	duration time.Duration
	streams  int
	size     int
	repeat   int
}

func newBenchCommand(streams IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench throughput|latency --kubeconfig A --kubeconfig B",
		Short: "Measure throughput or latency between joined clusters, against the same inside one cluster",
		Long: `Deploys, in a temporary namespace (octopus-bench-<random>) of every cluster, a server behind
an exported Service and a client pod (both Octopus's echo image, which also holds the load
generator), and measures from each cluster to each other one, one measurement at a time:

  pod-to-pod       the client to the other cluster's server pod
  pod-to-service   the client to the other cluster's exported Service, by its ClusterSet IP

each next to the same path inside the client's own cluster (the server pod by its IP, the
Service by its cluster IP), with the ratio of the two. Between two dual-stack clusters with
direct addressing each path is measured in IPv4 and then in IPv6 (pod-to-pod/IPv4,
pod-to-pod/IPv6, the baselines too), and a second table gives IPv6/IPv4 of the same run; where
one side has no IPv6, a note says why IPv6 was not measured (as verify checks). The namespace is
deleted at the end, also on Ctrl-C. Each kubeconfig's current context is used.

  octopus bench throughput --kubeconfig east.yaml --kubeconfig west.yaml
  octopus bench latency --kubeconfig east.yaml --kubeconfig west.yaml --repeat 3 -o json`,
	}
	cmd.AddCommand(
		newBenchKindCommand(streams, bench.KindThroughput, "TCP throughput: several streams into a discard server for --duration, bytes per second summed"),
		newBenchKindCommand(streams, bench.KindLatency, "Request/response latency over one TCP connection: p50, p99 and requests per second"),
	)
	return cmd
}

func newBenchKindCommand(streams IOStreams, kind bench.Kind, short string) *cobra.Command {
	o := &benchOptions{IOStreams: streams, kind: kind}
	cmd := &cobra.Command{
		Use:   string(kind) + " --kubeconfig A --kubeconfig B [--kubeconfig C ...]",
		Short: short,
		Args:  cobra.NoArgs,
		RunE:  runE(o),
	}
	f := cmd.Flags()
	o.addFlags(f, "bench", 20*time.Minute, bench.DefaultReadyTimeout)
	f.StringVar(&o.image, "image", bench.DefaultImage, "image of the servers and the load generator (Octopus's echo image, whose octopus-echo also generates the load)")
	f.DurationVar(&o.duration, "duration", bench.DefaultDuration, "how long each run measures")
	f.IntVar(&o.repeat, "repeat", 1, "runs per measurement; the median is reported")
	if kind == bench.KindThroughput {
		f.IntVar(&o.streams, "streams", bench.DefaultStreams, "parallel TCP streams")
	} else {
		f.IntVar(&o.size, "size", bench.DefaultSize, "request and response size in bytes")
	}
	return cmd
}

// Validate checks the flags.
func (o *benchOptions) Validate() error {
	errs := o.validate("bench measures")
	errs = append(errs, positiveDurations(map[string]time.Duration{"--duration": o.duration})...)
	for _, n := range []struct {
		name string
		v    int
		set  bool
	}{{"--repeat", o.repeat, true}, {"--streams", o.streams, o.kind == bench.KindThroughput}, {"--size", o.size, o.kind == bench.KindLatency}} {
		if n.set && n.v <= 0 {
			errs = append(errs, fmt.Sprintf("%s %d: want a positive number", n.name, n.v))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// Run measures, prints the table or JSON to Out and progress to ErrOut, and fails naming the
// failed measurements.
func (o *benchOptions) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	report, err := bench.Run(ctx, bench.Options{
		Clusters: o.clusters, Kind: o.kind, Namespace: o.namespace, Image: o.image,
		Duration: o.duration, Streams: o.streams, Size: o.size, Repeat: o.repeat,
		ReadyTimeout: o.readyTimeout, Progress: o.ErrOut,
	})
	if err != nil {
		return fmt.Errorf("bench could not measure: %w", err)
	}
	if err := o.output.print(o.Out, report, func(w io.Writer) error { return bench.Render(w, report) }); err != nil {
		return err
	}
	if failed := report.Failed(); len(failed) > 0 {
		return fmt.Errorf("%d measurements failed: %s (`octopus verify` checks the paths between the clusters)", len(failed), strings.Join(failed, ", "))
	}
	return nil
}
