package heartbeat

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// lastSuccess is when this agent last renewed its cluster's heartbeat Lease. A timestamp, not
// an age: Prometheus computes the age (time() - value), and the value stays true when scrapes
// stop. Registered with controller-runtime's registry, which the agent's controller serves; one
// series per process (the cluster label tells clusters apart once scraped together).
var lastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "octopus_heartbeat_last_success_timestamp_seconds",
	Help: "Unix time at which this agent last renewed its cluster's heartbeat Lease on the hub.",
}, []string{"cluster"})

func init() { ctrlmetrics.Registry.MustRegister(Metrics()...) }

// Metrics are the package's collectors, as registered with controller-runtime's registry.
func Metrics() []prometheus.Collector { return []prometheus.Collector{lastSuccess} }
