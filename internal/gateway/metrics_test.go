package gateway

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// series parses a text exposition into "name{l1="v1",l2="v2"}" → value for the gateway's own
// families (octopus_*), labels sorted.
func series(t testing.TB, text []byte) map[string]float64 {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("parsing the metrics: %v\n%s", err, text)
	}
	out := map[string]float64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "octopus_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(ls)
			key := name
			if len(ls) > 0 {
				key += "{" + strings.Join(ls, ",") + "}"
			}
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// scrape GETs http://addr/metrics and parses it with series.
func scrape(t testing.TB, addr string) (map[string]float64, error) {
	t.Helper()
	body, err := testenv.Metrics(addr)
	if err != nil {
		return nil, err
	}
	return series(t, body), nil
}

func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return series(t, b.Bytes())
}

// TestMetricsObserve feeds statuses one after the other into the same metrics and checks the
// exported series after each: states as an enum, RTT only once answered, loss once probed,
// the handshake time while there is one, takeovers counted on each change to active,
// counters that stay monotonic across driver counter restarts, removed clusters' series gone.
func TestMetricsObserve(t *testing.T) {
	conn := func(id string, state v1alpha1.ConnectionState, rx, tx int64) v1alpha1.PeerConnection {
		return v1alpha1.PeerConnection{ClusterID: id, State: state, RxBytes: rx, TxBytes: tx,
			RTT:         v1alpha1.LatencyStats{Last: dur(2 * time.Millisecond), Min: dur(time.Millisecond), Avg: dur(1500 * time.Microsecond), Max: dur(4 * time.Millisecond)},
			LossPercent: 25}
	}
	answered := ProbeStats{Up: true, Answered: true}
	type step struct {
		name             string
		conns            []v1alpha1.PeerConnection
		accepted, refuse int
		probes           map[string]ProbeStats
		active           *bool
		want             map[string]float64
	}
	no, yes := false, true
	handshake := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	steps := []step{
		{name: "west connected and probed, bad refused", conns: []v1alpha1.PeerConnection{withHandshake(conn("west", v1alpha1.ConnectionConnected, 100, 200), handshake),
			{ClusterID: "bad", State: v1alpha1.ConnectionError, Message: "overlaps"}},
			accepted: 1, refuse: 1, probes: map[string]ProbeStats{"west": answered},
			want: map[string]float64{
				`octopus_gateway_active`: 1, `octopus_gateway_takeovers_total`: 1,
				`octopus_gateway_connection_state{backend="wireguard",cluster="west",state="Connected"}`:          1,
				`octopus_gateway_connection_state{backend="wireguard",cluster="west",state="Connecting"}`:         0,
				`octopus_gateway_connection_state{backend="wireguard",cluster="west",state="Error"}`:              0,
				`octopus_gateway_connection_state{backend="wireguard",cluster="bad",state="Connected"}`:           0,
				`octopus_gateway_connection_state{backend="wireguard",cluster="bad",state="Connecting"}`:          0,
				`octopus_gateway_connection_state{backend="wireguard",cluster="bad",state="Error"}`:               1,
				`octopus_gateway_connection_rtt_seconds{backend="wireguard",cluster="west",stat="last"}`:          0.002,
				`octopus_gateway_connection_rtt_seconds{backend="wireguard",cluster="west",stat="min"}`:           0.001,
				`octopus_gateway_connection_rtt_seconds{backend="wireguard",cluster="west",stat="avg"}`:           0.0015,
				`octopus_gateway_connection_rtt_seconds{backend="wireguard",cluster="west",stat="max"}`:           0.004,
				`octopus_gateway_connection_loss_ratio{backend="wireguard",cluster="west"}`:                       0.25,
				`octopus_gateway_connection_last_handshake_timestamp_seconds{backend="wireguard",cluster="west"}`: float64(handshake.Unix()),
				`octopus_gateway_connection_rx_bytes_total{backend="wireguard",cluster="west"}`:                   100,
				`octopus_gateway_connection_tx_bytes_total{backend="wireguard",cluster="west"}`:                   200,
				`octopus_gateway_connection_rx_bytes_total{backend="wireguard",cluster="bad"}`:                    0,
				`octopus_gateway_connection_tx_bytes_total{backend="wireguard",cluster="bad"}`:                    0,
				`octopus_gateway_peers{result="accepted"}`:                                                        1,
				`octopus_gateway_peers{result="refused"}`:                                                         1,
			}},
		{name: "bad gone; west's peer replaced: counters restart below the last value, probes not answered yet",
			conns: []v1alpha1.PeerConnection{conn("west", v1alpha1.ConnectionConnecting, 30, 250)}, accepted: 1,
			probes: map[string]ProbeStats{"west": {}},
			want: map[string]float64{
				`octopus_gateway_active`: 1, `octopus_gateway_takeovers_total`: 1,
				`octopus_gateway_connection_state{backend="wireguard",cluster="west",state="Connected"}`:  0,
				`octopus_gateway_connection_state{backend="wireguard",cluster="west",state="Connecting"}`: 1,
				`octopus_gateway_connection_state{backend="wireguard",cluster="west",state="Error"}`:      0,
				`octopus_gateway_connection_loss_ratio{backend="wireguard",cluster="west"}`:               0.25,
				// rx restarted: 100 before + 30 since; tx grew by 50.
				`octopus_gateway_connection_rx_bytes_total{backend="wireguard",cluster="west"}`: 130,
				`octopus_gateway_connection_tx_bytes_total{backend="wireguard",cluster="west"}`: 250,
				`octopus_gateway_peers{result="accepted"}`:                                      1,
				`octopus_gateway_peers{result="refused"}`:                                       0,
			}},
		{name: "not probed (no prober): neither RTT nor loss", conns: []v1alpha1.PeerConnection{conn("west", v1alpha1.ConnectionConnected, 40, 250)}, accepted: 1,
			want: map[string]float64{
				`octopus_gateway_active`: 1, `octopus_gateway_takeovers_total`: 1,
				`octopus_gateway_connection_state{backend="wireguard",cluster="west",state="Connected"}`:  1,
				`octopus_gateway_connection_state{backend="wireguard",cluster="west",state="Connecting"}`: 0,
				`octopus_gateway_connection_state{backend="wireguard",cluster="west",state="Error"}`:      0,
				`octopus_gateway_connection_rx_bytes_total{backend="wireguard",cluster="west"}`:           140,
				`octopus_gateway_connection_tx_bytes_total{backend="wireguard",cluster="west"}`:           250,
				`octopus_gateway_peers{result="accepted"}`:                                                1,
				`octopus_gateway_peers{result="refused"}`:                                                 0,
			}},
		{name: "no longer active: only the active gauge and the takeovers are left", active: &no,
			want: map[string]float64{`octopus_gateway_active`: 0, `octopus_gateway_takeovers_total`: 1}},
		{name: "active again: a second takeover", active: &yes,
			want: map[string]float64{`octopus_gateway_active`: 1, `octopus_gateway_takeovers_total`: 2}},
		{name: "still active: no takeover", active: &yes,
			want: map[string]float64{`octopus_gateway_active`: 1, `octopus_gateway_takeovers_total`: 2}},
	}
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.setActive(true)
	for _, s := range steps {
		if s.active != nil {
			m.setActive(*s.active)
		} else {
			m.observe(v1alpha1.BackendWireGuard, v1alpha1.PeerStatus{Connections: s.conns}, s.accepted, s.refuse, s.probes)
		}
		if got := gather(t, reg); fmt.Sprint(got) != fmt.Sprint(s.want) {
			t.Errorf("%s:\n got %v\nwant %v", s.name, got, s.want)
		}
	}
}

func withHandshake(c v1alpha1.PeerConnection, at time.Time) v1alpha1.PeerConnection {
	t := metav1.NewTime(at)
	c.LastHandshake = &t
	return c
}

func TestGrowth(t *testing.T) {
	for _, c := range []struct{ prev, cur, want int64 }{
		{0, 0, 0}, {0, 10, 10}, {10, 25, 15}, {25, 25, 0}, {25, 7, 7}, {25, 0, 0},
	} {
		if got := growth(c.prev, c.cur); got != c.want {
			t.Errorf("growth(%d, %d) = %d, want %d", c.prev, c.cur, got, c.want)
		}
	}
}
