package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/route"
	"github.com/octopus-mcs/octopus/internal/routeagent"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// timedRoutes is a route agent's routes, recording when each set was applied.
type timedRoutes struct {
	mu      sync.Mutex
	applied []route.Route
	at      time.Time
}

func (r *timedRoutes) Apply(desired []route.Route) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Equal(r.applied, desired) {
		r.applied, r.at = slices.Clone(desired), time.Now()
	}
	return nil
}

func (r *timedRoutes) via() (netip.Addr, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.applied) == 0 {
		return netip.Addr{}, r.at
	}
	return r.applied[0].Via, r.at
}

// timeline records when each step of a handover was first seen.
type timeline struct {
	start time.Time
	mu    sync.Mutex
	at    map[string]time.Duration
}

func (tl *timeline) mark(step string, when time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if _, ok := tl.at[step]; !ok {
		tl.at[step] = when.Sub(tl.start)
	}
}

func (tl *timeline) get(step string) (time.Duration, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	d, ok := tl.at[step]
	return d, ok
}

func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	steps := make([]string, 0, len(tl.at))
	for s := range tl.at {
		steps = append(steps, s)
	}
	sort.Slice(steps, func(i, j int) bool { return tl.at[steps[i]] < tl.at[steps[j]] })
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "\n  %6.0f ms  %s", float64(tl.at[s].Microseconds())/1000, s)
	}
	return b.String()
}

