package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/octopus-mcs/octopus/internal/bench/stats"
)

// latency is the round-trip time distribution of one ping run.
type latency struct {
	p50, p99   time.Duration
	sent, lost int
}

// runPing sends count ICMP echo requests, 10 ms apart, from namespace ns to dst.
func runPing(ctx context.Context, ns string, dst netip.Addr, count int) (latency, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(count)*10*time.Millisecond+30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", pingArgs(ns, dst, "-n", "-c", strconv.Itoa(count), "-i", "0.01", "-W", "1")...).Output()
	rtts := parsePingRTTs(string(out))
	if len(rtts) == 0 {
		return latency{}, fmt.Errorf("ping %s from %s: no reply: %w", dst, ns, errors.Join(err, ctx.Err()))
	}
	slices.Sort(rtts)
	return latency{p50: stats.Percentile(rtts, 50), p99: stats.Percentile(rtts, 99), sent: count, lost: count - len(rtts)}, nil
}

// pingArgs are the arguments of ip for pinging dst from namespace ns with ping's options opts:
// with -6 for an IPv6 destination, so that ping never picks a family by itself.
func pingArgs(ns string, dst netip.Addr, opts ...string) []string {
	args := []string{"netns", "exec", ns, "ping"}
	if dst.Is6() {
		args = append(args, "-6")
	}
	return append(append(args, opts...), dst.String())
}

// parsePingRTTs returns the "time=<ms> ms" of every reply line of iputils ping's output.
func parsePingRTTs(out string) []time.Duration {
	var rtts []time.Duration
	for line := range strings.Lines(out) {
		_, after, ok := strings.Cut(line, " time=")
		if !ok {
			continue
		}
		ms, _, _ := strings.Cut(after, " ")
		v, err := strconv.ParseFloat(ms, 64)
		if err != nil {
			continue
		}
		rtts = append(rtts, time.Duration(math.Round(v*float64(time.Millisecond))))
	}
	return rtts
}
