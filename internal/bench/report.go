package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/internal/bench/load"
	"github.com/octopus-mcs/octopus/internal/bench/stats"
	"github.com/octopus-mcs/octopus/internal/workload"
)

// Kind is what bench measures.
type Kind string

const (
	// KindThroughput is TCP throughput: several streams into a discard server, bytes summed.
	KindThroughput Kind = "throughput"
	// KindLatency is request/response latency: small requests, one at a time, over one TCP
	// connection to an echo server.
	KindLatency Kind = "latency"
)

// Path is the way a client reaches the server.
type Path string

const (
	// PathPod is pod → pod, by the server pod's address (address says which).
	PathPod Path = "pod-to-pod"
	// PathService is pod → Service: across clusters the exported Service by its ClusterSet
	// IP, in the client's own cluster the Service by its cluster IP.
	PathService Path = "pod-to-service"
)

// Paths are the paths measured, in report order.
var Paths = []Path{PathPod, PathService}

// Measurement is one client → server measurement, the median of its runs.
type Measurement struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Family is the address family measured ("IPv4" or "IPv6") when the pair is measured in
	// both (workload.PairFamilies); empty when it is measured once, in the clusters' primary
	// family (or IPv4 under globalnet and secondary addressing).
	Family string `json:"family,omitempty"`
	// Address is the server address the client used, host:port.
	Address string `json:"address,omitempty"`
	// ClientNode and ServerNode are where the pods ran: an in-cluster baseline between two
	// nodes crosses the cluster's network, one on a single node does not.
	ClientNode string `json:"clientNode,omitempty"`
	ServerNode string `json:"serverNode,omitempty"`
	// Throughput or Latency is the run with the median headline figure (bits per second,
	// p50), so its figures belong together; nil when the measurement failed.
	Throughput *load.ThroughputResult `json:"throughput,omitempty"`
	Latency    *load.LatencyResult    `json:"latency,omitempty"`
	// Runs are the headline figures of every run, in the order measured: bits per second
	// for throughput, p50 in nanoseconds for latency.
	Runs []float64 `json:"runs,omitempty"`
	// Error says why the measurement failed.
	Error string `json:"error,omitempty"`
	// NotApplicable says why the path does not exist between these clusters (their addressing
	// mode has no such path); such a measurement is neither made nor failed.
	NotApplicable string `json:"notApplicable,omitempty"`
}

// headline is a result's figure the runs are compared by.
func headline(tp *load.ThroughputResult, lat *load.LatencyResult) float64 {
	switch {
	case tp != nil:
		return tp.BitsPerSecond
	case lat != nil:
		return float64(lat.P50)
	}
	return 0
}

// medianIndex returns the index of the median of values (the lower middle of an even count,
// so it is always one of the runs), or -1 when there are none.
func medianIndex(values []float64) int {
	if len(values) == 0 {
		return -1
	}
	idx := make([]int, len(values))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case values[a] < values[b]:
			return -1
		case values[a] > values[b]:
			return 1
		}
		return 0
	})
	return idx[(len(idx)-1)/2]
}

// Row compares one path in one direction with the same path inside the client's cluster.
type Row struct {
	Path Path `json:"path"`
	// Family is the address family of the row, as Measurement.Family; the baseline is
	// measured in the same family (a dual-stack client's family-less baseline in IPv4).
	Family string `json:"family,omitempty"`
	From   string `json:"from"`
	To     string `json:"to"`
	// CrossCluster is From's client to To's server; InCluster is From's client to From's own
	// server, the baseline.
	CrossCluster Measurement `json:"crossCluster"`
	InCluster    Measurement `json:"inCluster"`
	// Ratio is cross-cluster over in-cluster: of throughput (below 1: the tunnel is slower)
	// or of p50 latency (above 1: it takes longer). Zero when either side failed.
	Ratio float64 `json:"ratio"`
}

// label is a path with its family, if any: "pod-to-pod/IPv6", as verify names its checks.
func label(path Path, family string) string {
	if family == "" {
		return string(path)
	}
	return string(path) + "/" + family
}

