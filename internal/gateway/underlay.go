package gateway

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/pathprobe"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/kernel"
)

// UnderlayProber measures, outside the tunnel, the underlay path to each remote gateway's
// tunnel endpoint: whether its tunnel port answers and the path MTU. Snapshot is keyed by
// cluster ID and holds the last measurement of each current target.
type UnderlayProber interface {
	SetTargets(targets map[string]netip.AddrPort)
	Snapshot() map[string]v1alpha1.UnderlayProbe
	Close() error
}

// DefaultUnderlayProbeInterval is how often the gateway measures the underlay path to every
// remote gateway: a change of the underlay (a firewall rule, an MTU) shows within it, and a
// measurement costs at most a few dozen small-to-MTU-sized packets per remote gateway.
const DefaultUnderlayProbeInterval = 2 * time.Minute

// NewPathProber returns an Options.NewUnderlayProber that answers other gateways' probes on
// the tunnel port and measures every target every interval, and at once when a target is new
// or its endpoint changed (package datapath/pathprobe), in the process's network namespace.
func NewPathProber(interval time.Duration, log logr.Logger) func(tunnelPort uint16, device string, backend v1alpha1.Backend) (UnderlayProber, error) {
	return func(tunnelPort uint16, device string, backend v1alpha1.Backend) (UnderlayProber, error) {
		overhead := kernel.WireGuardOverhead
		if backend == v1alpha1.BackendVXLAN {
			overhead = kernel.VXLANOverhead
		}
		r, err := pathprobe.NewResponder(tunnelPort, log)
		if err != nil {
			return nil, err
		}
		p := &pathProber{
			responder: r, interval: interval, log: log,
			mtus:    func(remote netip.Addr) (tunnelMTU, required int32) { return tunnelMTUs(device, overhead, remote) },
			targets: map[string]netip.AddrPort{}, results: map[string]measured{},
			wake: make(chan struct{}, 1), stop: make(chan struct{}),
		}
		p.wg.Add(1)
		go p.loop()
		return p, nil
	}
}

// tunnelMTUs are the MTU of the tunnel on device and the largest underlay packet it sends to
// remote; 0 when the device cannot be read.
func tunnelMTUs(device string, overhead int, remote netip.Addr) (tunnelMTU, required int32) {
	mtu, err := deviceMTU(device)
	if err != nil {
		return 0, 0
	}
	return int32(mtu), int32(kernel.UnderlayPacketSize(mtu, overhead, remote.Unmap().Is4())) //nolint:gosec // MTUs fit
}

// pathProber is the UnderlayProber of NewPathProber.
type pathProber struct {
	responder *pathprobe.Responder
	interval  time.Duration
	log       logr.Logger
	// mtus reads the tunnel's MTU and the underlay packet size it needs towards remote.
	mtus func(remote netip.Addr) (tunnelMTU, required int32)

	mu      sync.Mutex
	targets map[string]netip.AddrPort
	results map[string]measured

	wake chan struct{}
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// measured is a measurement and the endpoint it was made to.
type measured struct {
	endpoint netip.AddrPort
	probe    v1alpha1.UnderlayProbe
}

func (p *pathProber) SetTargets(targets map[string]netip.AddrPort) {
	p.mu.Lock()
	changed := !maps.Equal(p.targets, targets)
	p.targets = maps.Clone(targets)
	p.mu.Unlock()
	if changed {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

func (p *pathProber) Snapshot() map[string]v1alpha1.UnderlayProbe {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]v1alpha1.UnderlayProbe{}
	for id, ep := range p.targets {
		if m, ok := p.results[id]; ok && m.endpoint == ep {
			out[id] = m.probe
		}
	}
	return out
}

func (p *pathProber) Close() error {
	var err error
	p.once.Do(func() {
		close(p.stop)
		p.wg.Wait()
		err = p.responder.Close()
	})
	return err
}

// loop measures every target each interval, and the targets without a measurement of their
// current endpoint when woken.
func (p *pathProber) loop() {
	defer p.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-p.stop
		cancel()
	}()
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
			p.round(ctx, true)
		case <-p.wake:
			p.round(ctx, false)
		}
	}
}

// round measures the targets (all, or only those not yet measured at their endpoint) at
// once, one goroutine each.
func (p *pathProber) round(ctx context.Context, all bool) {
	p.mu.Lock()
	todo := map[string]netip.AddrPort{}
	for id, ep := range p.targets {
		if m, ok := p.results[id]; all || !ok || m.endpoint != ep {
			todo[id] = ep
		}
	}
	for id := range p.results {
		if _, ok := p.targets[id]; !ok {
			delete(p.results, id)
		}
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for id, ep := range todo {
		wg.Go(func() {
			r, err := pathprobe.Probe(ctx, ep, pathprobe.Options{})
			if err != nil {
				if ctx.Err() == nil {
					p.log.Error(err, "Measuring the underlay path", "cluster", id, "endpoint", ep.String())
				}
				return
			}
			probe := underlayProbe(r)
			probe.TunnelMTU, probe.RequiredMTU = p.mtus(ep.Addr())
			p.mu.Lock()
			prev, had := p.results[id]
			p.results[id] = measured{endpoint: ep, probe: probe}
			p.mu.Unlock()
			if !had || prev.probe.PortReachable != probe.PortReachable || prev.probe.PathMTU != probe.PathMTU {
				p.log.Info("Measured the underlay path", "cluster", id, "endpoint", ep.String(), "portReachable", probe.PortReachable,
					"pathMTU", probe.PathMTU, "requiredMTU", probe.RequiredMTU, "reason", r.Reason, "probes", r.Probes)
			}
		})
	}
	wg.Wait()
}

// underlayProbe is the status form of a measurement.
func underlayProbe(r pathprobe.Result) v1alpha1.UnderlayProbe {
	return v1alpha1.UnderlayProbe{
		Time: metav1.NewTime(r.Time.Truncate(time.Second)), PortReachable: r.Reachable, Message: r.Reason,
		PathMTU: int32(r.PathMTU), //nolint:gosec // an MTU fits
	}
}

// underlayTargets are the tunnel endpoints of the remote gateways we tunnel to directly.
func underlayTargets(d Desired) map[string]netip.AddrPort {
	out := map[string]netip.AddrPort{}
	for _, p := range d.Tunnel.Peers {
		if p.Endpoint.IsValid() {
			out[p.Cluster] = p.Endpoint
		}
	}
	return out
}

// setUnderlay adds the last underlay measurements to the direct connections of a status
// (BuildStatus's); a connection through another Peer's tunnel has no underlay path of its own.
func setUnderlay(st *v1alpha1.PeerStatus, probes map[string]v1alpha1.UnderlayProbe) {
	for i := range st.Connections {
		c := &st.Connections[i]
		if p, ok := probes[c.ClusterID]; ok && c.Via == "" {
			c.Underlay = &p
		}
	}
}

// startUnderlayProber starts the active term's underlay prober when the gateway has one; the
// returned stop closes it.
func (a *active) startUnderlayProber() (stop func(), err error) {
	if a.o.NewUnderlayProber == nil {
		return func() {}, nil
	}
	if a.underlay, err = a.o.NewUnderlayProber(a.o.ListenPort, a.o.Device, a.o.Backend); err != nil {
		return nil, fmt.Errorf("starting the underlay path prober: %w", err)
	}
	return func() { _ = a.underlay.Close() }, nil
}

func deviceMTU(device string) (int, error) {
	l, err := netlink.LinkByName(device)
	if err != nil {
		return 0, fmt.Errorf("reading the tunnel device %s: %w", device, err)
	}
	return l.Attrs().MTU, nil
}
