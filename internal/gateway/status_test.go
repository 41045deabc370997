package gateway

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
)

func TestBuildStatus(t *testing.T) {
	now := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	d := Desired{
		Tunnel:  tunnel.Config{Peers: []tunnel.Peer{{Cluster: "c"}, {Cluster: "b"}}},
		Refused: []Refusal{{Cluster: "a", Reason: ReasonOverlappingSubnets, Message: "cluster a overlaps"}},
	}
	stats := []tunnel.PeerStats{{Cluster: "b", RxBytes: 10, TxBytes: 20, LastHandshake: now.Add(-time.Minute)}, {Cluster: "c", LastHandshake: now.Add(-10 * time.Minute)}}
	tests := []struct {
		name      string
		applyErr  error
		probes    map[string]ProbeStats
		wantState map[string]v1alpha1.ConnectionState
		wantReady metav1.ConditionStatus
	}{
		{name: "without probes, a fresh handshake is Connected and an old one is not",
			wantState: map[string]v1alpha1.ConnectionState{"a": v1alpha1.ConnectionError, "b": v1alpha1.ConnectionConnected, "c": v1alpha1.ConnectionConnecting},
			wantReady: metav1.ConditionTrue},
		{name: "probes decide: up, stopped answering, never answered",
			probes:    map[string]ProbeStats{"b": {Up: false, Answered: true}, "c": {Up: true, Answered: true, Max: time.Millisecond}},
			wantState: map[string]v1alpha1.ConnectionState{"a": v1alpha1.ConnectionError, "b": v1alpha1.ConnectionError, "c": v1alpha1.ConnectionConnected},
			wantReady: metav1.ConditionTrue},
		{name: "a failed apply makes every tunnel an Error and Ready False", applyErr: errors.New("no TUN"),
			probes:    map[string]ProbeStats{"b": {Up: true, Answered: true}},
			wantState: map[string]v1alpha1.ConnectionState{"a": v1alpha1.ConnectionError, "b": v1alpha1.ConnectionError, "c": v1alpha1.ConnectionError},
			wantReady: metav1.ConditionFalse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := BuildStatus(nil, 3, "wireguard-go", d, tt.applyErr, stats, tt.probes, now)
			if st.Driver != "wireguard-go" {
				t.Errorf("driver %q", st.Driver)
			}
			var ids []string
			for _, c := range st.Connections {
				ids = append(ids, c.ClusterID)
				if c.State != tt.wantState[c.ClusterID] {
					t.Errorf("%s: state %s (%s), want %s", c.ClusterID, c.State, c.Message, tt.wantState[c.ClusterID])
				}
				if c.State != v1alpha1.ConnectionConnected && c.Message == "" {
					t.Errorf("%s: %s without a message", c.ClusterID, c.State)
				}
			}
			if got := len(ids); got != 3 || ids[0] != "a" || ids[1] != "b" || ids[2] != "c" {
				t.Errorf("connections %v, want a b c", ids)
			}
			if b := st.Connections[1]; b.RxBytes != 10 || b.TxBytes != 20 || b.LastHandshake == nil {
				t.Errorf("b's counters %+v", b)
			}
			ready := meta.FindStatusCondition(st.Conditions, ConditionReady)
			if ready == nil || ready.Status != tt.wantReady || ready.ObservedGeneration != 3 {
				t.Errorf("Ready %+v", ready)
			}
			acc := meta.FindStatusCondition(st.Conditions, ConditionPeersAccepted)
			if acc == nil || acc.Status != metav1.ConditionFalse || acc.Reason != ReasonOverlappingSubnets || acc.Message != "cluster a overlaps" {
				t.Errorf("PeersAccepted %+v", acc)
			}
		})
	}
}

// A cluster reached through the hub's tunnel gets a connection of its own, marked via the hub,
// with its own probe results, or the carrying tunnel's state when it has none; never the
// carrying tunnel's counters.
func TestBuildStatusVia(t *testing.T) {
	now := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	d := Desired{
		Tunnel: tunnel.Config{Peers: []tunnel.Peer{{Cluster: "hub"}}},
		Via:    map[string]string{"b": "hub", "c": "hub"},
	}
	stats := []tunnel.PeerStats{{Cluster: "hub", RxBytes: 10, TxBytes: 20, LastHandshake: now.Add(-time.Minute)}}
	probes := map[string]ProbeStats{"b": {Up: false, Answered: true}}
	st := BuildStatus(nil, 1, "wireguard-go", d, nil, stats, probes, now)
	want := map[string]struct {
		state v1alpha1.ConnectionState
		via   string
	}{"b": {v1alpha1.ConnectionError, "hub"}, "c": {v1alpha1.ConnectionConnected, "hub"}, "hub": {v1alpha1.ConnectionConnected, ""}}
	if len(st.Connections) != len(want) {
		t.Fatalf("connections %+v", st.Connections)
	}
	for _, c := range st.Connections {
		w := want[c.ClusterID]
		if c.State != w.state || c.Via != w.via {
			t.Errorf("%s: state %s via %q, want %s via %q", c.ClusterID, c.State, c.Via, w.state, w.via)
		}
		if c.Via != "" && (c.RxBytes != 0 || c.LastHandshake != nil) {
			t.Errorf("%s: carries the hub tunnel's counters %+v", c.ClusterID, c)
		}
	}
	if ready := meta.FindStatusCondition(st.Conditions, ConditionReady); ready == nil || !strings.Contains(ready.Message, "2 more reached through the hub") {
		t.Errorf("Ready %+v", ready)
	}
}

