package cluster

import (
	"testing"
	"time"
)

// waitFor polls cond until it holds or 30 s pass; admission policy changes take a moment to be
// picked up by the API server.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
