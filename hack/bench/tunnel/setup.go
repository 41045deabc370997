package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// setup is one topology's running state: namespaces, gateway processes, the iperf3 servers.
type setup struct {
	mode mode // the mode whose connect built it
	// dualStack: the pods have IPv6 addresses too, the tunnel carries both families, and the
	// pods' MTU is the tunnel device's (podMTU).
	dualStack bool
	topo      *topology
	gateways  []*process // their CPU time counts
	servers   []*process // iperf3 -s in pod 2, one per address family
	// podMTU is the MTU given to the pods' links in a dual-stack setup: the one the driver
	// derived for its device; 0 otherwise (the pods keep veth's 1500 and rely on the clamp).
	podMTU int
}

// newSetup builds the topology, connects it the mode's way, starts the iperf3 servers and
// waits until pod 1 reaches pod 2 over every family. On error the returned setup (if any) must
// still be closed.
func newSetup(ctx context.Context, m mode, dualStack bool) (*setup, error) {
	s := &setup{mode: m, dualStack: dualStack}
	topo, err := newTopology(ctx, m.key, m.letter, dualStack)
	s.topo = topo
	if err != nil {
		return s, err
	}
	if err := m.connect(ctx, s); err != nil {
		return s, err
	}
	if dualStack {
		if err := s.matchPodMTU(ctx); err != nil {
			return s, err
		}
	}
	pod1, pod2 := s.topo.gws[0], s.topo.gws[1]
	addrs := []netip.Addr{pod2.podAddr}
	if dualStack {
		addrs = append(addrs, pod2.podAddr6)
	}
	for _, a := range addrs {
		srv, err := start(pod2.podNS, "iperf3 server "+a.String(), []string{"iperf3", "-s", "-B", a.String(), "-p", strconv.Itoa(iperfPort)})
		if err != nil {
			return s, err
		}
		s.servers = append(s.servers, srv)
		// ss prints an IPv6 listener as [addr]:port, as AddrPort.String does.
		listener := netip.AddrPortFrom(a, iperfPort).String()
		if err := waitFor(srv, 10*time.Second, func() bool {
			out, _ := exec.CommandContext(ctx, "ip", "netns", "exec", pod2.podNS, "ss", "-Hltn", "sport = :"+strconv.Itoa(iperfPort)).Output()
			return strings.Contains(string(out), listener)
		}); err != nil {
			return s, fmt.Errorf("waiting for the iperf3 server on %s: %w", listener, err)
		}
	}
	// The first packets of a WireGuard mode wait for the handshake.
	for _, dst := range s.targets() {
		if err := waitFor(nil, 20*time.Second, func() bool {
			return exec.CommandContext(ctx, "ip", pingArgs(pod1.podNS, dst, "-c1", "-W1", "-q")...).Run() == nil
		}); err != nil {
			return s, fmt.Errorf("pod 1 does not reach pod 2 (%s): %w", dst, err)
		}
	}
	return s, nil
}

// targets are pod 2's addresses that the modes measured on s reach it at.
func (s *setup) targets() []netip.Addr {
	out := []netip.Addr{target(s.mode, s.topo.gws[1])}
	if s.dualStack {
		out = append(out, s.topo.gws[1].podAddr6)
	}
	return out
}

// matchPodMTU gives the pods' links (both ends of each veth) the MTU the driver derived for its
// device, as a CNI plugin configured for the tunnel would. Then the pods' own TCP MSS is the
// tunnel MTU less 40 (IPv4) or 60 (IPv6) bytes, so neither family leans on the gateway's MSS
// clamp or on path-MTU discovery, and the two fill the same 1420-byte tunnel packets.
func (s *setup) matchPodMTU(ctx context.Context) error {
	for _, g := range s.topo.gws {
		mtu, err := linkMTU(ctx, g.ns, g.dev)
		if err != nil {
			return err
		}
		if s.podMTU != 0 && mtu != s.podMTU {
			return fmt.Errorf("the two gateways' devices have MTUs %d and %d: the driver derives one from the same underlay", s.podMTU, mtu)
		}
		s.podMTU = mtu
		for _, link := range [][]string{{g.ns, "pod"}, {g.podNS, "eth0"}} {
			if err := ip(ctx, "-n", link[0], "link", "set", link[1], "mtu", strconv.Itoa(mtu)); err != nil {
				return fmt.Errorf("giving the pods the tunnel MTU: %w", err)
			}
		}
	}
	return nil
}

// linkMTU reads the MTU of link dev in namespace ns.
func linkMTU(ctx context.Context, ns, dev string) (int, error) {
	out, err := exec.CommandContext(ctx, "ip", "-j", "-n", ns, "link", "show", "dev", dev).Output()
	if err != nil {
		return 0, fmt.Errorf("reading the MTU of %s in %s: %w", dev, ns, err)
	}
	mtu, err := parseLinkMTU(out)
	if err != nil {
		return 0, fmt.Errorf("reading the MTU of %s in %s: %w", dev, ns, err)
	}
	return mtu, nil
}

// parseLinkMTU reads `ip -j link show dev X`: a JSON array of one link.
func parseLinkMTU(out []byte) (int, error) {
	var links []struct {
		MTU int `json:"mtu"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return 0, fmt.Errorf("parsing ip's JSON: %w", err)
	}
	if len(links) != 1 || links[0].MTU <= 0 {
		return 0, fmt.Errorf("want one link with an MTU, got %s", out)
	}
	return links[0].MTU, nil
}

func (s *setup) addGateway(p *process) { s.gateways = append(s.gateways, p) }

// close stops the processes (helpers tear their tunnel down on stdin EOF) and deletes the
// namespaces.
func (s *setup) close() {
	for _, srv := range s.servers {
		srv.stop()
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

// measure runs, for mode m (s's own or an IPv6 mode through it), 1 stream, then the parallel
// streams, then the latency probe.
func (s *setup) measure(ctx context.Context, c config, m mode) (sample, error) {
	var smp sample
	var err error
	dst := target(m, s.topo.gws[1])
	if smp.single, err = s.throughput(ctx, dst, c.duration, 1); err != nil {
		return smp, err
	}
	if smp.multi, err = s.throughput(ctx, dst, c.duration, c.streams); err != nil {
		return smp, err
	}
	smp.ping, err = runPing(ctx, s.topo.gws[0].podNS, dst, c.pings)
	return smp, err
}

// throughput is one iperf3 run to dst with the CPU time every process on the path used
// meanwhile: the iperf3 client (its rusage) and servers (the other family's is idle), the
// gateway processes, and the ksoftirqd threads (see cpu.go for why that is the whole cost).
func (s *setup) throughput(ctx context.Context, dst netip.Addr, d time.Duration, streams int) (throughput, error) {
	var pids []int
	for _, p := range s.servers {
		pids = append(pids, p.pid())
	}
	for _, p := range s.gateways {
		pids = append(pids, p.pid())
	}
	pids = append(pids, ksoftirqdPIDs()...)
	before := cpuTime(pids)
	res, clientCPU, err := runIperf(ctx, s.topo.gws[0].podNS, dst, d, streams)
	if err != nil {
		return throughput{}, err
	}
	for _, srv := range s.servers {
		if err := srv.exited(); err != nil {
			return throughput{}, err
		}
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
