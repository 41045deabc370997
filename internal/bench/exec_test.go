package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	utilexec "k8s.io/client-go/util/exec"

	"github.com/octopus-mcs/octopus/internal/progress"
	"github.com/octopus-mcs/octopus/internal/workload"
)

// TestRetryUnstarted: an exec that did not start is tried again, up to the bound; one whose
// command ran and failed, or that succeeded, is not.
func TestRetryUnstarted(t *testing.T) {
	unstarted := fmt.Errorf("octopus-echo: %w", errors.New("Internal error occurred: failed to exec in container: failed to load task: context deadline exceeded"))
	exited := fmt.Errorf("octopus-echo: %w: dial timeout", utilexec.CodeExitError{Err: errors.New("command terminated with exit code 1"), Code: 1})
	for _, tc := range []struct {
		name      string
		results   []error
		wantRuns  int
		wantError bool
	}{
		{"succeeds", []error{nil}, 1, false},
		{"starts on the second try", []error{unstarted, nil}, 2, false},
		{"never starts", []error{unstarted, unstarted, unstarted, nil}, 3, true},
		{"ran and failed", []error{exited, nil}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs, retries := 0, 0
			out, err := retryUnstarted(context.Background(), 3, 0, func() (string, error) {
				runs++
				return "out", tc.results[runs-1]
			}, func(error) { retries++ })
			if runs != tc.wantRuns || retries != runs-1 || (err != nil) != tc.wantError || out != "out" {
				t.Errorf("%d runs, %d retries, %q, %v; want %d runs, an error %v", runs, retries, out, err, tc.wantRuns, tc.wantError)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	runs := 0
	if _, err := retryUnstarted(ctx, 3, 0, func() (string, error) { runs++; return "", unstarted }, func(error) {}); err == nil || runs != 1 {
		t.Errorf("a cancelled context: %d runs, %v; want one run and its error", runs, err)
	}
}

// TestMeasureAllTakesTurns: a dual-stack pair's measurements of one path and direction run in
// rounds, each of them once per round (IPv4 baseline, IPv4 across, IPv6 baseline, IPv6
// across), so that round i of IPv4 and of IPv6 meet the same load; every measurement keeps
// all its runs in order and its median one; IPv6 ones go to IPv6 addresses.
func TestMeasureAllTakesTurns(t *testing.T) {
	ip := netip.MustParseAddr
	mk := func(id, v4, v6 string) *member {
		return &member{Member: &workload.Member{ID: id}, clientIP6: ip("2001:db8:9::1"),
			server: server{podIP: ip(v4), podIP6: ip(v6)}, clusterSetIPs: map[string]workload.ImportIPs{}}
	}
	east, west := mk("east", "10.1.0.5", "2001:db8:1::5"), mk("west", "10.2.0.5", "2001:db8:2::5")
	var order []string
	bps := map[string]float64{}
	r := &runner{opts: Options{Kind: KindThroughput, Repeat: 3, Streams: 1, Duration: time.Second, ReachTimeout: time.Second}, p: &progress.Reporter{},
		members: []*member{east, west}}
	r.execIn = func(_ context.Context, from *member, argv []string) (string, error) {
		target := argv[slices.Index(argv, "--target")+1]
		if argv[2] == string(KindLatency) { // reach's probe
			return `{"requests":1,"p50":1,"p99":1,"max":1,"requestsPerSecond":1}`, nil
		}
		order = append(order, from.ID+">"+target)
		bps[target] += 1e9
		return fmt.Sprintf(`{"streams":1,"bytes":1,"seconds":1,"bitsPerSecond":%g}`, bps[target]), nil
	}
	rows, _ := r.measureAll(t.Context())
	round := []string{"east>10.1.0.5:9001", "east>10.2.0.5:9001", "east>[2001:db8:1::5]:9001", "east>[2001:db8:2::5]:9001"}
	if got := order[:12]; !slices.Equal(got, slices.Concat(round, round, round)) {
		t.Errorf("runs of pod-to-pod east->west in the order %q, want three rounds of %q", got, round)
	}
	if len(rows) < 2 || rows[0].Family != workload.FamilyIPv4 || rows[1].Family != workload.FamilyIPv6 {
		t.Fatalf("rows %+v: want IPv4 and then IPv6 of pod-to-pod east->west first", rows)
	}
	for _, m := range []Measurement{rows[1].CrossCluster, rows[1].InCluster} {
		if !slices.Equal(m.Runs, []float64{1e9, 2e9, 3e9}) || m.Throughput == nil || m.Throughput.BitsPerSecond != 2e9 || m.Family != workload.FamilyIPv6 {
			t.Errorf("%s->%s: runs %v, median %+v, family %q; want runs 1, 2, 3 Gbit/s, the median 2, IPv6", m.From, m.To, m.Runs, m.Throughput, m.Family)
		}
	}
}
