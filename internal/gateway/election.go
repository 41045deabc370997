package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// election is the Lease that elects the active gateway and what the fast takeover
// (takeover.go) needs to watch it and probe its holder. It knows nothing of what the active
// gateway does (active.go).
type election struct {
	// lock is the Lease; leaseNamespace and leaseName name it.
	lock                      resourcelock.Interface
	leaseNamespace, leaseName string
	// cs watches and writes the Lease (and, for a member's gateway, reads the holder's Node).
	cs kubernetes.Interface
	// locate finds where the holder answers liveness probes.
	locate locator
	// ready is told when this gateway can take the Lease over at once: it watches the Lease
	// (fast takeover), or it runs an elector (without). Optional.
	ready *readiness
}

// readiness is the gateway's /readyz: ready once it takes part in the election well enough to
// take over at once. A rolling update of the gateways (one node at a time) waits for it before
// it stops the next old pod, so a restarted gateway is a standby that can take the active
// role over by the time the active one goes, not a process still starting.
type readiness struct{ ok atomic.Bool }

func (r *readiness) set() {
	if r != nil {
		r.ok.Store(true)
	}
}

func (r *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if !r.ok.Load() {
		http.Error(w, "not yet taking part in the gateway election (waiting for the hub credential or the Lease watch)", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// elect takes part in the election until ctx ends or this gateway stops being the active one,
// with fast takeover when o.LivenessPort is set. lead runs while this gateway holds the Lease;
// its context ends when the Lease is lost, and when lead returns the Lease is released. elect
// returns nil when ctx is done, and lead's error, or errLostLease, when this gateway stopped
// being the active one (Run then takes part again, standing by).
func elect(ctx context.Context, o Options, e election, lead func(context.Context) error) error {
	var activeErr error
	// activeDone is closed when lead has returned: the elector may return first when it
	// fails to renew, and returning before lead did (the active gateway closing its driver)
	// would leave the device and its routes behind.
	activeDone := make(chan struct{})
	var acquired atomic.Bool
	leCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	lock := &trackingLock{Interface: e.lock, onDisplaced: func(holder string) {
		// A standby took over while we could not renew (takeover.go): stop now rather than
		// keep acting until RenewDeadline runs out.
		o.Log.Info("Another gateway took the Lease over; stopping being the active gateway", "node", o.NodeName, "holder", holder)
		cancel()
	}}
	var tk *takeover
	if o.LivenessPort != 0 {
		tk = newTakeover(o, e.cs, e.locate, lock, e.leaseNamespace, e.leaseName)
		tk.watching = e.ready.set
		go tk.run(leCtx)
	} else {
		e.ready.set()
	}
	// Each round runs an elector until it leads or a takeover (or a released Lease) kicks
	// it: client-go retries acquiring only every RetryPeriod plus up to 120 % jitter, while a
	// fresh elector tries at once, and finds itself the holder after a takeover.
	for {
		acqCtx, acqCancel := context.WithCancel(leCtx)
		var kicked atomic.Bool
		if tk != nil {
			tk.setKick(func() {
				lock.cancelUnlessLeading(func() {
					kicked.Store(true) // before the elector can see the cancellation
					acqCancel()
				})
			})
		}
		err := runElector(acqCtx, o, e.leaseName, lock, &acquired, func(ctx context.Context) {
			defer close(activeDone)
			activeErr = lead(ctx)
			cancel() // release the Lease so that a standby takes over
		})
		acqCancel()
		if err != nil {
			return err
		}
		if !kicked.Load() || acquired.Load() || leCtx.Err() != nil {
			break
		}
	}
	if tk != nil {
		tk.setKick(nil)
	}
	// The elector runs OnStartedLeading in a goroutine and may return (failing to renew)
	// before it: wait for it whenever it was started. It was, unless we are shutting down:
	// acquiring only stops when leCtx ends (or a kick, which starts another round), which
	// before leadership only ctx does.
	if ctx.Err() == nil || acquired.Load() {
		<-activeDone
	}
	if ctx.Err() != nil {
		return nil
	}
	if activeErr != nil {
		return activeErr
	}
	return errLostLease
}

// runElector runs one client-go elector on lock until ctx ends or it stops leading.
func runElector(ctx context.Context, o Options, name string, lock resourcelock.Interface, acquired *atomic.Bool, lead func(context.Context)) error {
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
		// Hand over at once on a clean shutdown instead of after LeaseDuration.
		ReleaseOnCancel: true,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				acquired.Store(true)
				lead(ctx)
			},
			OnStoppedLeading: func() {
				if acquired.Load() {
					o.Log.Info("Stopped being the active gateway", "node", o.NodeName)
				}
			},
			OnNewLeader: func(id string) {
				if id != o.NodeName {
					o.Log.Info("Standing by: another node is the active gateway", "active", id)
					removeStaleNAT(o)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("configuring the gateway election: %w", err)
	}
	elector.Run(ctx)
	return nil
}