// ratio computes Row.Ratio.
func ratio(cross, in Measurement) float64 {
	return stats.Ratio(headline(cross.Throughput, cross.Latency), headline(in.Throughput, in.Latency))
}

// Report is what a bench run measured.
type Report struct {
	Kind      Kind     `json:"kind"`
	Namespace string   `json:"namespace"`
	Clusters  []string `json:"clusters"`
	// Duration is how long each run measured; Repeat how many runs each measurement took.
	Duration metav1.Duration `json:"duration"`
	Repeat   int             `json:"repeat"`
	// Streams (throughput) and Size (latency) are the load's parameters.
	Streams int   `json:"streams,omitempty"`
	Size    int   `json:"size,omitempty"`
	Rows    []Row `json:"rows"`
	// Families compare IPv6 with IPv4 for each path and direction measured in both, in report
	// order.
	Families []FamilyRatio `json:"families,omitempty"`
	// Notes say what was not measured and why (workload.FamilyNote: IPv6 between a
	// dual-stack cluster and an IPv4-only one).
	Notes []string `json:"notes,omitempty"`
}

// FamilyRatio compares the two families of one path in one direction, measured in turns in
// the same run: through the same tunnel, gateways and nodes, under the same load.
type FamilyRatio struct {
	Path Path   `json:"path"`
	From string `json:"from"`
	To   string `json:"to"`
	// CrossCluster is IPv6 over IPv4 of the cross-cluster figures (the medians): of
	// throughput (below 1: IPv6 is slower) or of p50 latency (above 1: it takes longer).
	// InCluster is the same of the baselines, which tells how much of a difference is the
	// cluster's own network rather than the tunnel's. Zero when either side failed.
	CrossCluster float64 `json:"crossCluster"`
	InCluster    float64 `json:"inCluster"`
	// CrossClusterPerRound is the median of the rounds' own IPv6/IPv4 cross-cluster ratios
	// (the two runs of a round are seconds apart, so each ratio is taken at one load); zero
	// when either side failed.
	CrossClusterPerRound float64 `json:"crossClusterPerRound"`
}

// perRound is the median of the ratios num.Runs[i] / den.Runs[i], or 0 when a side failed or
// their rounds do not match.
func perRound(num, den Measurement) float64 {
	if num.Error != "" || den.Error != "" || len(num.Runs) == 0 || len(num.Runs) != len(den.Runs) {
		return 0
	}
	ratios := make([]float64, len(num.Runs))
	for i := range num.Runs {
		ratios[i] = stats.Ratio(num.Runs[i], den.Runs[i])
	}
	return stats.Median(ratios)
}

// familyRatios pairs each IPv6 row with the IPv4 row of the same path and direction.
func familyRatios(rows []Row) []FamilyRatio {
	var out []FamilyRatio
	for _, v6 := range rows {
		if v6.Family != workload.FamilyIPv6 {
			continue
		}
		i := slices.IndexFunc(rows, func(v4 Row) bool {
			return v4.Family == workload.FamilyIPv4 && v4.Path == v6.Path && v4.From == v6.From && v4.To == v6.To
		})
		if i < 0 {
			continue
		}
		out = append(out, FamilyRatio{Path: v6.Path, From: v6.From, To: v6.To,
			CrossCluster: ratio(v6.CrossCluster, rows[i].CrossCluster), InCluster: ratio(v6.InCluster, rows[i].InCluster),
			CrossClusterPerRound: perRound(v6.CrossCluster, rows[i].CrossCluster)})
	}
	return out
}

// Failed names the measurements that failed, in report order.
func (r *Report) Failed() []string {
	var failed []string
	for _, row := range r.Rows {
		for _, m := range []Measurement{row.CrossCluster, row.InCluster} {
			if m.Error != "" {
				failed = append(failed, fmt.Sprintf("%s %s->%s", label(row.Path, m.Family), m.From, m.To))
			}
		}
	}
	return slices.Compact(failed)
}

// NotApplicable names the measurements of paths the clusters do not have, in report order.
func (r *Report) NotApplicable() []string {
	var out []string
	for _, row := range r.Rows {
		for _, m := range []Measurement{row.CrossCluster, row.InCluster} {
			if m.NotApplicable != "" {
				out = append(out, fmt.Sprintf("%s %s->%s", label(row.Path, m.Family), m.From, m.To))
			}
		}
	}
	return slices.Compact(out)
}

