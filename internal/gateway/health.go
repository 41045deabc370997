package gateway

import (
	"net/netip"
	"time"

	"github.com/go-logr/logr"

	"github.com/octopus-mcs/octopus/internal/datapath/health"
)

// NewHealthProber returns a Options.NewProber that probes with ICMP echo from the gateway's
// namespace (package datapath/health) every interval, a target being down after downAfter
// probes in a row go unanswered (health.DefaultDownAfter when 0). The probes leave through the tunnel
// device, whose health-check address is their source, so an answer proves the tunnel.
func NewHealthProber(interval time.Duration, downAfter int, log logr.Logger) func() (Prober, error) {
	return func() (Prober, error) {
		p, err := health.New(health.Options{Interval: interval, DownAfter: downAfter, Log: log})
		if err != nil {
			return nil, err
		}
		return healthProber{p}, nil
	}
}

type healthProber struct{ p *health.Prober }

var _ Prober = healthProber{}

func (h healthProber) SetTargets(t map[string]netip.Addr) { h.p.SetTargets(t) }
func (h healthProber) Close() error                       { return h.p.Close() }

func (h healthProber) Snapshot() map[string]ProbeStats {
	out := map[string]ProbeStats{}
	for id, s := range h.p.Snapshot() {
		out[id] = ProbeStats{Up: s.Up, Answered: s.Answered, Last: s.Last, Min: s.Min, Avg: s.Avg, Max: s.Max, LossPercent: s.LossPercent}
	}
	return out
}
