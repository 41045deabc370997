package health_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/health"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestICMPInNamespaces probes a real neighbour over a veth underlay: up with plausible RTTs,
// an address nobody answers never up, and the neighbour down once its link is.
func TestICMPInNamespaces(t *testing.T) {
	testenv.LabNetwork(t)
	topo := tunneltest.New(t, 2)
	g1, g2 := topo.Gateways[0], topo.Gateways[1]
	silent := netip.MustParseAddr("203.0.113.99")

	var p *health.Prober
	tunneltest.In(t, g1.NS, func() {
		var err error
		if p, err = health.New(health.Options{Interval: 100 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	})
	defer p.Close()
	p.SetTargets(map[string]netip.Addr{"c2": g2.Underlay, "silent": silent})

	wait := func(what string, cond func(map[string]health.Stats) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if cond(p.Snapshot()) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: not reached within 10s; last snapshot %+v", what, p.Snapshot())
	}
	wait("c2 up with RTTs", func(s map[string]health.Stats) bool {
		c := s["c2"]
		return c.Up && c.Sent >= 5 && c.Min > 0 && c.Min <= c.Avg && c.Avg <= c.Max && c.Max < 100*time.Millisecond &&
			!s["silent"].Answered && s["silent"].LossPercent == 100
	})
	tunneltest.Run(t, "ip", "-n", g2.NS, "link", "set", g2.UnderDev, "down")
	wait("c2 down", func(s map[string]health.Stats) bool {
		return !s["c2"].Up && s["c2"].Answered && s["c2"].Lost >= health.DefaultDownAfter
	})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
