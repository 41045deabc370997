package main

import (
	"fmt"
	"io"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/octopus-mcs/octopus/internal/bench/stats"
)

// round is every mode's sample of one round, with the load average around it.
type round struct {
	samples               map[string]sample // by mode key
	loadBefore, loadAfter string
}

// ratioTarget is a ratio the issue sets a target for.
type ratioTarget struct {
	num, den string // mode keys
	target   float64
}

var targets = []ratioTarget{
	{"wireguard", "debian-wg", 2.0},
	{"wireguard", "lib-wg", 0.9},
	{"vxlan", "veth", 0.6},
	{"globalnet", "wireguard", 0.9},
	{"wireguard-v6", "wireguard", 0.9}, // issue 35: IPv6 vs IPv4 through the same tunnel
}

// report writes the results as Markdown: versions and load, notes on shared setups, medians
// per mode, per-round throughput, and the target ratios.
func report(w io.Writer, c config, rounds []round, notes []string) {
	fmt.Fprintf(w, "Run %s: %d rounds, iperf3 -t %s, 1 and %d streams, %d pings 10 ms apart.\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), len(rounds), c.duration, c.streams, c.pings)
	fmt.Fprintf(w, "Versions: %s; Debian %s; library golang.zx2c4.com/wireguard %s.\n",
		firstLine("iperf3", "--version"), strings.TrimSpace(firstLine("wireguard-go", "--version")), libraryVersion())
	loads := make([]string, len(rounds))
	for i, r := range rounds {
		loads[i] = r.loadBefore + "→" + r.loadAfter
	}
	fmt.Fprintf(w, "Load average (1 min) before→after each round: %s.\n", strings.Join(loads, ", "))
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	fmt.Fprintln(w)

	n := c.streams
	fmt.Fprintf(w, "| mode | 1 stream Gbit/s | %d streams Gbit/s | CPU s per Gbit, 1 / %d streams | ping p50 | ping p99 | p50 vs (a) | lost |\n", n, n)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, key := range c.modes {
		col := column(rounds, key)
		fmt.Fprintf(w, "| %s | **%.2f** (%s) | **%.2f** (%s) | %.2f / %.2f | %s | %s | %s | %d of %d |\n",
			modeByKey(key).label,
			stats.Median(col(single)), spread(col(single)), stats.Median(col(multi)), spread(col(multi)),
			stats.Median(col(singleCPU)), stats.Median(col(multiCPU)),
			ms(stats.Median(col(p50))), ms(stats.Median(col(p99))), vsVeth(rounds, key), sum(col(lost)), len(rounds)*c.pings)
	}

	fmt.Fprintf(w, "\nPer round (Gbit/s, 1 stream / %d streams), in the order measured within the round:\n\n", n)
	fmt.Fprintln(w, "| mode | "+strings.Join(roundHeaders(len(rounds)), " | ")+" |")
	fmt.Fprintln(w, "|---"+strings.Repeat("|---", len(rounds))+"|")
	for _, key := range c.modes {
		cells := []string{modeByKey(key).label}
		for _, r := range rounds {
			s := r.samples[key]
			cells = append(cells, fmt.Sprintf("%.2f / %.2f", s.single.gbps(), s.multi.gbps()))
		}
		fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
	}

	fmt.Fprintf(w, "\n| ratio (median of the per-round ratios) | 1 stream | %d streams | target | met | Gbit per CPU s, same ratio, 1 / %d streams |\n", n, n)
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, t := range activeTargets(c.modes) {
		r1 := stats.Median(ratios(rounds, t, single))
		rn := stats.Median(ratios(rounds, t, multi))
		// Efficiency: the inverse ratio of CPU cost per Gbit, steadier than throughput when
		// other work takes CPU from the run.
		e1 := stats.Median(ratios(rounds, ratioTarget{num: t.den, den: t.num}, singleCPU))
		en := stats.Median(ratios(rounds, ratioTarget{num: t.den, den: t.num}, multiCPU))
		fmt.Fprintf(w, "| %s ÷ %s | **%.2f×** | **%.2f×** | ≥ %.1f× | %s | %.2f× / %.2f× |\n",
			modeByKey(t.num).label, modeByKey(t.den).label, r1, rn, t.target, met(r1, rn, t.target, n), e1, en)
	}
}

// activeTargets are the target ratios both of whose modes were measured.
func activeTargets(keys []string) []ratioTarget {
	var out []ratioTarget
	for _, t := range targets {
		if slices.Contains(keys, t.num) && slices.Contains(keys, t.den) {
			out = append(out, t)
		}
	}
	return out
}

// metric picks one number out of a sample.
type metric func(sample) float64

func single(s sample) float64    { return s.single.gbps() }
func multi(s sample) float64     { return s.multi.gbps() }
func singleCPU(s sample) float64 { return s.single.coresPerGbps() }
func multiCPU(s sample) float64  { return s.multi.coresPerGbps() }
func p50(s sample) float64       { return s.ping.p50.Seconds() }
func p99(s sample) float64       { return s.ping.p99.Seconds() }
func lost(s sample) float64      { return float64(s.ping.lost) }

// column returns a function giving metric m of mode key over all rounds.
func column(rounds []round, key string) func(metric) []float64 {
	return func(m metric) []float64 {
		out := make([]float64, 0, len(rounds))
		for _, r := range rounds {
			out = append(out, m(r.samples[key]))
		}
		return out
	}
}

func ratios(rounds []round, t ratioTarget, m metric) []float64 {
	out := make([]float64, 0, len(rounds))
	for _, r := range rounds {
		if d := m(r.samples[t.den]); d > 0 {
			out = append(out, m(r.samples[t.num])/d)
		}
	}
	return out
}

func vsVeth(rounds []round, key string) string {
	if _, ok := rounds[0].samples["veth"]; !ok {
		return "–"
	}
	return fmt.Sprintf("%.1f×", stats.Median(ratios(rounds, ratioTarget{num: key, den: "veth"}, p50)))
}

func met(r1, rn, target float64, n int) string {
	yes := func(r float64) string {
		if r >= target {
			return "yes"
		}
		return fmt.Sprintf("**no** (%.3f×, %.1f %% short)", r, (1-r/target)*100)
	}
	return fmt.Sprintf("1 stream: %s; %d streams: %s", yes(r1), n, yes(rn))
}

func spread(xs []float64) string {
	return fmt.Sprintf("%.2f–%.2f", slices.Min(xs), slices.Max(xs))
}

func ms(seconds float64) string { return fmt.Sprintf("%.3f ms", seconds*1000) }

func sum(xs []float64) (s int) {
	for _, x := range xs {
		s += int(x)
	}
	return s
}

func roundHeaders(n int) []string {
	h := make([]string, n)
	for i := range h {
		h[i] = fmt.Sprintf("round %d", i+1)
	}
	return h
}

func firstLine(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return name + " (version unknown)"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

func libraryVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "golang.zx2c4.com/wireguard" {
				return d.Version
			}
		}
	}
	return "(unknown)"
}