// Render writes the report as a table, cross-cluster and in-cluster side by side.
func Render(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if r.Kind == KindThroughput {
		fmt.Fprintln(tw, "PATH\tFROM\tTO\tCROSS-CLUSTER\tIN-CLUSTER\tCROSS/IN")
	} else {
		fmt.Fprintln(tw, "PATH\tFROM\tTO\tCROSS-CLUSTER P50 / P99 / RATE\tIN-CLUSTER P50 / P99 / RATE\tP50 CROSS/IN")
	}
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", label(row.Path, row.Family), row.From, row.To,
			cell(row.CrossCluster), cell(row.InCluster), formatRatio(row.Ratio))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := renderFamilies(w, r); err != nil {
		return err
	}
	what := fmt.Sprintf("%d TCP streams for %s", r.Streams, r.Duration.Duration)
	if r.Kind == KindLatency {
		what = fmt.Sprintf("%d-byte requests, one at a time over one TCP connection, for %s", r.Size, r.Duration.Duration)
	}
	if r.Repeat > 1 {
		what += fmt.Sprintf(", median of %d runs", r.Repeat)
	}
	_, err := fmt.Fprintf(w, "\n%s: %s. In-cluster is the same client to a server in its own cluster.\n", r.Kind, what)
	if na := r.NotApplicable(); len(na) > 0 && err == nil {
		_, err = fmt.Fprintf(w, "Not applicable (the addressing mode has no such path): %s.\n", strings.Join(na, ", "))
	}
	for _, n := range r.Notes {
		if err == nil {
			_, err = fmt.Fprintf(w, "Note: %s.\n", n)
		}
	}
	if failed := r.Failed(); len(failed) > 0 && err == nil {
		_, err = fmt.Fprintf(w, "Failed: %s.\n", strings.Join(failed, ", "))
	}
	return err
}

// renderFamilies writes the IPv6/IPv4 comparison of the paths measured in both families, a
// table of its own below the measurements; nothing when there is none.
func renderFamilies(w io.Writer, r *Report) error {
	if len(r.Families) == 0 {
		return nil
	}
	figure := "throughput"
	if r.Kind == KindLatency {
		figure = "p50 latency"
	}
	if _, err := fmt.Fprintf(w, "\nIPv6/IPv4 of %s, the two families measured in turns (per round: the median of each round's ratio):\n", figure); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tFROM\tTO\tCROSS-CLUSTER IPV6/IPV4\tPER ROUND\tIN-CLUSTER IPV6/IPV4")
	for _, f := range r.Families {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Path, f.From, f.To, formatRatio(f.CrossCluster), formatRatio(f.CrossClusterPerRound), formatRatio(f.InCluster))
	}
	return tw.Flush()
}

func cell(m Measurement) string {
	switch {
	case m.NotApplicable != "":
		return "not applicable"
	case m.Error != "":
		return "error: " + oneLine(m.Error)
	case m.Throughput != nil:
		return FormatBits(m.Throughput.BitsPerSecond)
	case m.Latency != nil:
		return fmt.Sprintf("%s / %s / %.0f/s", FormatLatency(m.Latency.P50), FormatLatency(m.Latency.P99), m.Latency.RequestsPerSecond)
	}
	return "-"
}

func formatRatio(r float64) string {
	if r <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", r)
}

// FormatBits writes a rate in bits per second with a decimal prefix, as network rates are.
func FormatBits(bps float64) string {
	units := []string{"bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"}
	i := 0
	for bps >= 1000 && i < len(units)-1 {
		bps /= 1000
		i++
	}
	return fmt.Sprintf("%.3g %s", bps, units[i])
}

// FormatLatency rounds d to three significant digits or so: microseconds below a
// millisecond, ten microseconds below ten milliseconds.
func FormatLatency(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < 10*time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(100 * time.Microsecond).String()
	}
}

// oneLine keeps a table cell on one line: command errors can span several.
func oneLine(s string) string { return workload.OneLine(s, 120) }
