package nriplugin

import (
	"errors"
	"net/http"
	"sync/atomic"

	"github.com/octopus-mcs/octopus/internal/metricsserver"
)

// DefaultHealthPort is where `octopus-ovn nri` answers /healthz and /readyz unless told
// otherwise: on the node's address, next to DefaultMetricsPort and apart from the other
// components there (cmd/octopus-ovn's TestNodePortsDiffer).
const DefaultHealthPort = 9481

// The readiness while there is no registration.
var (
	// errNotRegistered: before the first attempt.
	errNotRegistered = errors.New("not registered with containerd's NRI yet")
	// errRegistering: an attempt is under way, complete when containerd has synchronized the
	// plugin.
	errRegistering = errors.New("registering with containerd's NRI")
)

// registration is what /readyz reports: whether containerd sends the plugin its sandboxes'
// events. The process running says nothing of it: until containerd has synchronized the
// plugin, and whenever the connection is lost (a containerd restart, a call that overran NRI's
// timeout), pods start without net1 (Synchronize gives it to them late). A rolling update of
// the DaemonSet then waits for the new plugin to be registered before it moves to the next
// node, and `kubectl get pods` shows the nodes whose pods would start without it.
type registration struct {
	// err is nil while registered, else why not; nil before the first set: errNotRegistered.
	err atomic.Pointer[error]
}

func (r *registration) set(err error) { r.err.Store(&err) }

// synchronized completes the attempt under way (errRegistering). A connection lost since
// stays lost: Synchronize may return after containerd gave up waiting for it (its
// registration timeout, on a loaded node), and that connection is closed.
func (r *registration) synchronized() {
	cur := r.err.Load()
	if cur != nil && errors.Is(*cur, errRegistering) {
		var registered error
		r.err.CompareAndSwap(cur, &registered)
	}
}

func (r *registration) ready() error {
	err := r.err.Load()
	if err == nil {
		return errNotRegistered
	}
	return *err
}

// Ready is nil while the plugin is registered with containerd: containerd synchronized it
// (Synchronize, after which it sends it the sandboxes' events) and the connection is open.
func (p *Plugin) Ready() error { return p.registration.ready() }

// HealthHandler answers /healthz with 200 while the process serves, and /readyz with 200 while
// the plugin is registered with containerd, 503 with the reason otherwise.
func (p *Plugin) HealthHandler() http.Handler {
	return metricsserver.HealthHandler(p.Ready)
}
