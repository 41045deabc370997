package lab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/bench"
	"github.com/octopus-mcs/octopus/internal/image"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/procfs"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// BenchmarkSecondaryThroughput measures pod → pod TCP throughput across clusters over the
// secondary network (net1, OVN's userspace datapath on both sides, the gateways' WireGuard
// tunnel) side by side with the primary network under direct addressing (the CNI's bridge,
// the route agents' routes, the same tunnel), in one lab: cluster1 and cluster2 join with
// secondary addressing and identical CIDRs, cluster3 and cluster4 with direct addressing.
// Each round runs `octopus bench throughput` between each pair, one after the other, both
// directions; the result is the median over rounds of secondary ÷ direct.
//
//	go test -run '^$' -bench SecondaryThroughput -benchtime 1x -timeout 0 ./internal/lab/ -args -rounds 5
func BenchmarkSecondaryThroughput(b *testing.B) {
	if *fabricJoinRounds < 1 {
		b.Fatal("-rounds: want at least 1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	binDir := testenv.BinDir(b)
	bins := buildCommands(b, slices.Concat([]string{"octopus-agent", "octopus-echo", "octopus-dns", "octopus"}, image.OVNBinaries)...)
	testenv.LabNetwork(b)
	up := time.Now()
	l, _ := startLab(ctx, b, lab.Options{
		Clusters: 4, BinDir: binDir, AgentBinary: bins["octopus-agent"],
		OverlappingCIDRs: true, SecondaryNetwork: true, DirectClusters: []string{lab.ClusterName(3), lab.ClusterName(4)},
	})
	fmt.Fprintf(os.Stderr, "lab up in %.1fs, load average %s\n", time.Since(up).Seconds(), procfs.LoadAverage())
	pairs := map[string][2]string{
		"secondary": {lab.ClusterName(1), lab.ClusterName(2)},
		"direct":    {lab.ClusterName(3), lab.ClusterName(4)},
	}
	var ratios []float64
	b.ResetTimer()
	for round := 1; round <= *fabricJoinRounds; round++ {
		bps := map[string]float64{}
		for _, mode := range []string{"secondary", "direct"} {
			got, err := crossClusterThroughput(ctx, l, bins["octopus"], pairs[mode])
			if err != nil {
				b.Fatalf("round %d, %s: %v", round, mode, err)
			}
			bps[mode] = got
		}
		r := bps["secondary"] / bps["direct"]
		ratios = append(ratios, r)
		fmt.Fprintf(os.Stderr, "round %d: secondary %.0f Mbit/s, direct %.0f Mbit/s, secondary ÷ direct %.2f (load average %s)\n",
			round, bps["secondary"]/1e6, bps["direct"]/1e6, r, procfs.LoadAverage())
	}
	b.StopTimer()
	slices.Sort(ratios)
	median := ratios[(len(ratios)-1)/2]
	fmt.Fprintf(os.Stderr, "secondary ÷ direct pod → pod throughput across clusters, median of %d rounds: %.2f (rounds sorted %.2f)\n", len(ratios), median, ratios)
	b.ReportMetric(median, "secondary/direct")
}

// crossClusterThroughput runs `octopus bench throughput` between the pair's clusters and
// returns the mean of the two directions' pod → pod cross-cluster figures, in bits per second.
// The service path is not compared: a secondary cluster has no ClusterSet IP (§6s), and its
// failure there does not fail the pod path's figures.
func crossClusterThroughput(ctx context.Context, l *lab.Lab, octopus string, pair [2]string) (float64, error) {
	cmd := exec.CommandContext(ctx, octopus, "bench", string(bench.KindThroughput),
		"--kubeconfig", l.Env.Cluster(pair[0]).Kubeconfig, "--kubeconfig", l.Env.Cluster(pair[1]).Kubeconfig,
		"--duration", "5s", "--repeat", "3", "--ready-timeout", "3m", "-o", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	report := &bench.Report{}
	if err := json.Unmarshal(stdout.Bytes(), report); err != nil {
		return 0, fmt.Errorf("octopus bench between %s and %s: %w: %s", pair[0], pair[1], errors.Join(err, runErr), stderr.String())
	}
	var sum float64
	n := 0
	for _, row := range report.Rows {
		if row.Path != bench.PathPod {
			continue
		}
		if row.CrossCluster.Throughput == nil {
			return 0, fmt.Errorf("pod → pod %s → %s failed: %s", row.From, row.To, row.CrossCluster.Error)
		}
		sum += row.CrossCluster.Throughput.BitsPerSecond
		n++
	}
	if n != 2 {
		return 0, fmt.Errorf("%d pod → pod rows between %s and %s, want 2", n, pair[0], pair[1])
	}
	return sum / 2, nil
}
