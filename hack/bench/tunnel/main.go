// Command tunnel measures cross-cluster pod → pod throughput and latency through Octopus's
// tunnel drivers against baselines, all in one run so that the ratios compare like with like
// (issue 6; docs/benchmarks.md "Tunnel throughput"). For every mode it builds two gateway
// namespaces joined by a veth underlay, with a pod namespace behind each, and measures with
// iperf3 (1 stream and -streams parallel streams) and ping from pod 1 to pod 2. Modes:
//
//	veth       plain routing over the underlay, no tunnel (the ceiling)
//	debian-wg  Debian's wireguard-go program (the 2022 build) configured with `wg`
//	lib-wg     a bare pair of the wireguard-go library pinned in go.mod: TUN + NewDevice + IpcSet
//	wireguard  Octopus's wireguard driver: drivers.New + Apply, as the gateway calls them
//	vxlan      Octopus's vxlan driver, the same way
//	globalnet  the wireguard driver with globalnet's NAT on both gateways
//
// and, only when named in -modes (issue 35; docs/benchmarks.md "IPv6 vs IPv4 through the same
// tunnel"):
//
//	wireguard-v6  IPv6 pod → pod (iperf3 -6, ping -6) through the wireguard mode's own tunnel
//
// wireguard-v6 has no topology of its own: it makes the wireguard mode's setup dual-stack and
// takes its own turn in each round through it. The pods get 2001:db8:1::2 and 2001:db8:2::2
// besides their IPv4 addresses, each gateway passes the driver one Peer with both families'
// subnets (as the gateway does for a dual-stack cluster), the underlay stays IPv4, and the
// pods' links get the MTU the driver derived for its device, so each family's TCP MSS is that
// MTU less its own headers (40 or 60 bytes) and neither leans on the clamp. It is not in the
// default set, which therefore measures exactly what it did before. There is no vxlan-v6: over
// an IPv4 underlay the vxlan driver carries IPv4 only (it routes a subnet via the peer's
// endpoint address, which must be of the subnet's family).
//
// Rounds interleave the modes (each round starts one mode later), and the summary is the
// median over rounds; ratios are the medians of the per-round ratios. It needs root, iperf3,
// ping, ip, wireguard-go and wg (hack/install-deps.sh). Progress goes to stderr, the results
// (Markdown) to stdout:
//
//	go run ./hack/bench/tunnel -rounds 5   # as root, from the repository root
//	go run ./hack/bench/tunnel -modes wireguard,wireguard-v6 -rounds 7 -duration 3s
//
// The lib-wg, wireguard and vxlan gateways are this program re-executed inside the gateway
// namespace (see helper.go), so each is a process of its own, like the real gateway.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

type config struct {
	modes    []string
	rounds   int
	duration time.Duration
	streams  int
	pings    int
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == helperCommand {
		os.Exit(helperMain(os.Args[2:]))
	}
	var c config
	modes := flag.String("modes", strings.Join(defaultModeKeys(), ","), "modes to measure, comma-separated (also: wireguard-v6)")
	flag.IntVar(&c.rounds, "rounds", 5, "rounds; every round measures every mode once")
	flag.DurationVar(&c.duration, "duration", 5*time.Second, "length of one iperf3 run")
	flag.IntVar(&c.streams, "streams", 4, "parallel TCP streams of the multi-stream run")
	flag.IntVar(&c.pings, "pings", 200, "ICMP echo requests per latency sample (10 ms apart)")
	flag.Parse()
	err := c.complete(*modes)
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = run(ctx, c)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tunnel benchmark:", err)
		os.Exit(1)
	}
}

func (c *config) complete(modes string) error {
	for m := range strings.SplitSeq(modes, ",") {
		m = strings.TrimSpace(m)
		if !slices.Contains(modeKeys(), m) {
			return fmt.Errorf("-modes: unknown mode %q; choose from %s", m, strings.Join(modeKeys(), ", "))
		}
		if slices.Contains(c.modes, m) {
			// Its setup would be built twice under the same namespace names.
			return fmt.Errorf("-modes: mode %q is given twice", m)
		}
		c.modes = append(c.modes, m)
	}
	switch {
	case c.rounds < 1:
		return errors.New("-rounds: want at least 1")
	case c.duration < time.Second:
		return errors.New("-duration: want at least 1s")
	case c.streams < 2:
		return errors.New("-streams: want at least 2 (1 stream is always measured)")
	case c.pings < 1:
		return errors.New("-pings: want at least 1")
	}
	return nil
}

func run(ctx context.Context, c config) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: it creates network namespaces, links and TUN devices (run it with sudo)")
	}
	for _, tool := range []string{"ip", "ping", "iperf3", "wireguard-go", "wg"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: run hack/install-deps.sh", tool)
		}
	}
	removeStale(ctx)
	var cleanups []func()
	defer func() {
		progress("cleaning up")
		for _, f := range slices.Backward(cleanups) {
			f()
		}
	}()
	setups := map[string]*setup{}
	var notes []string
	for _, p := range planSetups(c.modes) {
		if p.dualStack {
			progress("setting up %s, dual-stack", p.key)
		} else {
			progress("setting up %s", p.key)
		}
		s, err := newSetup(ctx, modeByKey(p.key), p.dualStack)
		if s != nil {
			cleanups = append(cleanups, s.close)
		}
		if err != nil {
			return fmt.Errorf("setting up %s: %w", p.key, err)
		}
		setups[p.key] = s
		if p.dualStack {
			notes = append(notes, dualStackNote(c.modes, s))
		}
	}
	var rounds []round
	for r := range c.rounds {
		rd := round{samples: map[string]sample{}, loadBefore: loadAverage()}
		// Interleave the modes, not the setups: an IPv6 mode takes its own turn through the
		// setup it shares.
		for i := range c.modes {
			m := modeByKey(c.modes[(i+r)%len(c.modes)])
			smp, err := setups[m.setupKey()].measure(ctx, c, m)
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted in round %d, %s", r+1, m.key)
			}
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, m.key, err)
			}
			rd.samples[m.key] = smp
			progress("round %d/%d %-9s 1 stream %5.2f Gbit/s (%d retr, %.2f CPU s/Gbit), %d streams %5.2f Gbit/s (%d retr, %.2f), ping p50 %s p99 %s (load %s)",
				r+1, c.rounds, m.key, smp.single.gbps(), smp.single.Retransmits, smp.single.coresPerGbps(),
				c.streams, smp.multi.gbps(), smp.multi.Retransmits, smp.multi.coresPerGbps(), smp.ping.p50, smp.ping.p99, loadAverage())
		}
		rd.loadAfter = loadAverage()
		rounds = append(rounds, rd)
	}
	report(os.Stdout, c, rounds, notes)
	return nil
}

// dualStackNote says, for the report, which modes share dual-stack setup s and on what terms.
func dualStackNote(keys []string, s *setup) string {
	var labels []string
	for _, k := range keys {
		if m := modeByKey(k); m.setupKey() == s.mode.key {
			labels = append(labels, m.label)
		}
	}
	g1, g2 := s.topo.gws[0], s.topo.gws[1]
	return fmt.Sprintf("%s: one dual-stack tunnel over the IPv4 underlay (peer subnets %s, %s and %s, %s); "+
		"the pods' MTU is the driver's %d, so TCP MSS %d over IPv4, %d over IPv6.",
		strings.Join(labels, " and "), g1.podNet, g1.podNet6, g2.podNet, g2.podNet6, s.podMTU, s.podMTU-40, s.podMTU-60)
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// loadAverage is the 1-minute load average, as /proc/loadavg says it ("?" if unreadable).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
