package testenv

import (
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
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: the test ended while waiting: %v", what, err)
		case <-time.After(interval):
		}
	}
}
