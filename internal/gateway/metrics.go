package gateway

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// DefaultMetricsPort is where `octopus-agent gateway` serves /metrics unless told otherwise.
// The gateway runs in the node's network namespace (hostNetwork), so the port must not clash
// with the node's usual daemons (node-exporter 9100, kube-proxy 10249/10256, kubelet 10250,
// CoreDNS 9153, the OpenTelemetry exporter's customary 9464); no other Octopus component
// listens on it.
const DefaultMetricsPort = 9473

// Label values of the metrics.
const (
	peersAccepted = "accepted"
	peersRefused  = "refused"
)

var (
	connectionStates = []v1alpha1.ConnectionState{v1alpha1.ConnectionConnected, v1alpha1.ConnectionConnecting, v1alpha1.ConnectionError}
	rttStats         = []string{"last", "min", "avg", "max"}
)

// metrics are the gateway's Prometheus metrics. They are set only by observe, from the Peer
// status that reportStatus computes, so the metrics and the status never disagree.
type metrics struct {
	active    prometheus.Gauge
	takeovers prometheus.Counter
	state     *prometheus.GaugeVec
	handshake *prometheus.GaugeVec
	rtt       *prometheus.GaugeVec
	loss      *prometheus.GaugeVec
	rx, tx    *prometheus.CounterVec
	peers     *prometheus.GaugeVec

	mu sync.Mutex
	// isActive is what setActive last recorded, so that only a change to active counts as a
	// takeover.
	isActive bool
	// last is, per remote cluster, the byte counters of the previous observation: the
	// Prometheus counters grow by the difference, so that they stay monotonic when the
	// driver's counters restart from zero (the remote gateway failed over and its tunnel
	// peer was replaced).
	last map[string]byteCounts
}

type byteCounts struct{ rx, tx int64 }

// newMetrics creates the gateway's metrics in reg, with the Go runtime's and the process's.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := unregisteredMetrics()
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Metrics are the collectors of a gateway's registry, fresh ones: each Run has its own.
func Metrics() []prometheus.Collector { return unregisteredMetrics().collectors() }

// collectors are m's, with the Go runtime's and the process's.
func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.active, m.takeovers, m.state, m.handshake, m.rtt, m.loss, m.rx, m.tx, m.peers,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
}

func unregisteredMetrics() *metrics {
	conn := []string{"cluster", "backend"}
	m := &metrics{
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "octopus_gateway_active",
			Help: "1 while this gateway holds the cluster's gateway Lease (is the active gateway), 0 while it stands by."}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{Name: "octopus_gateway_takeovers_total",
			Help: "Times this gateway became the cluster's active gateway (took the gateway Lease); summed over a cluster's gateways, its failovers and restarts."}),
		handshake: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "octopus_gateway_connection_last_handshake_timestamp_seconds",
			Help: "Unix time of the last completed WireGuard handshake with a remote cluster's gateway (absent for vxlan, and until the first handshake)."}, conn),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "octopus_gateway_connection_state",
			Help: "State of the connection to a remote cluster's gateway, as in the Peer status: 1 for the current state, 0 for the others."},
			append(conn, "state")),
		rtt: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "octopus_gateway_connection_rtt_seconds",
			Help: "Round-trip time of the health probes through the tunnel to a remote cluster's gateway (stat: last, min, avg, max of the recent probes)."},
			append(conn, "stat")),
		loss: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "octopus_gateway_connection_loss_ratio",
			Help: "Share of the recent health probes to a remote cluster's gateway that got no answer, 0 to 1."}, conn),
		rx: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "octopus_gateway_connection_rx_bytes_total",
			Help: "Bytes received through the tunnel from a remote cluster."}, conn),
		tx: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "octopus_gateway_connection_tx_bytes_total",
			Help: "Bytes sent through the tunnel to a remote cluster."}, conn),
		peers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "octopus_gateway_peers",
			Help: "Number of other clusters' Peers this gateway tunnels to (result=accepted) or refused (result=refused, see the PeersAccepted condition)."},
			[]string{"result"}),
		last: map[string]byteCounts{},
	}
	return m
}

// setActive records whether this gateway is the active one; becoming active counts a
// takeover. Becoming inactive drops every connection's series: the driver is closed, so there
// are no connections any more.
func (m *metrics) setActive(active bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := 0.0
	if active {
		v = 1
		if !m.isActive {
			m.takeovers.Inc()
		}
	}
	m.isActive = active
	m.active.Set(v)
	if !active {
		for _, vec := range []interface{ Reset() }{m.state, m.handshake, m.rtt, m.loss, m.rx, m.tx, m.peers} {
			vec.Reset()
		}
		clear(m.last)
	}
}

// observe sets the connection metrics from st, the status BuildStatus computed from the same
// probes; a cluster absent from st loses its series. RTT is only exported once a probe was
// answered and loss once the cluster is probed: before that the status's zeros mean "not
// measured", which a gauge cannot say.
func (m *metrics) observe(backend v1alpha1.Backend, st v1alpha1.PeerStatus, accepted, refused int, probes map[string]ProbeStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	b := string(backend)
	for _, c := range st.Connections {
		id := c.ClusterID
		seen[id] = true
		for _, s := range connectionStates {
			v := 0.0
			if c.State == s {
				v = 1
			}
			m.state.WithLabelValues(id, b, string(s)).Set(v)
		}
		if c.LastHandshake != nil {
			m.handshake.WithLabelValues(id, b).Set(float64(c.LastHandshake.Unix()))
		} else {
			m.handshake.DeletePartialMatch(prometheus.Labels{"cluster": id})
		}
		probe, probed := probes[id]
		if probed && probe.Answered {
			for i, d := range []time.Duration{c.RTT.Last.Duration, c.RTT.Min.Duration, c.RTT.Avg.Duration, c.RTT.Max.Duration} {
				m.rtt.WithLabelValues(id, b, rttStats[i]).Set(d.Seconds())
			}
		} else {
			m.rtt.DeletePartialMatch(prometheus.Labels{"cluster": id})
		}
		if probed {
			m.loss.WithLabelValues(id, b).Set(float64(c.LossPercent) / 100)
		} else {
			m.loss.DeletePartialMatch(prometheus.Labels{"cluster": id})
		}
		prev := m.last[id]
		m.rx.WithLabelValues(id, b).Add(float64(growth(prev.rx, c.RxBytes)))
		m.tx.WithLabelValues(id, b).Add(float64(growth(prev.tx, c.TxBytes)))
		m.last[id] = byteCounts{rx: c.RxBytes, tx: c.TxBytes}
	}
	// A removed Peer's series go. Every cluster with series has an entry in last.
	for id := range m.last {
		if seen[id] {
			continue
		}
		for _, vec := range []interface {
			DeletePartialMatch(prometheus.Labels) int
		}{m.state, m.handshake, m.rtt, m.loss, m.rx, m.tx} {
			vec.DeletePartialMatch(prometheus.Labels{"cluster": id})
		}
		delete(m.last, id)
	}
	m.peers.WithLabelValues(peersAccepted).Set(float64(accepted))
	m.peers.WithLabelValues(peersRefused).Set(float64(refused))
}

// growth is how much a driver counter grew from prev to cur. A counter below its previous
// value was restarted (a new tunnel peer or driver): all of cur is new traffic.
func growth(prev, cur int64) int64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}
