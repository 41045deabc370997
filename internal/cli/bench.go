package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/octopus-mcs/octopus/internal/bench"
	"github.com/octopus-mcs/octopus/internal/workload"
)

type benchOptions struct {
	IOStreams
	kind         bench.Kind
	kubeconfigs  []string
	namespace    string
	image        string
	duration     time.Duration
	streams      int
	size         int
	repeat       int
	timeout      time.Duration
	readyTimeout time.Duration
	output       outputFormat

	clusters []workload.Cluster
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
Service by its cluster IP), with the ratio of the two. The namespace is deleted at the end,
also on Ctrl-C. Each kubeconfig's current context is used.

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
	f.StringArrayVar(&o.kubeconfigs, "kubeconfig", nil, "kubeconfig of a joined cluster; give it once per cluster (at least two)")
	f.StringVar(&o.namespace, "namespace", "", "namespace to create for the pods in every cluster (default octopus-bench-<random>)")
	f.StringVar(&o.image, "image", bench.DefaultImage, "image of the servers and the load generator (Octopus's echo image, whose octopus-echo also generates the load)")
	f.DurationVar(&o.duration, "duration", bench.DefaultDuration, "how long each run measures")
	f.IntVar(&o.repeat, "repeat", 1, "runs per measurement; the median is reported")
	if kind == bench.KindThroughput {
		f.IntVar(&o.streams, "streams", bench.DefaultStreams, "parallel TCP streams")
	} else {
		f.IntVar(&o.size, "size", bench.DefaultSize, "request and response size in bytes")
	}
	f.DurationVar(&o.timeout, "timeout", 20*time.Minute, "deadline of the whole run")
	f.DurationVar(&o.readyTimeout, "ready-timeout", bench.DefaultReadyTimeout, "time to wait for the pods, and then for the service imports")
	o.output.addFlag(f)
	return cmd
}

// Complete loads the kubeconfigs.
func (o *benchOptions) Complete([]string) error {
	o.clusters = nil
	for _, path := range o.kubeconfigs {
		cfg, err := loadKubeconfig(path)
		if err != nil {
			return err
		}
		o.clusters = append(o.clusters, workload.Cluster{Config: cfg, Source: path})
	}
	return nil
}

// Validate checks the flags.
func (o *benchOptions) Validate() error {
	var errs []string
	if len(o.kubeconfigs) < 2 {
		errs = append(errs, fmt.Sprintf("bench measures between clusters: pass --kubeconfig at least twice (got %d)", len(o.kubeconfigs)))
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
	}{{"--duration", o.duration}, {"--timeout", o.timeout}, {"--ready-timeout", o.readyTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Sprintf("%s %s: want a positive duration", d.name, d.v))
		}
	}
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
	if o.output == outputJSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	} else if err := bench.Render(o.Out, report); err != nil {
		return err
	}
	if failed := report.Failed(); len(failed) > 0 {
		return fmt.Errorf("%d measurements failed: %s (`octopus verify` checks the paths between the clusters)", len(failed), strings.Join(failed, ", "))
	}
	return nil
}
