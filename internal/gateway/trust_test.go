package gateway

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
)

// TestComputeAdvertisedIsAllocated: a member may route only what the hub allocated to it. A
// Peer's subnets outside its Cluster's pod, service, global and secondary CIDRs are withheld
// and named, its allowed subnets and every other Peer stay; the victim of a hijack keeps its
// CIDR even when the attacker's Peer is older.
func TestComputeAdvertisedIsAllocated(t *testing.T) {
	local := Local{ClusterID: "a", Backend: v1alpha1.BackendWireGuard, Subnets: prefixes("10.1.0.0/16"),
		ListenPort: 4500, LocalAddr: netip.MustParseAddr("203.0.113.1"),
		Allocated: map[string][]netip.Prefix{
			"b": Allocation(v1alpha1.ClusterSpec{PodCIDRs: []string{"10.2.0.0/16"}, ServiceCIDRs: []string{"10.98.0.0/16"}}),
			"c": Allocation(v1alpha1.ClusterSpec{PodCIDRs: []string{"10.3.0.0/16"}, ServiceCIDRs: []string{"10.99.0.0/16"}}),
			"g": Allocation(v1alpha1.ClusterSpec{PodCIDRs: []string{"10.244.0.0/16"}, GlobalCIDR: "242.7.0.0/16"}),
			"s": Allocation(v1alpha1.ClusterSpec{PodCIDRs: []string{"10.244.0.0/16"}, SecondaryCIDR: "10.117.0.0/16"}),
		}}
	old := metav1.NewTime(time.Now().Add(-time.Hour))
	attacker := func(subnets ...string) v1alpha1.Peer {
		p := peer("b", keyB, "203.0.113.17", 4500, subnets...)
		p.CreationTimestamp, p.Spec.HealthCheckIP = old, "10.2.0.1"
		return p
	}
	victim := peer("c", keyC, "203.0.113.33", 4500, "10.3.0.0/16")
	victim.Spec.HealthCheckIP = "10.3.0.1"
	victim.CreationTimestamp = metav1.Now()
	tp := func(id, key, ep string, subnets ...string) tunnel.Peer {
		return tunnel.Peer{Cluster: id, PublicKey: key, Endpoint: netip.MustParseAddrPort(ep), Subnets: prefixes(subnets...)}
	}
	wantVictim := tp("c", keyC, "203.0.113.33:4500", "10.3.0.0/16")

	tests := []struct {
		name         string
		peers        []v1alpha1.Peer
		wantPeers    []tunnel.Peer
		wantRefused  map[string]string
		wantWithheld []string // substrings of the one withheld message of cluster b
		wantTargets  map[string]netip.Addr
	}{
		{name: "another cluster's pod CIDR, a public /8, the metadata address and ::/0 are withheld",
			peers:        []v1alpha1.Peer{attacker("10.2.0.0/16", "10.3.0.0/16", "8.0.0.0/8", "169.254.169.254/32", "::/0", "10.98.4.0/24"), victim},
			wantPeers:    []tunnel.Peer{tp("b", keyB, "203.0.113.17:4500", "10.2.0.0/16", "10.98.4.0/24"), wantVictim},
			wantWithheld: []string{"cluster b advertises", "10.3.0.0/16", "8.0.0.0/8", "169.254.169.254/32", "::/0", "10.2.0.0/16, 10.98.0.0/16"},
			wantTargets:  map[string]netip.Addr{"b": netip.MustParseAddr("10.2.0.1"), "c": netip.MustParseAddr("10.3.0.1")}},
		{name: "a supernet of its own allocation is withheld",
			peers:     []v1alpha1.Peer{attacker("10.2.0.0/15"), victim},
			wantPeers: []tunnel.Peer{tp("b", keyB, "203.0.113.17:4500"), wantVictim}, wantWithheld: []string{"10.2.0.0/15"},
			wantTargets: map[string]netip.Addr{"c": netip.MustParseAddr("10.3.0.1")}},
		{name: "this cluster's own CIDR is withheld, not an overlap that refuses the Peer",
			peers:     []v1alpha1.Peer{attacker("10.2.0.0/16", "10.1.0.0/16")},
			wantPeers: []tunnel.Peer{tp("b", keyB, "203.0.113.17:4500", "10.2.0.0/16")}, wantWithheld: []string{"10.1.0.0/16"},
			wantTargets: map[string]netip.Addr{"b": netip.MustParseAddr("10.2.0.1")}},
		{name: "a health-check address outside the accepted subnets is not probed",
			peers: []v1alpha1.Peer{func() v1alpha1.Peer {
				p := attacker("10.2.0.0/16")
				p.Spec.HealthCheckIP = "169.254.169.254"
				return p
			}()},
			wantPeers: []tunnel.Peer{tp("b", keyB, "203.0.113.17:4500", "10.2.0.0/16")}, wantTargets: map[string]netip.Addr{}},
		{name: "a Peer without a Cluster (not joined, or revoked) is refused",
			peers:       []v1alpha1.Peer{peer("x", keyOf("x"), "203.0.113.99", 4500, "10.9.0.0/16"), victim},
			wantPeers:   []tunnel.Peer{wantVictim},
			wantRefused: map[string]string{"x": ReasonNotRegistered}, wantTargets: map[string]netip.Addr{"c": netip.MustParseAddr("10.3.0.1")}},
		{name: "global and secondary blocks are allocated, their private pod CIDRs are not routed",
			peers:       []v1alpha1.Peer{peer("g", keyOf("g"), "203.0.113.7", 4500, "242.7.0.0/16"), peer("s", keyOf("s"), "203.0.113.8", 4500, "10.117.0.0/16")},
			wantPeers:   []tunnel.Peer{tp("g", keyOf("g"), "203.0.113.7:4500", "242.7.0.0/16"), tp("s", keyOf("s"), "203.0.113.8:4500", "10.117.0.0/16")},
			wantTargets: map[string]netip.Addr{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Compute(local, tt.peers)
			if !reflect.DeepEqual(d.Tunnel.Peers, tt.wantPeers) {
				t.Errorf("tunnel peers\n got %+v\nwant %+v", d.Tunnel.Peers, tt.wantPeers)
			}
			if refused := refusedReasons(t, d); !reflect.DeepEqual(refused, tt.wantRefused) {
				t.Errorf("refused %v, want %v", refused, tt.wantRefused)
			}
			if !reflect.DeepEqual(d.Targets, tt.wantTargets) {
				t.Errorf("targets %v, want %v", d.Targets, tt.wantTargets)
			}
			if len(tt.wantWithheld) == 0 {
				if len(d.Withheld) != 0 {
					t.Errorf("withheld %v, want none", d.Withheld)
				}
				return
			}
			if len(d.Withheld) != 1 || d.Withheld[0].Cluster != "b" || d.Withheld[0].Reason != ReasonSubnetsNotAllocated {
				t.Fatalf("withheld %+v, want one of cluster b", d.Withheld)
			}
			for _, want := range tt.wantWithheld {
				if !strings.Contains(d.Withheld[0].Message, want) {
					t.Errorf("withheld message %q lacks %q", d.Withheld[0].Message, want)
				}
			}
		})
	}
}