// TestCleanHandover stops the active gateway's process the way a rolling update does
// (SIGTERM: its context ends, the Lease is released) with a standby ready, on real API servers
// with fake tunnel drivers and a worker node's route agent, and logs when each step happened.
// Make-before-break (handover.go): the old active keeps its tunnels until the standby has
// published the Peer with its key, and the worker's route agent moves to the new gateway only
// once its tunnels are applied. Then the last gateway stops with no standby: it does not wait
// for a successor longer than successorWait.
func TestCleanHandover(t *testing.T) {
	ew := newEastWest(t)
	ctx, info, hubc := t.Context(), ew.info, ew.hub
	east, west, eastCfg, westCfg := ew.east, ew.west, ew.eastCfg, ew.westCfg
	testenv.AddNode(t, east, "east-worker", "198.51.100.4", "10.101.2.0/24")
	l1, l2, timing := livenessListeners(t)
	gw1 := startGateway(t, eastCfg, "east-gw1", "203.0.113.1", timing(l1))
	wgw := startGateway(t, westCfg, "west-gw1", "203.0.113.17")
	routes := &timedRoutes{}
	raCtx, raCancel := context.WithCancel(context.Background())
	raDone := make(chan error, 1)
	go func() {
		raDone <- routeagent.Run(raCtx, routeagent.Options{Member: eastCfg, NodeName: "east-worker", Routes: routes, ResyncInterval: time.Hour,
			Log: testr.New(t).WithValues("routeAgent", "east-worker")})
	}()
	t.Cleanup(func() {
		raCancel()
		if err := <-raDone; err != nil {
			t.Errorf("route agent: %v", err)
		}
	})
	gw1IP, gw2IP := netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("198.51.100.3")
	eventually(t, "west tunnels to gw1 and the worker routes through gw1", func() error {
		p, err := configPeer(wgw.driver(), "east")
		if err != nil {
			return err
		}
		if p.PublicKey != gw1.driver().PublicKey() {
			return fmt.Errorf("key %s, want gw1's", p.PublicKey)
		}
		if via, _ := routes.via(); via != gw1IP {
			return fmt.Errorf("worker routes via %v", via)
		}
		return nil
	})
	eventually(t, "the ConfigMap names gw1 as the gateway", func() error {
		cm := &corev1.ConfigMap{}
		if err := east.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayConfigMapName}, cm); err != nil {
			return err
		}
		if g := routeagent.ActiveGateway(cm); g != "east-gw1" {
			return fmt.Errorf("gateway %q", g)
		}
		return nil
	})
	gw2 := startGateway(t, eastCfg, "east-gw2", "203.0.113.2", timing(l2))
	eventually(t, "the standby is ready", func() error { return wantReadyz(gw2, 200) })
	_ = west

	const (
		released   = "Lease released"
		acquired   = "Lease acquired by gw2"
		created    = "gw2's driver created"
		applied    = "gw2's first Apply"
		published  = "Peer published with gw2's key"
		remote     = "west's driver re-pointed to gw2"
		workerMove = "worker's route agent re-pointed to gw2"
		oldClosed  = "gw1's driver closed (its tunnels down)"
		returned   = "gw1's Run returned"
	)
	tl := &timeline{at: map[string]time.Duration{}}
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	polled := make(chan struct{})
	// The worker's routes as seen while gw1's tunnels were still up, and whether they ever
	// pointed at gw2 before its tunnels were applied.
	var earlyMove bool
	tl.start = time.Now()
	go func() {
		defer close(polled)
		for pollCtx.Err() == nil {
			now := time.Now()
			lease := &coordinationv1.Lease{}
			if err := east.Get(pollCtx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayLeaseName}, lease); err == nil {
				switch holderOf(lease) {
				case "":
					tl.mark(released, now)
				case "east-gw2":
					tl.mark(acquired, now)
				}
			}
			if gw1.driver().isClosed() {
				tl.mark(oldClosed, now)
			}
			d2 := gw2.driver()
			if d2 != nil {
				tl.mark(created, now)
				if _, ok := d2.last(); ok {
					tl.mark(applied, now)
				}
				p := &v1alpha1.Peer{}
				if err := hubc.Get(pollCtx, client.ObjectKey{Namespace: info.Namespace, Name: "east"}, p); err == nil && p.Spec.PublicKey == d2.PublicKey() {
					tl.mark(published, now)
				}
				if p, err := configPeer(wgw.driver(), "east"); err == nil && p.PublicKey == d2.PublicKey() {
					tl.mark(remote, now)
				}
			}
			if via, at := routes.via(); via == gw2IP {
				tl.mark(workerMove, at)
				if _, ok := tl.get(applied); !ok && (d2 == nil || func() bool { _, ok := d2.last(); return !ok }()) {
					earlyMove = true
				}
			}
			_, moved := tl.get(workerMove)
			_, closed := tl.get(oldClosed)
			if moved && closed {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	gw1.stop(t)
	tl.mark(returned, time.Now())
	select {
	case <-polled:
	case <-time.After(20 * time.Second):
		t.Fatalf("the handover did not complete: %s", tl)
	}
	t.Logf("MEASURED clean handover timeline (from gw1's stop):%s", tl)

	at := func(step string) time.Duration {
		d, ok := tl.get(step)
		if !ok {
			t.Fatalf("%s never happened: %s", step, tl)
		}
		return d
	}
	// Make-before-break: gw1 forwarded until both sides had moved to gw2.
	if at(oldClosed) < at(published) || at(oldClosed) < at(remote) || at(oldClosed) < at(workerMove) {
		t.Errorf("gw1 closed its tunnels before the handover was complete (west re-pointed, the worker moved): %s", tl)
	}
	if earlyMove || at(workerMove) < at(applied) {
		t.Errorf("the worker's route agent moved to gw2 before gw2's tunnels were applied: %s", tl)
	}
	if d := at(oldClosed) - at(published); d > handoverLinger+3*time.Second {
		t.Errorf("gw1 kept its tunnels %s after gw2 published the Peer, want about %s", d, handoverLinger)
	}
	if !gw1.driver().isClosed() {
		t.Error("gw1's driver is still open after its Run returned")
	}

	// The last gateway of east stops: nobody takes the Lease, and it does not wait longer
	// than successorWait for one.
	began := time.Now()
	gw2.stop(t)
	o := Options{RetryPeriod: 300 * time.Millisecond, HandoverGrace: DefaultHandoverGrace}
	if took := time.Since(began); took > o.successorWait()+3*time.Second {
		t.Errorf("stopping the last gateway took %s, want about successorWait (%s)", took, o.successorWait())
	}
	if !gw2.driver().isClosed() {
		t.Error("gw2's driver is still open after its Run returned")
	}
}
