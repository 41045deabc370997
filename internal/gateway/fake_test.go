package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/ingressfilter"
	"github.com/octopus-mcs/octopus/internal/datapath/nat"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
)

// fakeDriver is an in-memory tunnel.Driver: it records every configuration applied and can be
// told to fail.
type fakeDriver struct {
	mu      sync.Mutex
	key     string
	configs []tunnel.Config
	closed  bool
	errOn   error
	stats   []tunnel.PeerStats
}

var _ tunnel.Driver = (*fakeDriver)(nil)

func newFakeDriver() *fakeDriver {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return &fakeDriver{key: base64.StdEncoding.EncodeToString(b)}
}

func (f *fakeDriver) Name() string      { return "fake" }
func (f *fakeDriver) PublicKey() string { return f.key }
func (f *fakeDriver) Apply(_ context.Context, cfg tunnel.Config) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.errOn != nil {
		return f.errOn
	}
	cfg.Peers = slices.Clone(cfg.Peers)
	f.configs = append(f.configs, cfg)
	return nil
}
func (f *fakeDriver) Stats() ([]tunnel.PeerStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.stats), nil
}
func (f *fakeDriver) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func (f *fakeDriver) last() (tunnel.Config, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.configs) == 0 {
		return tunnel.Config{}, false
	}
	return f.configs[len(f.configs)-1], true
}

func (f *fakeDriver) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// fakeProber answers every target as up with fixed RTTs.
type fakeProber struct {
	mu      sync.Mutex
	targets map[string]netip.Addr
}

var _ Prober = (*fakeProber)(nil)

func (p *fakeProber) SetTargets(t map[string]netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.targets = t
}

func (p *fakeProber) Snapshot() map[string]ProbeStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]ProbeStats{}
	for id := range p.targets {
		out[id] = ProbeStats{Up: true, Answered: true, Last: 2 * time.Millisecond, Min: time.Millisecond, Avg: 2 * time.Millisecond, Max: 3 * time.Millisecond}
	}
	return out
}

func (p *fakeProber) Close() error { return nil }

// fakeNAT records the globalnet NAT states applied and whether the table was deleted.
type fakeNAT struct {
	mu      sync.Mutex
	applied []nat.State
	deletes int
}

func (f *fakeNAT) Apply(_ context.Context, s nat.State) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, s)
	return nil
}

func (f *fakeNAT) Delete(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes++
	return nil
}

// fakeIngress records the ingress filter states applied.
type fakeIngress struct {
	mu      sync.Mutex
	applied []ingressfilter.State
	deletes int
}

func (f *fakeIngress) Apply(_ context.Context, s ingressfilter.State) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, s)
	return nil
}

func (f *fakeIngress) Delete(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes++
	return nil
}

// last is the state applied last (zero before any).
func (f *fakeIngress) last() ingressfilter.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.applied) == 0 {
		return ingressfilter.State{}
	}
	return f.applied[len(f.applied)-1]
}