// TestComputeHubGatewayAdvertisesOnlyItsHealthCheck: the hub's gateway has no cluster behind
// it; any subnet of its Peer but its health-check address is withheld.
func TestComputeHubGatewayAdvertisesOnlyItsHealthCheck(t *testing.T) {
	hub := peer(v1alpha1.HubPeerName, keyOf("h"), "203.0.113.250", 4500, "10.0.0.1/32", "0.0.0.0/1", "10.3.0.0/16")
	hub.Spec.Role = v1alpha1.PeerRoleHub
	local := Local{ClusterID: "a", Topology: v1alpha1.TopologyHub, Backend: v1alpha1.BackendWireGuard, Subnets: prefixes("10.1.0.0/16"), Allocated: map[string][]netip.Prefix{}}
	d := Compute(local, []v1alpha1.Peer{hub})
	if got, want := d.RemoteSubnets(), prefixes("10.0.0.1/32"); !reflect.DeepEqual(got, want) {
		t.Fatalf("remote subnets %v, want %v", got, want)
	}
	if len(d.Withheld) != 1 || !strings.Contains(d.Withheld[0].Message, "0.0.0.0/1, 10.3.0.0/16") {
		t.Fatalf("withheld %+v", d.Withheld)
	}
}

// TestComputeOneBadPeer: Peers the driver would reject (a second Peer of a cluster ID, a
// public key or a vxlan endpoint address already taken, a key that is not a key, a vxlan
// endpoint of the other family or port, subnets of the other family) are refused alone, and
// the configuration that is left passes the driver's validation.
func TestComputeOneBadPeer(t *testing.T) {
	alloc := map[string][]netip.Prefix{"b": prefixes("10.2.0.0/16", "fd00:2::/64"), "c": prefixes("10.3.0.0/16"), "d": prefixes("10.4.0.0/16")}
	older := func(p v1alpha1.Peer) v1alpha1.Peer {
		p.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
		return p
	}
	b := older(peer("b", keyB, "203.0.113.17", 4500, "10.2.0.0/16"))
	newer := func(p v1alpha1.Peer) v1alpha1.Peer {
		p.CreationTimestamp = metav1.Now()
		return p
	}
	wg := Local{ClusterID: "a", Backend: v1alpha1.BackendWireGuard, Subnets: prefixes("10.1.0.0/16"), ListenPort: 4500,
		LocalAddr: netip.MustParseAddr("203.0.113.1"), Allocated: alloc}
	vx := wg
	vx.Backend = v1alpha1.BackendVXLAN
	vxPeer := func(p v1alpha1.Peer) v1alpha1.Peer {
		p.Spec.Backend, p.Spec.PublicKey = v1alpha1.BackendVXLAN, ""
		return p
	}
	tests := []struct {
		name        string
		local       Local
		peers       []v1alpha1.Peer
		wantTunnels []string
		wantRefused map[string]string
	}{
		{name: "a second Peer of cluster b (another name, newer)", local: wg, peers: []v1alpha1.Peer{b, func() v1alpha1.Peer {
			p := peer("b", keyOf("z"), "203.0.113.99", 4500)
			p.Name, p.CreationTimestamp = "squatter", metav1.Now()
			return p
		}(), peer("c", keyC, "203.0.113.33", 4500, "10.3.0.0/16")},
			wantTunnels: []string{"b", "c"}, wantRefused: map[string]string{"b": ReasonDuplicatePeer}},
		{name: "cluster c publishes b's public key", local: wg, peers: []v1alpha1.Peer{b, newer(peer("c", keyB, "203.0.113.33", 4500, "10.3.0.0/16")), peer("d", keyOf("d"), "203.0.113.49", 4500, "10.4.0.0/16")},
			wantTunnels: []string{"b", "d"}, wantRefused: map[string]string{"c": ReasonDuplicatePeer}},
		{name: "a key that is not a WireGuard key", local: wg, peers: []v1alpha1.Peer{b, peer("c", "bm90IGEga2V5", "203.0.113.33", 4500, "10.3.0.0/16")},
			wantTunnels: []string{"b"}, wantRefused: map[string]string{"c": ReasonInvalidPeer}},
		{name: "port 0", local: wg, peers: []v1alpha1.Peer{b, peer("c", keyC, "203.0.113.33", 0, "10.3.0.0/16")},
			wantTunnels: []string{"b"}, wantRefused: map[string]string{"c": ReasonInvalidPeer}},
		{name: "vxlan: two Peers at one endpoint address", local: vx, peers: []v1alpha1.Peer{vxPeer(b), newer(vxPeer(peer("c", "", "203.0.113.17", 4500, "10.3.0.0/16")))},
			wantTunnels: []string{"b"}, wantRefused: map[string]string{"c": ReasonDuplicatePeer}},
		{name: "vxlan: an IPv6 endpoint, another port", local: vx, peers: []v1alpha1.Peer{vxPeer(b), vxPeer(peer("c", "", "2001:db8::3", 4500, "10.3.0.0/16")), vxPeer(peer("d", "", "203.0.113.49", 4789, "10.4.0.0/16"))},
			wantTunnels: []string{"b"}, wantRefused: map[string]string{"c": ReasonInvalidPeer, "d": ReasonInvalidPeer}},
		{name: "vxlan: a subnet of the other family is withheld", local: vx, peers: []v1alpha1.Peer{vxPeer(peer("b", "", "203.0.113.17", 4500, "10.2.0.0/16", "fd00:2::/64"))},
			wantTunnels: []string{"b"}},
		{name: "the same subnet twice in one Peer", local: wg, peers: []v1alpha1.Peer{peer("b", keyB, "203.0.113.17", 4500, "10.2.0.0/16", "10.2.0.1/16")},
			wantTunnels: []string{"b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Compute(tt.local, tt.peers)
			var got []string
			for _, p := range d.Tunnel.Peers {
				got = append(got, p.Cluster)
			}
			if !reflect.DeepEqual(got, tt.wantTunnels) {
				t.Errorf("tunnels %v, want %v", got, tt.wantTunnels)
			}
			if refused := refusedReasons(t, d); !reflect.DeepEqual(refused, tt.wantRefused) {
				t.Errorf("refused %v, want %v", refused, tt.wantRefused)
			}
			if err := validateForDriver(tt.local.Backend, d.Tunnel); err != nil {
				t.Errorf("the driver would reject the configuration: %v", err)
			}
		})
	}
}

