package lab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/internal/bench"
	"github.com/octopus-mcs/octopus/internal/bench/load"
	"github.com/octopus-mcs/octopus/internal/bench/stats"
	"github.com/octopus-mcs/octopus/internal/image"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/procfs"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// BenchmarkSecondaryThroughput measures pod → pod TCP throughput across clusters over the
// secondary network (net1, OVN's userspace datapath on both sides, the gateways' WireGuard
// tunnel) against the primary network under direct addressing (the CNI's bridge, the route
// agents' routes, the same tunnel), in one run: first a lab of two clusters that join with
// secondary addressing and identical CIDRs, then, once it is down, a lab of two clusters with
// direct addressing. Each phase runs `octopus bench throughput` -rounds times, both
// directions; the result is the ratio of the phases' medians.
//
// One lab after the other rather than one lab of four clusters, which would run the pairs'
// rounds alternately: on these two-core machines a four-cluster lab with OVN (nine nodes) sat
// at load average 110–125 once up, and its bench pods did not start within three minutes.
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
	pair := [2]string{lab.ClusterName(1), lab.ClusterName(2)}
	medians := map[string]float64{}
	for _, phase := range []struct {
		mode string
		opts lab.Options
	}{
		{mode: "secondary", opts: lab.Options{Clusters: 2, OverlappingCIDRs: true, SecondaryNetwork: true}},
		{mode: "direct", opts: lab.Options{Clusters: 2}},
	} {
		b.Run(phase.mode, func(b *testing.B) {
			phase.opts.BinDir, phase.opts.AgentBinary = binDir, bins["octopus-agent"]
			up := time.Now()
			l, _ := startLab(ctx, b, phase.opts)
			fmt.Fprintf(os.Stderr, "%s: lab up in %.1fs, load average %s\n", phase.mode, time.Since(up).Seconds(), procfs.LoadAverage())
			var got []float64
			for round := 1; round <= *fabricJoinRounds; round++ {
				bps, err := crossClusterThroughput(ctx, l, bins["octopus"], pair)
				if err != nil {
					b.Fatalf("%s, round %d: %v", phase.mode, round, err)
				}
				got = append(got, bps)
				fmt.Fprintf(os.Stderr, "%s, round %d: %.0f Mbit/s (load average %s)\n", phase.mode, round, bps/1e6, procfs.LoadAverage())
			}
			medians[phase.mode] = sortedMedian(got)
			fmt.Fprintf(os.Stderr, "%s: median of %d rounds %.0f Mbit/s (rounds sorted, Mbit/s: %.0f)\n", phase.mode, len(got), medians[phase.mode]/1e6, scaled(got, 1e-6))
			if phase.mode == "secondary" {
				net1, primary := inClusterThroughput(ctx, b, l, bins["octopus-echo"])
				fmt.Fprintf(os.Stderr, "secondary: in %s, node to node, median of %d rounds: net1 %.0f Mbit/s, primary %.0f Mbit/s, net1 ÷ primary %.2f; across clusters ÷ in-cluster net1 %.2f\n",
					pair[0], *fabricJoinRounds, net1/1e6, primary/1e6, net1/primary, medians[phase.mode]/net1)
				b.ReportMetric(net1/primary, "in-cluster-net1/primary")
			}
		})
	}
	if len(medians) != 2 {
		b.Fatal("a phase did not measure")
	}
	r := medians["secondary"] / medians["direct"]
	fmt.Fprintf(os.Stderr, "secondary ÷ direct pod → pod throughput across clusters, medians of %d rounds: %.2f\n", *fabricJoinRounds, r)
	b.ReportMetric(r, "secondary/direct")
}

// inClusterThroughput measures, in the lab's first cluster, pod → pod throughput from the echo
// pod on the last node to the one on the first node, -rounds times over net1 and over the
// primary network alternately, and returns the two medians in bits per second. It separates
// the userspace OVS datapath's share of the secondary network's cost (net1 node to node: the
// pods' veths, ovs-vswitchd on both nodes and Geneve between them) from the gateways' (the
// cross-cluster path adds the gateway ports and the WireGuard tunnel). The load generator is
// the host's octopus-echo run in the client pod's network namespace.
func inClusterThroughput(ctx context.Context, b *testing.B, l *lab.Lab, echo string) (net1, primary float64) {
	b.Helper()
	c := l.Network.Clusters[0]
	pods := startEchoPods(ctx, b, l)[c.Name]
	src, dst := pods[len(pods)-1], pods[0]
	obj, err := clientset(b, l.Env.Cluster(c.Name).Kubeconfig).CoreV1().Pods("default").Get(ctx, dst.name, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	st, ok, err := podnet.Find(obj.Annotations)
	if err != nil || !ok || len(st.IPs) != 1 {
		b.Fatalf("pod %s has no secondary address: %v %v", dst.name, ok, err)
	}
	targets := map[string]string{"net1": st.IPs[0], "primary": dst.ip.String()}
	got := map[string][]float64{}
	for round := 1; round <= *fabricJoinRounds; round++ {
		for _, network := range []string{"net1", "primary"} {
			out, err := exec.CommandContext(ctx, "ip", "netns", "exec", src.netns, echo, "bench", "throughput",
				"--target", net.JoinHostPort(targets[network], "9001"), "--streams", "4", "--duration", "5s").Output()
			result := &load.ThroughputResult{}
			if err == nil {
				err = json.Unmarshal(out, result)
			}
			if err != nil {
				b.Fatalf("%s -> %s over %s: %v: %s", src.name, dst.name, network, err, out)
			}
			got[network] = append(got[network], result.BitsPerSecond)
			fmt.Fprintf(os.Stderr, "secondary, in %s, round %d: %s -> %s over %s: %.0f Mbit/s (load average %s)\n",
				c.Name, round, src.node, dst.node, network, result.BitsPerSecond/1e6, procfs.LoadAverage())
		}
	}
	return sortedMedian(got["net1"]), sortedMedian(got["primary"])
}

// sortedMedian sorts xs and returns their median.
func sortedMedian(xs []float64) float64 {
	slices.Sort(xs)
	return stats.Median(xs)
}

// scaled is xs, each times f.
func scaled(xs []float64, f float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x * f
	}
	return out
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
