package routeagent

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// DefaultMetricsPort is where `octopus-agent route-agent` serves /metrics unless told
// otherwise. A gateway node runs the route agent and the gateway in its network namespace, so
// it must differ from the gateway's ports (its metrics, 9473, and liveness, 9474; checked by
// cmd/octopus-agent's TestNodePortsDiffer): sharing 9474 made whichever started second fail.
const DefaultMetricsPort = 9477

// The route agent's metrics, in controller-runtime's registry next to its controller's
// (controller="route-agent"). Its reconciler retries a failed Apply itself instead of returning
// the error (agent.go), so controller-runtime's reconcile errors do not count those: these do.
var (
	applyFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "octopus_routeagent_apply_failures_total",
		Help: "Times the route agent failed to apply the node's routes to remote clusters (retried after a second).",
	})
	routesApplied = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "octopus_routeagent_routes",
		Help: "Routes to remote clusters the route agent last applied on this node.",
	})
)

// registerMetrics adds the metrics to controller-runtime's registry, once per process, when a
// route agent runs rather than at init: the octopus-agent binary links this package into every
// subcommand, and a controller process must not serve a route count of 0.
var registerMetrics = sync.OnceValue(func() error {
	for _, c := range Metrics() {
		if err := ctrlmetrics.Registry.Register(c); err != nil {
			return fmt.Errorf("registering the route agent's metrics: %w", err)
		}
	}
	return nil
})

// Metrics are the package's collectors, as registered with controller-runtime's registry.
func Metrics() []prometheus.Collector { return []prometheus.Collector{applyFailures, routesApplied} }
