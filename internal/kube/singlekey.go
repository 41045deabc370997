package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// SingleKeyController is a controller-runtime controller for a component that reconciles one
// piece of local state as a whole (a node's routes, a gateway's tunnels) rather than one
// object per request: every event of its watched kinds requests the same Trigger, so a burst
// of events becomes one reconcile (the workqueue holds a key once), and the reconciler reads
// everything it needs from the cache. A reconciler's RequeueAfter is its periodic resync and
// its retry after a failure. One worker runs the requests, so the reconciler never runs
// concurrently with itself, whichever request it serves.
type SingleKeyController struct {
	// Name names the controller in logs and in controller-runtime's metrics. Several
	// controllers of one name may run in one process (tests run several agents).
	Name string
	// Cache serves the watched kinds. Run starts it and waits, as long as ctx allows, until
	// it has synced; the first reconcile follows at once.
	Cache cache.Cache
	// Watches are the kinds whose events request Trigger.
	Watches []Watch
	// Trigger is the request of every event. It is also requested once at the start, so the
	// first reconcile does not wait for an event (there may be none: nothing watched exists
	// yet).
	Trigger reconcile.Request
	// Later are more requests, each made once, its After from the start: a periodic task
	// that then requeues itself. Optional.
	Later []DelayedRequest
	// Reconciler serves the requests.
	Reconciler reconcile.Reconciler
	// Log receives the controller's own lines. Optional.
	Log logr.Logger
}

// DelayedRequest is a request made After a while.
type DelayedRequest struct {
	reconcile.Request
	After time.Duration
}

// Watch is one watched kind, with the predicates its events must pass to request Trigger.
type Watch struct {
	Object     client.Object
	Predicates []predicate.Predicate
}

// ErrNotSynced is returned by Run when the cache could not sync before ctx ended.
var ErrNotSynced = errors.New("the informers did not sync")

// Run starts the cache and the controller and returns when ctx is done (nil), when the cache
// stops on its own (its error), or when the controller cannot start. A reconcile in progress
// finishes before Run returns.
func (s SingleKeyController) Run(ctx context.Context) error {
	if s.Log.GetSink() == nil {
		s.Log = logr.Discard()
	}
	c, err := controller.NewUnmanaged(s.Name, controller.Options{
		Reconciler:              s.Reconciler,
		MaxConcurrentReconciles: 1,
		SkipNameValidation:      ptr.To(true),
		Logger:                  s.Log,
	})
	if err != nil {
		return fmt.Errorf("creating the %s controller: %w", s.Name, err)
	}
	trigger := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{s.Trigger}
	})
	for _, w := range s.Watches {
		// The informers are made before the cache starts, so that it starts them all and
		// WaitForCacheSync below waits for them. A plain informer source rather than
		// source.Kind: Kind waits again for its handler to have seen the initial list, polling
		// every 100 ms, which would delay the first reconcile (on a gateway's takeover, the
		// publishing of its Peer) for nothing: the reconciler reads the synced cache, and the
		// initial list's events only request the Trigger the start requests anyway.
		inf, err := s.Cache.GetInformer(ctx, w.Object)
		if err != nil {
			return fmt.Errorf("watching %T: %w", w.Object, err)
		}
		if err := c.Watch(&source.Informer{Informer: inf, Handler: trigger, Predicates: w.Predicates}); err != nil {
			return fmt.Errorf("watching %T: %w", w.Object, err)
		}
	}
	initial := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(s.Trigger)
		for _, r := range s.Later {
			q.AddAfter(r.Request, r.After)
		}
		return nil
	})
	if err := c.Watch(initial); err != nil {
		return fmt.Errorf("requesting the first reconcile: %w", err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	cacheErr := make(chan error, 1)
	go func() { cacheErr <- s.Cache.Start(runCtx) }()
	// Without a timeout: the component has nothing better to do than wait for its API server.
	if !s.Cache.WaitForCacheSync(runCtx) {
		cancel()
		return errors.Join(ErrNotSynced, context.Cause(ctx), <-cacheErr)
	}
	ctrlErr := make(chan error, 1)
	go func() { ctrlErr <- c.Start(runCtx) }()
	select {
	case err := <-cacheErr:
		cancel()
		startErr := <-ctrlErr // the worker finishes its reconcile first
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("the informers stopped")
		} else {
			err = fmt.Errorf("the informers stopped: %w", err)
		}
		return errors.Join(err, startErr)
	case err := <-ctrlErr:
		cancel()
		return errors.Join(err, <-cacheErr)
	}
}