// TestBuildStatusDuplicatePeer: a refused second Peer of a connected cluster is reported in
// the condition, never as a second connection of that cluster ID (the status update would fail).
func TestBuildStatusDuplicatePeer(t *testing.T) {
	d := Desired{
		Tunnel:   tunnel.Config{Peers: []tunnel.Peer{{Cluster: "b"}}},
		Refused:  []Refusal{{Cluster: "b", Reason: ReasonDuplicatePeer, Message: "cluster b: Peer squatter is a second Peer"}},
		Withheld: []Refusal{{Cluster: "b", Reason: ReasonSubnetsNotAllocated, Message: "cluster b advertises 8.0.0.0/8 outside"}},
	}
	st := BuildStatus(nil, 1, "wireguard", d, nil, nil, nil, time.Now())
	if len(st.Connections) != 1 {
		t.Fatalf("connections %+v, want one of cluster b", st.Connections)
	}
	for typ, want := range map[string]string{ConditionPeersAccepted: "squatter", ConditionSubnetsAccepted: "8.0.0.0/8"} {
		var c *metav1.Condition
		for i := range st.Conditions {
			if st.Conditions[i].Type == typ {
				c = &st.Conditions[i]
			}
		}
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, want) {
			t.Errorf("condition %s = %+v, want False naming %s", typ, c, want)
		}
	}
}
