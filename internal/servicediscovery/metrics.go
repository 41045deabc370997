package servicediscovery

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// propagationSeconds is the export → import propagation time: from a ServiceExport's creation
// in the exporting cluster (the creation time its hub record carries, see publish.go) to this
// cluster's import holding that cluster's endpoints. It is registered with controller-runtime's
// registry, which the agent's controller serves. The label is the exporting cluster: bounded by
// the cluster set, never by services.
var propagationSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name: "octopus_servicediscovery_propagation_seconds",
	Help: "Time from a ServiceExport's creation in cluster to its endpoints being imported here. " +
		"Creation times have a resolution of one second and come from the exporting cluster's clock.",
	// The path takes about 200 ms on a healthy set (docs/benchmarks.md, "MCS propagation
	// latency"), but the creation time is truncated to the second, so most observations fall in
	// 0.2–1.2 s; the upper buckets tell a lagging import (hub outage, a backlog) apart.
	Buckets: []float64{0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30, 60, 300},
}, []string{"cluster"})

// clusterHeartbeat is, per cluster of the set, the renewal time of its heartbeat Lease on the
// hub as this agent's hub cache last saw it (liveness.go): every agent tells of every cluster,
// so a cluster whose agent is down, and cannot be scraped, still shows as not heartbeating.
var clusterHeartbeat = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "octopus_hub_heartbeat_renew_timestamp_seconds",
	Help: "Unix time of the last renewal of a cluster's heartbeat Lease on the hub, as this agent sees it.",
}, []string{"cluster"})

func init() { ctrlmetrics.Registry.MustRegister(Metrics()...) }

// Metrics are the package's collectors, as registered with controller-runtime's registry.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{propagationSeconds, clusterHeartbeat}
}
