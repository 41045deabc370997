package testenv

import (
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
