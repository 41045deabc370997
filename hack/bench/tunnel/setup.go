package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"time"
)

// setup is one mode's running topology: namespaces, gateway processes, the iperf3 server.
type setup struct {
	mode     mode
	topo     *topology
	gateways []*process // their CPU time counts
	server   *process   // iperf3 -s in pod 2
}

// newSetup builds the topology, connects it the mode's way, starts the iperf3 server and
// waits until pod 1 reaches pod 2. On error the returned setup (if any) must still be closed.
func newSetup(ctx context.Context, m mode) (*setup, error) {
	s := &setup{mode: m}
	topo, err := newTopology(ctx, m.key, m.letter)
	s.topo = topo
	if err != nil {
		return s, err
	}
	if err := m.connect(ctx, s); err != nil {
		return s, err
	}
	pod1, pod2 := s.topo.gws[0], s.topo.gws[1]
	s.server, err = start(pod2.podNS, "iperf3 server", []string{"iperf3", "-s", "-B", pod2.podAddr.String(), "-p", strconv.Itoa(iperfPort)})
	if err != nil {
		return s, err
	}
	if err := waitFor(s.server, 10*time.Second, func() bool {
		out, _ := exec.CommandContext(ctx, "ip", "netns", "exec", pod2.podNS, "ss", "-Hltn", "sport = :"+strconv.Itoa(iperfPort)).Output()
		return len(out) > 0
	}); err != nil {
		return s, fmt.Errorf("waiting for the iperf3 server: %w", err)
	}
	// The first packets of a WireGuard mode wait for the handshake.
	if err := waitFor(nil, 20*time.Second, func() bool {
		return exec.CommandContext(ctx, "ip", "netns", "exec", pod1.podNS, "ping", "-c1", "-W1", "-q", target(m.key, pod2).String()).Run() == nil
	}); err != nil {
		return s, fmt.Errorf("pod 1 does not reach pod 2 (%s): %w", target(m.key, pod2), err)
	}
	return s, nil
}

func (s *setup) addGateway(p *process) { s.gateways = append(s.gateways, p) }

// close stops the processes (helpers tear their tunnel down on stdin EOF) and deletes the
// namespaces.
func (s *setup) close() {
	if s.server != nil {
		s.server.stop()
	}
	for _, p := range slices.Backward(s.gateways) {
		p.stop()
	}
	if s.topo != nil {
		s.topo.delete()
	}
}

// sample is what one round measured of one mode.
type sample struct {
	single, multi throughput
	ping          latency
}

// measure runs 1 stream, then the parallel streams, then the latency probe.
func (s *setup) measure(ctx context.Context, c config) (sample, error) {
	var smp sample
	var err error
	if smp.single, err = s.throughput(ctx, c.duration, 1); err != nil {
		return smp, err
	}
	if smp.multi, err = s.throughput(ctx, c.duration, c.streams); err != nil {
		return smp, err
	}
	smp.ping, err = runPing(ctx, s.topo.gws[0].podNS, target(s.mode.key, s.topo.gws[1]), c.pings)
	return smp, err
}

// throughput is one iperf3 run with the CPU time every process on the path used meanwhile:
// the iperf3 client (its rusage) and server, the gateway processes, and the ksoftirqd threads
// (see cpu.go for why that is the whole cost).
func (s *setup) throughput(ctx context.Context, d time.Duration, streams int) (throughput, error) {
	pids := []int{s.server.pid()}
	for _, p := range s.gateways {
		pids = append(pids, p.pid())
	}
	pids = append(pids, ksoftirqdPIDs()...)
	before := cpuTime(pids)
	res, clientCPU, err := runIperf(ctx, s.topo.gws[0].podNS, target(s.mode.key, s.topo.gws[1]), d, streams)
	if err != nil {
		return throughput{}, err
	}
	if err := s.server.exited(); err != nil {
		return throughput{}, err
	}
	return throughput{iperfResult: res, cpu: cpuTime(pids) - before + clientCPU}, nil
}

// throughput is an iperf3 result with the CPU time it cost.
type throughput struct {
	iperfResult
	cpu time.Duration
}

func (t throughput) gbps() float64 { return t.BitsPerSecond / 1e9 }

// coresPerGbps is CPU seconds per second of transfer, per Gbit/s: equivalently CPU seconds per
// gigabit moved.
func (t throughput) coresPerGbps() float64 {
	if t.Bytes == 0 {
		return 0
	}
	return t.cpu.Seconds() / (float64(t.Bytes) * 8 / 1e9)
}
