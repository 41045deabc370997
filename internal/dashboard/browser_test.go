package dashboard

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/dashboard/dashboardtest"
)

// TestPageInChromium loads the page in a real headless Chromium against a server whose
// snapshot the test switches: the page draws the clusters, gateways, tunnel halves and the
// service; a click on a cluster shows its conditions; and when east's gateway stops, the
// page turns its half stale and west's half Error without a reload.
func TestPageInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var killed atomic.Bool
	srv := httptest.NewServer((&Server{Refresh: 100 * time.Millisecond, Collect: func(context.Context) Snapshot {
		s := healthy()
		if killed.Load() {
			s.Members[0].GatewayLease = lease("east-gw", now.Add(-time.Minute))
			s.Peers[0].Status.Connections[0] = conn("east", v1alpha1.ConnectionError, 0, 100)
		}
		return s
	}}).Handler())
	defer srv.Close()

	b := dashboardtest.Start(ctx, t)
	if err := b.Navigate(ctx, srv.URL+"/"); err != nil {
		t.Fatal(err)
	}
	dashboardtest.Wait(ctx, t, b, 20*time.Second, "the healthy set", func(p dashboardtest.Page) error {
		return errors.Join(
			dashboardtest.Expect("cluster", p.Clusters, map[string]string{"east": "Connected", "west": "Connected"}),
			dashboardtest.Expect("gateway", p.Gateways, map[string]string{"east": LivenessRunning, "west": LivenessRunning}),
			dashboardtest.Expect("tunnel", p.Tunnels, map[string]string{"east>west": "Connected", "west>east": "Connected"}),
			dashboardtest.Expect("service", p.Services, map[string]string{"shop/web": "east|east,west"}),
			dashboardtest.Expect("hub", map[string]string{"hub": p.Hub}, map[string]string{"hub": "up"}),
		)
	})

	if err := b.Click(ctx, `g[data-cluster="east"]`); err != nil {
		t.Fatal(err)
	}
	dashboardtest.Wait(ctx, t, b, 10*time.Second, "east's conditions", func(p dashboardtest.Page) error {
		return errors.Join(
			dashboardtest.Expect("details", map[string]string{"cluster": p.Details}, map[string]string{"cluster": "east"}),
			dashboardtest.Expect("condition", p.Conditions, map[string]string{"Cluster/AgentConnected": "True", "Peer/Published": "True"}),
		)
	})
	dashboardtest.Screenshot(ctx, t, b, "dashboard-healthy.png")

	killed.Store(true)
	p := dashboardtest.Wait(ctx, t, b, 20*time.Second, "east's gateway stopped", func(p dashboardtest.Page) error {
		return errors.Join(
			dashboardtest.Expect("gateway", p.Gateways, map[string]string{"east": LivenessStopped, "west": LivenessRunning}),
			dashboardtest.Expect("tunnel", p.Tunnels, map[string]string{"east>west": StateStale, "west>east": "Error"}),
		)
	})
	if p.Details != "east" {
		t.Errorf("the selection was lost on refresh: details of %q", p.Details)
	}
	dashboardtest.Screenshot(ctx, t, b, "dashboard-gateway-stopped.png")
}