// An unchanged condition keeps its transition time, so status writes are no-ops when nothing
// changed (the gateway patches only on a difference).
func TestBuildStatusKeepsTransitionTimes(t *testing.T) {
	now := time.Now()
	d := Desired{Tunnel: tunnel.Config{Peers: []tunnel.Peer{{Cluster: "b"}}}}
	first := BuildStatus(nil, 1, "vxlan", d, nil, nil, map[string]ProbeStats{"b": {Up: true, Answered: true}}, now)
	old := metav1.NewTime(now.Add(-time.Hour))
	for i := range first.Conditions {
		first.Conditions[i].LastTransitionTime = old
	}
	second := BuildStatus(first.Conditions, 1, "vxlan", d, nil, nil, map[string]ProbeStats{"b": {Up: true, Answered: true}}, now)
	for _, c := range second.Conditions {
		if !c.LastTransitionTime.Equal(&old) {
			t.Errorf("%s: transition time changed to %s", c.Type, c.LastTransitionTime)
		}
	}
	acc := meta.FindStatusCondition(second.Conditions, ConditionPeersAccepted)
	if acc == nil || acc.Status != metav1.ConditionTrue {
		t.Errorf("PeersAccepted %+v", acc)
	}
}

func TestNodeAddresses(t *testing.T) {
	node := func(podCIDR string, addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{Spec: corev1.NodeSpec{PodCIDR: podCIDR}, Status: corev1.NodeStatus{Addresses: addrs}}
	}
	annotated := func(n *corev1.Node, endpoint string) *corev1.Node {
		n.Annotations = map[string]string{v1alpha1.EndpointIPAnnotation: endpoint}
		return n
	}
	internal := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "198.51.100.2"}
	external := corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.1"}
	tests := []struct {
		name         string
		node         *corev1.Node
		endpoint, hc string // flags
		wantEP       string
		wantHC       string
		wantErr      bool
	}{
		{name: "ExternalIP wins, first host of the pod CIDR", node: node("10.1.0.0/24", internal, external), wantEP: "203.0.113.1", wantHC: "10.1.0.1"},
		{name: "InternalIP without ExternalIP", node: node("10.1.3.0/24", internal), wantEP: "198.51.100.2", wantHC: "10.1.3.1"},
		{name: "annotation wins over the addresses", node: annotated(node("10.1.0.0/24", internal, external), "192.0.2.7"), wantEP: "192.0.2.7", wantHC: "10.1.0.1"},
		{name: "flag wins over the annotation", node: annotated(node("10.1.0.0/24", internal), "192.0.2.7"), endpoint: "203.0.113.9", wantEP: "203.0.113.9", wantHC: "10.1.0.1"},
		{name: "malformed annotation", node: annotated(node("10.1.0.0/24", internal), "not-an-ip"), wantErr: true},
		{name: "flags win", node: node("10.1.0.0/24", internal), endpoint: "203.0.113.9", hc: "10.1.0.200", wantEP: "203.0.113.9", wantHC: "10.1.0.200"},
		{name: "no address at all", node: node("10.1.0.0/24"), wantErr: true},
		{name: "no pod CIDR and no flag", node: node("", internal), wantErr: true},
		// Either family: the underlay endpoint is the node's primary (first) address, the
		// health-check address the first host of its primary pod CIDR, which the prober
		// reaches over ICMPv6 as well.
		{name: "IPv6-only node", node: node("2001:db8:1:3::/64", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "2001:db8:ff::2"}),
			wantEP: "2001:db8:ff::2", wantHC: "2001:db8:1:3::1"},
		{name: "dual-stack node, IPv6 primary", node: node("2001:db8:1:3::/64", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "2001:db8:ff::2"}, internal),
			wantEP: "2001:db8:ff::2", wantHC: "2001:db8:1:3::1"},
		{name: "dual-stack node, IPv4 primary", node: node("10.1.3.0/24", internal, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "2001:db8:ff::2"}),
			wantEP: "198.51.100.2", wantHC: "10.1.3.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ep, hc netip.Addr
			if tt.endpoint != "" {
				ep = netip.MustParseAddr(tt.endpoint)
			}
			if tt.hc != "" {
				hc = netip.MustParseAddr(tt.hc)
			}
			gotEP, gotHC, err := nodeAddresses(tt.node, ep, hc)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && (gotEP.String() != tt.wantEP || gotHC.String() != tt.wantHC) {
				t.Fatalf("got %s %s, want %s %s", gotEP, gotHC, tt.wantEP, tt.wantHC)
			}
		})
	}
}

// TestPeersAcceptedReason: the condition names an overlap first, then a cluster on the other
// network, then any refusal.
func TestPeersAcceptedReason(t *testing.T) {
	ref := func(reason string) Refusal {
		return Refusal{Cluster: "x", Reason: reason, Message: "cluster x: " + reason}
	}
	tests := []struct {
		refused []Refusal
		want    string
	}{
		{nil, ReasonAllAccepted},
		{[]Refusal{ref(ReasonInvalidPeer)}, ReasonPeersRefused},
		{[]Refusal{ref(ReasonInvalidPeer), ref(ReasonAddressingMismatch)}, ReasonAddressingMismatch},
		{[]Refusal{ref(ReasonAddressingMismatch), ref(ReasonOverlappingSubnets), ref(ReasonAddressingMismatch)}, ReasonOverlappingSubnets},
	}
	for _, tt := range tests {
		st := BuildStatus(nil, 1, "fake", Desired{Refused: tt.refused}, nil, nil, nil, time.Now())
		if acc := meta.FindStatusCondition(st.Conditions, ConditionPeersAccepted); acc == nil || acc.Reason != tt.want {
			t.Errorf("refused %v: PeersAccepted %+v, want reason %s", tt.refused, acc, tt.want)
		}
	}
}
