package nriplugin

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// DefaultMetricsPort is where `octopus-ovn nri` serves /metrics unless told otherwise. The
// plugin runs in the node's network namespace on every node, beside the route agent
// (9477/9478) and, on gateway nodes, the gateway (9473/9474) and the gateway port (9479):
// cmd/octopus-ovn's TestNodePortsDiffer keeps them apart.
const DefaultMetricsPort = 9480

// Label values of the hook's metrics.
const (
	outcomeAttached = "attached"
	outcomeRefused  = "refused"

	stepAddressWait = "address_wait"
	stepAttach      = "attach"
)

// hookBuckets resolve the hook's p99 around the 100 ms target (a bucket ends there,
// so the share of slower starts is exact) and up to the bounds that matter when it goes
// wrong: the address wait's 1.5 s and NRI's 2 s request timeout, past which containerd fails
// the sandbox itself.
var hookBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1, 1.5, 2, 5}

// metrics are the RunPodSandbox hook's. containerd calls the hook synchronously, one sandbox
// at a time, so its duration is what the plugin adds to the start of each pod on the network;
// the steps say which part a slow hook spent its time in: waiting for the ovnmaster's address
// (the API server, the ovnmaster) or attaching (the kernel, OVS). Only pods on the network are
// observed: the others return at once and would drown the distribution. The catch-up after a
// registration (Synchronize) is not observed either: no pod's start waits for it.
type metrics struct {
	hook, step *prometheus.HistogramVec
}

func newMetrics() *metrics {
	return &metrics{
		hook: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "octopus_nri_run_pod_sandbox_seconds",
			Help: "Duration of the NRI plugin's RunPodSandbox hook for pods on the secondary network, " +
				"which is what the plugin adds to their start, by outcome (attached: the pod got net1; refused: its sandbox failed).",
			Buckets: hookBuckets,
		}, []string{"outcome"}),
		step: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "octopus_nri_run_pod_sandbox_step_seconds",
			Help: "Duration of the parts of the NRI plugin's RunPodSandbox hook for pods on the secondary network: " +
				"address_wait (reading the pod until the ovnmaster gave it an address) and attach (net1 and its OVS port; " +
				"absent when the wait failed), by the hook's outcome.",
			Buckets: hookBuckets,
		}, []string{"step", "outcome"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.hook, m.step}
}

// observe records one RunPodSandbox call for a pod on the network, which lasted took and
// returned err.
func (m *metrics) observe(took time.Duration, s steps, err error) {
	outcome := outcomeAttached
	if err != nil {
		outcome = outcomeRefused
	}
	m.hook.WithLabelValues(outcome).Observe(took.Seconds())
	m.step.WithLabelValues(stepAddressWait, outcome).Observe(s.wait.Seconds())
	if s.attachTried {
		m.step.WithLabelValues(stepAttach, outcome).Observe(s.attach.Seconds())
	}
}

// processMetrics are the ones Run's plugin records into and serves.
var processMetrics = newMetrics()

// registerMetrics adds processMetrics to controller-runtime's registry, once per process, when
// the plugin runs rather than at init: octopus-ovn links this package into every subcommand,
// and the ovnmaster, which serves that registry too, must not serve empty NRI histograms.
var registerMetrics = sync.OnceValue(func() error {
	for _, c := range Metrics() {
		if err := ctrlmetrics.Registry.Register(c); err != nil {
			return fmt.Errorf("registering the NRI plugin's metrics: %w", err)
		}
	}
	return nil
})

// Metrics are the package's collectors, as registered with controller-runtime's registry.
func Metrics() []prometheus.Collector { return processMetrics.collectors() }
