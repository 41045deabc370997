package testenv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// pollInterval is how often Eventually calls its function: often enough that a test waits
// little past the moment its condition holds, rarely enough not to load the API servers a
// check reads.
const pollInterval = 100 * time.Millisecond

// Eventually calls f until it returns nil, every pollInterval and at least once. If f still
// fails after timeout, or the test's context ends first, it fails the test with what and f's
// last error. It is the one poller of the repository's tests: give f what a check needs
// (a context bounded by timeout, if it makes calls that could hang).
func Eventually(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	EventuallyEvery(t, pollInterval, timeout, what, f)
}

// EventuallyEvery is Eventually polling every interval: slower where each call is costly (the
// lab's checks exec `ip` in namespaces and read several API servers), faster where a test
// measures how soon something happens.
func EventuallyEvery(t testing.TB, interval, timeout time.Duration, what string, f func() error) {
	t.Helper()
	if err := Poll(t, interval, timeout, f); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Poll calls f every interval until it returns nil, and returns nil then; or, once timeout
// passed or the test's context ended, f's last error, saying which. For a check whose
// failure the caller reports its own way (EventuallyEvery fails the test).
func Poll(t testing.TB, interval, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s: %w", timeout, err)
		}
		select {
		case <-t.Context().Done():
			return fmt.Errorf("the test ended while waiting: %w", err)
		case <-time.After(interval):
		}
	}
}

// EventuallyCheck is Eventually for checks that say what is still wrong ("" when nothing is),
// with a context that ends a little after the timeout: a check that hangs still ends, and the
// last one before the timeout still reports what is wrong rather than the context's end.
func EventuallyCheck(t testing.TB, timeout time.Duration, what string, check func(ctx context.Context) string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout+10*time.Second)
	defer cancel()
	Eventually(t, timeout, what, func() error {
		if msg := check(ctx); msg != "" {
			return errors.New(msg)
		}
		return nil
	})
}

// Holds is a condition as Eventually's f: nil once cond holds, else an error saying what is
// awaited.
func Holds(what string, cond func() bool) func() error {
	return func() error {
		if !cond() {
			return errors.New("still waiting for " + what)
		}
		return nil
	}
}
