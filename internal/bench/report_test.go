package bench

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/internal/bench/load"
)

func TestMedianIndex(t *testing.T) {
	tests := []struct {
		values []float64
		want   int
	}{
		{nil, -1},
		{[]float64{5}, 0},
		{[]float64{3, 1, 2}, 2},
		// An even count takes the lower middle, so the result is a run that happened.
		{[]float64{4, 1, 3, 2}, 3},
		{[]float64{7, 7, 7}, 1},
	}
	for _, tt := range tests {
		if got := medianIndex(tt.values); got != tt.want {
			t.Errorf("medianIndex(%v) = %d, want %d", tt.values, got, tt.want)
		}
	}
}

func tput(bps float64) Measurement {
	return Measurement{Throughput: &load.ThroughputResult{BitsPerSecond: bps, Seconds: 1}}
}

func lat(p50, p99 time.Duration, rate float64) Measurement {
	return Measurement{Latency: &load.LatencyResult{P50: p50, P99: p99, RequestsPerSecond: rate, Requests: 1}}
}

func TestRatio(t *testing.T) {
	tests := []struct {
		name      string
		cross, in Measurement
		want      float64
	}{
		{"throughput: a quarter of in-cluster", tput(1e9), tput(4e9), 0.25},
		{"latency: p50 twice in-cluster's", lat(200*time.Microsecond, time.Millisecond, 1), lat(100*time.Microsecond, 5*time.Millisecond, 1), 2},
		{"cross-cluster failed", Measurement{Error: "x"}, tput(4e9), 0},
		{"baseline failed", tput(1e9), Measurement{Error: "x"}, 0},
		{"zero baseline", tput(1e9), tput(0), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ratio(tt.cross, tt.in); got != tt.want {
				t.Fatalf("ratio = %g, want %g", got, tt.want)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	bits := []struct {
		bps  float64
		want string
	}{{0, "0 bit/s"}, {999, "999 bit/s"}, {1500, "1.5 kbit/s"}, {1.75e9, "1.75 Gbit/s"}, {13.7e9, "13.7 Gbit/s"}, {2e15, "2e+03 Tbit/s"}}
	for _, tt := range bits {
		if got := FormatBits(tt.bps); got != tt.want {
			t.Errorf("FormatBits(%g) = %q, want %q", tt.bps, got, tt.want)
		}
	}
	lats := []struct {
		d    time.Duration
		want string
	}{{0, "0"}, {19188 * time.Nanosecond, "19µs"}, {1234567 * time.Nanosecond, "1.23ms"}, {12345678 * time.Nanosecond, "12.3ms"}}
	for _, tt := range lats {
		if got := FormatLatency(tt.d); got != tt.want {
			t.Errorf("FormatLatency(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// withRuns gives m the headline figures of its runs.
func withRuns(m Measurement, runs ...float64) Measurement {
	m.Runs = runs
	return m
}

// famRow is a row of family measured from → to, its baseline in the same family.
func famRow(path Path, family, from, to string, cross, in Measurement) Row {
	cross.From, cross.To, in.From, in.To = from, to, from, from
	cross.Family, in.Family = family, family
	return Row{Path: path, Family: family, From: from, To: to, CrossCluster: cross, InCluster: in, Ratio: ratio(cross, in)}
}

func TestRender(t *testing.T) {
	row := func(path Path, from, to string, cross, in Measurement) Row {
		return famRow(path, "", from, to, cross, in)
	}
	dual := []Row{
		// Round by round IPv6/IPv4 is 0.92, 0.95 and 0.95: its median is not the medians' ratio.
		famRow(PathPod, "IPv4", "east", "west", withRuns(tput(1.5e9), 1.5e9, 2e9, 1e9), tput(12e9)),
		famRow(PathPod, "IPv6", "east", "west", withRuns(tput(1.38e9), 1.38e9, 1.9e9, 0.95e9), tput(11e9)),
		famRow(PathService, "IPv4", "east", "west", tput(1.6e9), tput(10e9)),
		famRow(PathService, "IPv6", "east", "west", Measurement{Error: "[2001:db8:97::3]:9001 does not answer"}, tput(10e9)),
	}
	tests := []struct {
		name   string
		report Report
		want   string
	}{
		{
			"throughput",
			Report{Kind: KindThroughput, Streams: 4, Duration: metav1.Duration{Duration: 10 * time.Second}, Repeat: 3, Rows: []Row{
				row(PathPod, "east", "west", tput(1.5e9), tput(12e9)),
				row(PathService, "west", "east", Measurement{Error: "10.97.0.3:9001 does not answer\nfrom west"}, tput(11e9)),
			}},
			`PATH            FROM  TO    CROSS-CLUSTER                                    IN-CLUSTER  CROSS/IN
pod-to-pod      east  west  1.5 Gbit/s                                       12 Gbit/s   0.12
pod-to-service  west  east  error: 10.97.0.3:9001 does not answer from west  11 Gbit/s   -

throughput: 4 TCP streams for 10s, median of 3 runs. In-cluster is the same client to a server in its own cluster.
Failed: pod-to-service west->east.
`,
		},
		{
			"a path the addressing mode does not have: not applicable, not failed",
			Report{Kind: KindThroughput, Streams: 4, Duration: metav1.Duration{Duration: 10 * time.Second}, Repeat: 1, Rows: []Row{
				row(PathPod, "east", "west", tput(1.5e9), tput(12e9)),
				row(PathService, "east", "west", Measurement{NotApplicable: "not applicable: a cluster with secondary addressing has no ClusterSet IP"}, tput(11e9)),
			}},
			`PATH            FROM  TO    CROSS-CLUSTER   IN-CLUSTER  CROSS/IN
pod-to-pod      east  west  1.5 Gbit/s      12 Gbit/s   0.12
pod-to-service  east  west  not applicable  11 Gbit/s   -

throughput: 4 TCP streams for 10s. In-cluster is the same client to a server in its own cluster.
Not applicable (the addressing mode has no such path): pod-to-service east->west.
`,
		},
		{
			"a dual-stack pair: each family, and IPv6 against IPv4",
			Report{Kind: KindThroughput, Streams: 4, Duration: metav1.Duration{Duration: 10 * time.Second}, Repeat: 5, Rows: dual, Families: familyRatios(dual)},
			`PATH                 FROM  TO    CROSS-CLUSTER                                 IN-CLUSTER  CROSS/IN
pod-to-pod/IPv4      east  west  1.5 Gbit/s                                    12 Gbit/s   0.12
pod-to-pod/IPv6      east  west  1.38 Gbit/s                                   11 Gbit/s   0.13
pod-to-service/IPv4  east  west  1.6 Gbit/s                                    10 Gbit/s   0.16
pod-to-service/IPv6  east  west  error: [2001:db8:97::3]:9001 does not answer  10 Gbit/s   -

IPv6/IPv4 of throughput, the two families measured in turns (per round: the median of each round's ratio):
PATH            FROM  TO    CROSS-CLUSTER IPV6/IPV4  PER ROUND  IN-CLUSTER IPV6/IPV4
pod-to-pod      east  west  0.92                     0.95       0.92
pod-to-service  east  west  -                        -          1.00

throughput: 4 TCP streams for 10s, median of 5 runs. In-cluster is the same client to a server in its own cluster.
Failed: pod-to-service/IPv6 east->west.
`,
		},
		{
			"a mixed pair: measured once, with why IPv6 was not",
			Report{Kind: KindLatency, Size: 64, Duration: metav1.Duration{Duration: 5 * time.Second}, Repeat: 1, Rows: []Row{
				row(PathPod, "east", "west", lat(410*time.Microsecond, 1200*time.Microsecond, 2300), lat(80*time.Microsecond, 300*time.Microsecond, 11000)),
			}, Notes: []string{"IPv6 not measured from east to west: west's bench server has no IPv6 address (an IPv4-only cluster, or addressing other than direct)"}},
			`PATH        FROM  TO    CROSS-CLUSTER P50 / P99 / RATE  IN-CLUSTER P50 / P99 / RATE  P50 CROSS/IN
pod-to-pod  east  west  410µs / 1.2ms / 2300/s          80µs / 300µs / 11000/s       5.12

latency: 64-byte requests, one at a time over one TCP connection, for 5s. In-cluster is the same client to a server in its own cluster.
Note: IPv6 not measured from east to west: west's bench server has no IPv6 address (an IPv4-only cluster, or addressing other than direct).
`,
		},
		{
			"latency",
			Report{Kind: KindLatency, Size: 64, Duration: metav1.Duration{Duration: 5 * time.Second}, Repeat: 1, Rows: []Row{
				row(PathPod, "east", "west", lat(410*time.Microsecond, 1200*time.Microsecond, 2300), lat(80*time.Microsecond, 300*time.Microsecond, 11000)),
			}},
			`PATH        FROM  TO    CROSS-CLUSTER P50 / P99 / RATE  IN-CLUSTER P50 / P99 / RATE  P50 CROSS/IN
pod-to-pod  east  west  410µs / 1.2ms / 2300/s          80µs / 300µs / 11000/s       5.12

latency: 64-byte requests, one at a time over one TCP connection, for 5s. In-cluster is the same client to a server in its own cluster.
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Render(&buf, &tt.report); err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != tt.want {
				t.Fatalf("got:\n%s\nwant:\n%s", got, tt.want)
			}
			// Only real failures fail the run (the CLI exits non-zero on Failed).
			for _, r := range tt.report.Rows {
				for _, m := range []Measurement{r.CrossCluster, r.InCluster} {
					if m.NotApplicable != "" && slices.Contains(tt.report.Failed(), fmt.Sprintf("%s %s->%s", r.Path, m.From, m.To)) {
						t.Errorf("%s %s->%s is not applicable but counted as failed", r.Path, m.From, m.To)
					}
				}
			}
		})
	}
}

// TestFamilyRatios checks that each IPv6 row is compared with the IPv4 row of the same path
// and direction, and nothing else is.
func TestFamilyRatios(t *testing.T) {
	tests := []struct {
		name string
		rows []Row
		want []FamilyRatio
	}{
		{"no families", []Row{famRow(PathPod, "", "east", "west", tput(1e9), tput(4e9))}, nil},
		{
			"both directions of a dual-stack pair",
			[]Row{
				famRow(PathPod, "IPv4", "east", "west", tput(2e9), tput(10e9)),
				famRow(PathPod, "IPv6", "east", "west", tput(1.8e9), tput(9e9)),
				famRow(PathPod, "IPv4", "west", "east", tput(1e9), tput(8e9)),
				famRow(PathPod, "IPv6", "west", "east", tput(1.2e9), tput(8e9)),
			},
			[]FamilyRatio{{Path: PathPod, From: "east", To: "west", CrossCluster: 0.9, InCluster: 0.9}, {Path: PathPod, From: "west", To: "east", CrossCluster: 1.2, InCluster: 1}},
		},
		{
			"per round: the median of the rounds' own ratios, beside the medians' ratio",
			[]Row{
				famRow(PathPod, "IPv4", "east", "west", withRuns(tput(2e9), 2e9, 1e9, 3e9), tput(10e9)),
				famRow(PathPod, "IPv6", "east", "west", withRuns(tput(1e9), 1e9, 1e9, 2.7e9), tput(10e9)),
			},
			[]FamilyRatio{{Path: PathPod, From: "east", To: "west", CrossCluster: 0.5, InCluster: 1, CrossClusterPerRound: 0.9}},
		},
		{
			"per round needs as many rounds on each side",
			[]Row{
				famRow(PathPod, "IPv4", "east", "west", withRuns(tput(2e9), 2e9, 1e9), tput(10e9)),
				famRow(PathPod, "IPv6", "east", "west", withRuns(tput(1e9), 1e9), tput(10e9)),
			},
			[]FamilyRatio{{Path: PathPod, From: "east", To: "west", CrossCluster: 0.5, InCluster: 1}},
		},
		{
			"latency: p50 over p50",
			[]Row{
				famRow(PathService, "IPv4", "east", "west", lat(200*time.Microsecond, time.Millisecond, 1), lat(50*time.Microsecond, time.Millisecond, 1)),
				famRow(PathService, "IPv6", "east", "west", lat(300*time.Microsecond, time.Millisecond, 1), lat(50*time.Microsecond, time.Millisecond, 1)),
			},
			[]FamilyRatio{{Path: PathService, From: "east", To: "west", CrossCluster: 1.5, InCluster: 1}},
		},
		{
			"an IPv6 row without its IPv4 one, or of another path or direction: no ratio",
			[]Row{
				famRow(PathPod, "IPv4", "east", "west", tput(2e9), tput(10e9)),
				famRow(PathService, "IPv6", "east", "west", tput(1.8e9), tput(9e9)),
				famRow(PathPod, "IPv6", "west", "east", tput(1.8e9), tput(9e9)),
			},
			nil,
		},
		{
			"a failed side: zero",
			[]Row{
				famRow(PathPod, "IPv4", "east", "west", tput(2e9), tput(10e9)),
				famRow(PathPod, "IPv6", "east", "west", Measurement{Error: "x"}, tput(9e9)),
			},
			[]FamilyRatio{{Path: PathPod, From: "east", To: "west", CrossCluster: 0, InCluster: 0.9}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := familyRatios(tt.rows)
			if len(got) != len(tt.want) {
				t.Fatalf("familyRatios = %+v, want %+v", got, tt.want)
			}
			for i := range got {
				g, w := got[i], tt.want[i]
				if g.Path != w.Path || g.From != w.From || g.To != w.To || math.Abs(g.CrossCluster-w.CrossCluster) > 1e-9 ||
					math.Abs(g.InCluster-w.InCluster) > 1e-9 || math.Abs(g.CrossClusterPerRound-w.CrossClusterPerRound) > 1e-9 {
					t.Errorf("familyRatios[%d] = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestParseResult(t *testing.T) {
	tests := []struct {
		name    string
		kind    Kind
		out     string
		wantErr bool
	}{
		{"throughput", KindThroughput, `{"target":"10.1.0.5:9001","streams":4,"bytes":100,"seconds":1.0,"bitsPerSecond":800}` + "\n", false},
		{"latency", KindLatency, `{"target":"10.1.0.5:9000","requests":3,"p50":100,"p99":200,"max":300,"requestsPerSecond":3}`, false},
		{"not JSON", KindThroughput, "octopus-echo: unknown flag", true},
		{"latency without requests", KindLatency, `{"requests":0}`, true},
		{"throughput without time", KindThroughput, `{"bytes":5}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, l, err := parseResult(tt.kind, tt.out)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseResult: %v, want error %v", err, tt.wantErr)
			}
			if err == nil && (tt.kind == KindThroughput) != (tp != nil && l == nil) {
				t.Fatalf("parseResult(%s) = %v, %v", tt.kind, tp, l)
			}
			if err != nil && !strings.Contains(err.Error(), "unexpected output") {
				t.Fatalf("the error %q does not show the output", err)
			}
		})
	}
}
