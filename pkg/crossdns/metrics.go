package crossdns

import (
	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Query results, the values of the "result" label.
const (
	resultAnswer      = "answer"
	resultNoData      = "nodata"
	resultNXDomain    = "nxdomain"
	resultServFail    = "servfail" // index not synced yet
	resultRefused     = "refused"  // another class, or a zone transfer
	resultFormErr     = "formerr"
	resultFallthrough = "fallthrough"
)

// The metrics are registered with the default registry, which CoreDNS's prometheus plugin
// serves.
var (
	queries = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: pluginName, Name: "queries_total",
		Help: "Queries answered by crossdns, by query type and result.",
	}, []string{"type", "result"})
	indexServices = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: pluginName, Name: "index_services",
		Help: "Imported services that have names in the index.",
	})
	indexEndpoints = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: pluginName, Name: "index_addresses",
		Help: "Addresses (clusterset IPs and ready headless endpoints) in the index.",
	})
	indexLag = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace: plugin.Namespace, Subsystem: pluginName, Name: "index_update_lag_seconds",
		Help: "Time from an informer event to the changed records being served.",
		// From 100 µs: the update itself is usually far below a millisecond.
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	})
)

func countQuery(qtype uint16, result string) {
	t, ok := dns.TypeToString[qtype]
	if !ok {
		t = "other" // keep the label's cardinality bounded whatever clients send
	}
	queries.WithLabelValues(t, result).Inc()
}

// Metrics are the plugin's collectors, registered with the default registry that CoreDNS's
// prometheus plugin serves (octopus-dns: port 9153). Their names follow CoreDNS's convention
// for plugins (coredns_<plugin>_…), not Octopus's octopus_ prefix: they are scraped and
// charted with CoreDNS's own.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{queries, indexServices, indexEndpoints, indexLag}
}
