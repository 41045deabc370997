package cluster

import (
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/testenv"
)

// waitFor polls cond until it holds or 30 s pass; admission policy changes take a moment to be
// picked up by the API server.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.EventuallyEvery(t, 200*time.Millisecond, 30*time.Second, "waiting for "+what, testenv.Holds(what, cond))
}
