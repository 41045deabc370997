package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

func TestCollectAndRenderConnections(t *testing.T) {
	ms := func(f float64) metav1.Duration {
		return metav1.Duration{Duration: time.Duration(f * float64(time.Millisecond))}
	}
	peers := []v1alpha1.Peer{
		{Spec: v1alpha1.PeerSpec{ClusterID: "west", Backend: v1alpha1.BackendWireGuard, Endpoint: v1alpha1.PeerEndpoint{PrivateIP: "203.0.113.17", Port: 4500}},
			Status: v1alpha1.PeerStatus{Driver: "wireguard-go", Connections: []v1alpha1.PeerConnection{
				{ClusterID: "east", State: v1alpha1.ConnectionConnected, IPFamilies: []string{"IPv4"},
					FamilyMessage: "IPv6 is not offered between west and east: cluster east advertises no IPv6 subnet", RTT: v1alpha1.LatencyStats{Last: ms(1), Min: ms(0.5), Avg: ms(1.2), Max: ms(3)}, RxBytes: 2048, TxBytes: 5 << 20},
				{ClusterID: "bad", State: v1alpha1.ConnectionError, Message: "cluster bad is not connected: 10.1.0.0/16 overlaps"},
				{ClusterID: "south", Via: "hub", State: v1alpha1.ConnectionConnected, IPFamilies: []string{"IPv4", "IPv6"}},
			}}},
		{Spec: v1alpha1.PeerSpec{ClusterID: "east", Endpoint: v1alpha1.PeerEndpoint{PrivateIP: "203.0.113.1", PublicIP: "198.51.100.7", Port: 4500}},
			Status: v1alpha1.PeerStatus{Driver: "wireguard-go", Connections: []v1alpha1.PeerConnection{
				{ClusterID: "west", State: v1alpha1.ConnectionConnecting, Message: "waiting for the first answer to health probes", LossPercent: 100},
			}}},
	}
	conns := CollectConnections(peers)
	var order []string
	for _, c := range conns {
		order = append(order, c.Cluster+">"+c.Peer+"@"+c.Endpoint)
	}
	if got, want := strings.Join(order, " "), "east>west@203.0.113.17:4500 west>bad@ west>east@198.51.100.7:4500 west>south@"; got != want {
		t.Fatalf("connections %s, want %s", got, want)
	}
	if conns[0].Backend != v1alpha1.BackendWireGuard {
		t.Errorf("a Peer without backend is wireguard, got %q", conns[0].Backend)
	}

	var out bytes.Buffer
	if err := renderConnections(&out, conns, len(peers)); err != nil {
		t.Fatal(err)
	}
	// Column widths depend on the content: compare with runs of spaces collapsed.
	table := strings.Join(strings.Fields(strings.ReplaceAll(out.String(), "\n", " | ")), " ")
	for _, want := range []string{
		"CLUSTER PEER BACKEND DRIVER ENDPOINT STATE FAMILIES RTT AVG RTT MIN/MAX LOSS RX TX",
		"west east wireguard wireguard-go 198.51.100.7:4500 Connected IPv4 1.2ms 500µs/3ms 0% 2.0 KiB 5.0 MiB",
		"Error (cluster bad is not connected: 10.1.0.0/16 overlaps)",
		"Connecting (waiting for the first answer to health probes)",
		"west south wireguard wireguard-go via hub Connected IPv4,IPv6",
		"west > east: IPv6 is not offered between west and east: cluster east advertises no IPv6 subnet",
		"2 of 4 connections up.",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if err := renderConnections(&out, nil, 0); err != nil || !strings.Contains(out.String(), "octopus-agent gateway") {
		t.Errorf("empty table: %q, %v", out.String(), err)
	}

	b, err := json.Marshal(conns[2])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"cluster":"west"`, `"peer":"east"`, `"avg":"1.2ms"`, `"txBytes":5242880`, `"ipFamilies":["IPv4"]`, `"familyMessage":"IPv6 is not offered`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("json %s lacks %s", b, want)
		}
	}
}
