package diagnose

import (
	"context"
	"sync"
	"time"
)

// fact is something several checks need (the hub's Peers, a cluster's credential, an API
// server's clock offset): fetched once, on first use, and shared by the checks that run
// concurrently. It is fetched under the run's context with a timeout of its own, not under the
// asking check's, so that a check giving up does not fail it for the others.
type fact[T any] struct {
	once    sync.Once
	done    chan struct{}
	val     T
	err     error
	fetch   func(ctx context.Context) (T, error)
	run     context.Context
	timeout time.Duration
}

func newFact[T any](run context.Context, timeout time.Duration, fetch func(context.Context) (T, error)) *fact[T] {
	return &fact[T]{done: make(chan struct{}), fetch: fetch, run: run, timeout: timeout}
}

// get returns the value, fetching it on the first call; it stops waiting when ctx ends.
func (f *fact[T]) get(ctx context.Context) (T, error) {
	f.once.Do(func() {
		go func() {
			defer close(f.done)
			fctx, cancel := context.WithTimeout(f.run, f.timeout)
			defer cancel()
			f.val, f.err = f.fetch(fctx)
		}()
	})
	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
