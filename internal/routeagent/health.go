package routeagent

import (
	"errors"
	"net/http"
	"sync/atomic"

	"github.com/octopus-mcs/octopus/internal/metricsserver"
)

// DefaultHealthPort is where `octopus-agent route-agent` answers its probes (/healthz,
// /readyz) unless told otherwise: distinct from every other port a gateway node's components
// listen on (cmd/octopus-agent's TestNodePortsDiffer), since the route agent runs in the
// node's network namespace.
const DefaultHealthPort = 9478

// health is what the probes report: the process serves (/healthz), and its last attempt to
// apply the node's routes succeeded (/readyz). A node whose route agent is not ready lacks
// routes to remote clusters, or has stale ones; `kubectl get pods` shows it.
type health struct {
	// applied holds the error of the last Apply (nil after a success); before the first one,
	// errNotApplied.
	applied atomic.Pointer[error]
}

var errNotApplied = errors.New("the node's routes were not applied yet")

func newHealth() *health {
	h := &health{}
	h.set(errNotApplied)
	return h
}

func (h *health) set(err error) { h.applied.Store(&err) }

func (h *health) ready() error { return *h.applied.Load() }

// handler answers /healthz with 200 while the process serves, and /readyz with 200 once the
// routes were applied and 503 with the reason otherwise.
func (h *health) handler() http.Handler {
	return metricsserver.HealthHandler(h.ready)
}
