package gateway

import (
	"encoding/base64"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
)

const (
	keyB = "YmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmI="
	keyC = "Y2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2M="
)

// keyOf is a distinct WireGuard public key per cluster ID: the driver takes each key once.
func keyOf(id string) string {
	return base64.StdEncoding.EncodeToString([]byte(strings.Repeat(id, 32)[:32]))
}

func peer(id, key, ip string, port int32, subnets ...string) v1alpha1.Peer {
	return v1alpha1.Peer{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec: v1alpha1.PeerSpec{ClusterID: id, Hostname: id + "-node1", Backend: v1alpha1.BackendWireGuard, PublicKey: key,
			Endpoint: v1alpha1.PeerEndpoint{PrivateIP: ip, Port: port}, Subnets: subnets, HealthCheckIP: "10.0.0.1"},
	}
}

// computeHonest is Compute in a fleet whose clusters advertise what the hub allocated to
// them: unless the test sets Local.Allocated, each Peer's cluster is allocated exactly its
// subnets. The tests of the allocation check itself call Compute.
func computeHonest(local Local, peers []v1alpha1.Peer) Desired {
	if local.Allocated == nil {
		local.Allocated = map[string][]netip.Prefix{}
		for _, p := range peers {
			for _, s := range p.Spec.Subnets {
				if prefix, err := netip.ParsePrefix(s); err == nil {
					local.Allocated[p.Spec.ClusterID] = append(local.Allocated[p.Spec.ClusterID], prefix.Masked())
				}
			}
		}
	}
	return Compute(local, peers)
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestCompute(t *testing.T) {
	local := Local{ClusterID: "a", Backend: v1alpha1.BackendWireGuard, Subnets: prefixes("10.1.0.0/16", "10.97.0.0/16"),
		ListenPort: 4500, LocalAddr: netip.MustParseAddr("203.0.113.1")}
	b := peer("b", keyB, "203.0.113.17", 4500, "10.98.0.0/16", "10.2.0.0/16")
	b.Spec.HealthCheckIP = "10.2.0.1"
	c := peer("c", keyC, "203.0.113.33", 4501, "10.3.0.0/16")
	c.Spec.HealthCheckIP = "10.3.0.1"
	wantB := tunnel.Peer{Cluster: "b", PublicKey: keyB, Endpoint: netip.MustParseAddrPort("203.0.113.17:4500"), Subnets: prefixes("10.2.0.0/16", "10.98.0.0/16")}
	wantC := tunnel.Peer{Cluster: "c", PublicKey: keyC, Endpoint: netip.MustParseAddrPort("203.0.113.33:4501"), Subnets: prefixes("10.3.0.0/16")}
	mutate := func(p v1alpha1.Peer, f func(*v1alpha1.Peer)) v1alpha1.Peer {
		p = *p.DeepCopy()
		f(&p)
		return p
	}
	self := peer("a", keyB, "203.0.113.1", 4500, "10.1.0.0/16")

	tests := []struct {
		name        string
		peers       []v1alpha1.Peer
		wantPeers   []tunnel.Peer
		wantRefused map[string]string // cluster → reason
		wantTargets map[string]netip.Addr
	}{
		{name: "no peers", wantTargets: map[string]netip.Addr{}},
		{name: "own peer is skipped", peers: []v1alpha1.Peer{self}, wantTargets: map[string]netip.Addr{}},
		{name: "mesh to every other cluster in cluster order", peers: []v1alpha1.Peer{c, self, b},
			wantPeers:   []tunnel.Peer{wantB, wantC},
			wantTargets: map[string]netip.Addr{"b": netip.MustParseAddr("10.2.0.1"), "c": netip.MustParseAddr("10.3.0.1")}},
		{name: "public IP wins over private", peers: []v1alpha1.Peer{mutate(b, func(p *v1alpha1.Peer) { p.Spec.Endpoint.PublicIP = "198.51.100.9" })},
			wantPeers: []tunnel.Peer{func() tunnel.Peer {
				w := wantB
				w.Endpoint = netip.MustParseAddrPort("198.51.100.9:4500")
				return w
			}()},
			wantTargets: map[string]netip.Addr{"b": netip.MustParseAddr("10.2.0.1")}},
		{name: "peer overlapping our pod CIDR is refused", peers: []v1alpha1.Peer{b, mutate(c, func(p *v1alpha1.Peer) { p.Spec.Subnets = []string{"10.1.128.0/17"} })},
			wantPeers: []tunnel.Peer{wantB}, wantRefused: map[string]string{"c": ReasonOverlappingSubnets},
			wantTargets: map[string]netip.Addr{"b": netip.MustParseAddr("10.2.0.1")}},
		{name: "of two overlapping peers the older wins", peers: []v1alpha1.Peer{mutate(b, func(p *v1alpha1.Peer) { p.CreationTimestamp = metav1.Now() }), mutate(c, func(p *v1alpha1.Peer) {
			p.Spec.Subnets = []string{"10.2.0.0/15"}
			p.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
		})},
			wantPeers:   []tunnel.Peer{{Cluster: "c", PublicKey: keyC, Endpoint: wantC.Endpoint, Subnets: prefixes("10.2.0.0/15")}},
			wantRefused: map[string]string{"b": ReasonOverlappingSubnets},
			wantTargets: map[string]netip.Addr{"c": netip.MustParseAddr("10.3.0.1")}},
		{name: "of two overlapping peers of the same age the first by cluster ID wins", peers: []v1alpha1.Peer{mutate(c, func(p *v1alpha1.Peer) { p.Spec.Subnets = []string{"10.2.0.0/15"} }), b},
			wantPeers: []tunnel.Peer{wantB}, wantRefused: map[string]string{"c": ReasonOverlappingSubnets},
			wantTargets: map[string]netip.Addr{"b": netip.MustParseAddr("10.2.0.1")}},
		{name: "backend mismatch", peers: []v1alpha1.Peer{mutate(b, func(p *v1alpha1.Peer) { p.Spec.Backend = v1alpha1.BackendVXLAN })},
			wantRefused: map[string]string{"b": ReasonBackendMismatch}, wantTargets: map[string]netip.Addr{}},
		{name: "wireguard peer without key", peers: []v1alpha1.Peer{mutate(b, func(p *v1alpha1.Peer) { p.Spec.PublicKey = "" })},
			wantRefused: map[string]string{"b": ReasonInvalidPeer}, wantTargets: map[string]netip.Addr{}},
		{name: "bad endpoint", peers: []v1alpha1.Peer{mutate(b, func(p *v1alpha1.Peer) { p.Spec.Endpoint.PrivateIP = "gateway.example" })},
			wantRefused: map[string]string{"b": ReasonInvalidPeer}, wantTargets: map[string]netip.Addr{}},
		{name: "bad subnet", peers: []v1alpha1.Peer{mutate(b, func(p *v1alpha1.Peer) { p.Spec.Subnets = []string{"10.2.0.0/33"} })},
			wantRefused: map[string]string{"b": ReasonInvalidPeer}, wantTargets: map[string]netip.Addr{}},
		{name: "peer being deleted is dropped", peers: []v1alpha1.Peer{b, mutate(c, func(p *v1alpha1.Peer) { p.DeletionTimestamp = &metav1.Time{} })},
			wantPeers: []tunnel.Peer{wantB}, wantTargets: map[string]netip.Addr{"b": netip.MustParseAddr("10.2.0.1")}},
		{name: "no health-check address, no probe target", peers: []v1alpha1.Peer{mutate(b, func(p *v1alpha1.Peer) { p.Spec.HealthCheckIP = "" })},
			wantPeers: []tunnel.Peer{wantB}, wantTargets: map[string]netip.Addr{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.peers)
			d := computeHonest(local, tt.peers)
			if !reflect.DeepEqual(tt.peers, in) {
				t.Fatal("Compute changed its input")
			}
			want := tunnel.Config{ListenPort: 4500, LocalAddr: local.LocalAddr, Peers: tt.wantPeers}
			if !reflect.DeepEqual(d.Tunnel, want) {
				t.Fatalf("tunnel config\n got %+v\nwant %+v", d.Tunnel, want)
			}
			if refused := refusedReasons(t, d); !reflect.DeepEqual(refused, tt.wantRefused) {
				t.Fatalf("refused %v, want %v", refused, tt.wantRefused)
			}
			if !reflect.DeepEqual(d.Targets, tt.wantTargets) {
				t.Fatalf("targets %v, want %v", d.Targets, tt.wantTargets)
			}
		})
	}
}

// refusedReasons maps each refused cluster to its reason (nil for none), checking that every
// refusal's message names its cluster.
func refusedReasons(t *testing.T, d Desired) map[string]string {
	t.Helper()
	var refused map[string]string
	for _, r := range d.Refused {
		if refused == nil {
			refused = map[string]string{}
		}
		refused[r.Cluster] = r.Reason
		if !strings.Contains(r.Message, "cluster "+r.Cluster) {
			t.Errorf("refusal message %q does not name the cluster", r.Message)
		}
	}
	return refused
}

func TestComputeOverlapMessage(t *testing.T) {
	local := Local{ClusterID: "a", Backend: v1alpha1.BackendWireGuard, Subnets: prefixes("10.1.0.0/16")}
	d := computeHonest(local, []v1alpha1.Peer{peer("b", keyB, "203.0.113.17", 4500, "10.1.0.0/16")})
	if len(d.Refused) != 1 {
		t.Fatalf("refused %v", d.Refused)
	}
	for _, want := range []string{"10.1.0.0/16 overlaps 10.1.0.0/16 of cluster a", "globalnet", "--exclude-subnet"} {
		if !strings.Contains(d.Refused[0].Message, want) {
			t.Errorf("message %q lacks %q", d.Refused[0].Message, want)
		}
	}
}

func TestRemoteSubnets(t *testing.T) {
	d := Desired{Tunnel: tunnel.Config{Peers: []tunnel.Peer{{Subnets: prefixes("10.3.0.0/16")}, {Subnets: prefixes("10.98.0.0/16", "10.2.0.0/16")}}}}
	if got, want := d.RemoteSubnets(), prefixes("10.2.0.0/16", "10.3.0.0/16", "10.98.0.0/16"); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestAdvertised(t *testing.T) {
	spec := v1alpha1.ClusterSpec{ClusterID: "a", PodCIDRs: []string{"10.1.0.0/16"}, ServiceCIDRs: []string{"10.97.0.0/16"}}
	tests := []struct {
		name   string
		optOut []netip.Prefix
		want   []netip.Prefix
	}{
		{"everything", nil, prefixes("10.1.0.0/16", "10.97.0.0/16")},
		{"whole service CIDR out", prefixes("10.97.0.0/16"), prefixes("10.1.0.0/16")},
		{"a covering opt-out", prefixes("10.96.0.0/12"), prefixes("10.1.0.0/16")},
		{"unrelated opt-out", prefixes("172.16.0.0/12"), prefixes("10.1.0.0/16", "10.97.0.0/16")},
		{"a quarter of the pods out", prefixes("10.1.64.0/18"),
			prefixes("10.1.0.0/18", "10.1.128.0/17", "10.97.0.0/16")},
		{"one /24 out", prefixes("10.97.255.0/24"),
			prefixes("10.1.0.0/16", "10.97.0.0/17", "10.97.128.0/18", "10.97.192.0/19", "10.97.224.0/20", "10.97.240.0/21", "10.97.248.0/22", "10.97.252.0/23", "10.97.254.0/24")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Advertised(spec, tt.optOut)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
	if _, err := Advertised(v1alpha1.ClusterSpec{ClusterID: "a", PodCIDRs: []string{"10.1.0.0"}}, nil); err == nil {
		t.Fatal("a bad CIDR was accepted")
	}
}

func TestComputeTopology(t *testing.T) {
	const keyH = "aGhoaGhoaGhoaGhoaGhoaGhoaGhoaGhoaGhoaGhoaGg="
	hubPeer := peer(v1alpha1.HubPeerName, keyH, "203.0.113.250", 4500, "10.0.0.1/32")
	hubPeer.Spec.Role, hubPeer.Spec.HealthCheckIP = v1alpha1.PeerRoleHub, "10.0.0.1"
	member := func(id, key, ip, subnet, hc string, topo v1alpha1.Topology) v1alpha1.Peer {
		p := peer(id, key, ip, 4500, subnet)
		p.Spec.Topology, p.Spec.HealthCheckIP = topo, hc
		return p
	}
	meshB := member("b", keyB, "203.0.113.17", "10.2.0.0/16", "10.2.0.1", v1alpha1.TopologyMesh)
	hubC := member("c", keyC, "203.0.113.33", "10.3.0.0/16", "10.3.0.1", v1alpha1.TopologyHub)
	tp := func(p v1alpha1.Peer, subnets ...string) tunnel.Peer {
		return tunnel.Peer{Cluster: p.Spec.ClusterID, PublicKey: p.Spec.PublicKey,
			Endpoint: netip.AddrPortFrom(netip.MustParseAddr(p.Spec.Endpoint.PrivateIP), 4500), Subnets: prefixes(subnets...)}
	}
	memberA := func(topo v1alpha1.Topology) Local {
		return Local{ClusterID: "a", Topology: topo, Backend: v1alpha1.BackendWireGuard, Subnets: prefixes("10.1.0.0/16")}
	}
	hubLocal := Local{ClusterID: v1alpha1.HubPeerName, Role: v1alpha1.PeerRoleHub, Backend: v1alpha1.BackendWireGuard, Subnets: prefixes("10.0.0.1/32")}
	memberAPeer := member("a", keyOf("a"), "203.0.113.1", "10.1.0.0/16", "10.1.0.1", v1alpha1.TopologyHub)
	addr := netip.MustParseAddr

	tests := []struct {
		name        string
		local       Local
		peers       []v1alpha1.Peer
		wantPeers   []tunnel.Peer
		wantVia     map[string]string
		wantRefused map[string]string
		wantTargets map[string]netip.Addr
	}{
		{name: "hub member: one tunnel, to the hub, carrying every other cluster",
			local: memberA(v1alpha1.TopologyHub), peers: []v1alpha1.Peer{hubC, meshB, hubPeer},
			wantPeers:   []tunnel.Peer{tp(hubPeer, "10.0.0.1/32", "10.2.0.0/16", "10.3.0.0/16")},
			wantVia:     map[string]string{"b": "hub", "c": "hub"},
			wantTargets: map[string]netip.Addr{"hub": addr("10.0.0.1"), "b": addr("10.2.0.1"), "c": addr("10.3.0.1")}},
		{name: "mesh member: direct to mesh, through the hub to hub members",
			local: memberA(v1alpha1.TopologyMesh), peers: []v1alpha1.Peer{hubPeer, meshB, hubC},
			wantPeers:   []tunnel.Peer{tp(meshB, "10.2.0.0/16"), tp(hubPeer, "10.0.0.1/32", "10.3.0.0/16")},
			wantVia:     map[string]string{"c": "hub"},
			wantTargets: map[string]netip.Addr{"hub": addr("10.0.0.1"), "b": addr("10.2.0.1"), "c": addr("10.3.0.1")}},
		{name: "empty topology is mesh",
			local: memberA(""), peers: []v1alpha1.Peer{peer("b", keyB, "203.0.113.17", 4500, "10.2.0.0/16")},
			wantPeers: []tunnel.Peer{tp(meshB, "10.2.0.0/16")}, wantVia: map[string]string{},
			// The peer's health-check address (10.0.0.1) is outside its subnets: not probed.
			wantTargets: map[string]netip.Addr{}},
		{name: "hub gateway: a tunnel to every member, whatever its topology",
			local: hubLocal, peers: []v1alpha1.Peer{hubPeer, hubC, meshB, memberAPeer},
			wantPeers:   []tunnel.Peer{tp(memberAPeer, "10.1.0.0/16"), tp(meshB, "10.2.0.0/16"), tp(hubC, "10.3.0.0/16")},
			wantVia:     map[string]string{},
			wantTargets: map[string]netip.Addr{"a": addr("10.1.0.1"), "b": addr("10.2.0.1"), "c": addr("10.3.0.1")}},
		{name: "hub topology without a hub gateway refuses the others",
			local: memberA(v1alpha1.TopologyHub), peers: []v1alpha1.Peer{meshB, hubC},
			wantVia: map[string]string{}, wantRefused: map[string]string{"b": ReasonNoHubGateway, "c": ReasonNoHubGateway},
			wantTargets: map[string]netip.Addr{}},
		{name: "mesh member without a hub gateway: only the hub members are refused",
			local: memberA(v1alpha1.TopologyMesh), peers: []v1alpha1.Peer{meshB, hubC},
			wantPeers: []tunnel.Peer{tp(meshB, "10.2.0.0/16")}, wantVia: map[string]string{},
			wantRefused: map[string]string{"c": ReasonNoHubGateway}, wantTargets: map[string]netip.Addr{"b": addr("10.2.0.1")}},
		{name: "a member overlapping another is refused, not routed through the hub",
			local: memberA(v1alpha1.TopologyHub), peers: []v1alpha1.Peer{hubPeer, hubC, func() v1alpha1.Peer {
				p := member("d", keyB, "203.0.113.49", "10.3.0.0/17", "10.3.0.9", v1alpha1.TopologyHub)
				p.CreationTimestamp = metav1.NewTime(time.Now())
				return p
			}()},
			wantPeers: []tunnel.Peer{tp(hubPeer, "10.0.0.1/32", "10.3.0.0/16")}, wantVia: map[string]string{"c": "hub"},
			wantRefused: map[string]string{"d": ReasonOverlappingSubnets},
			wantTargets: map[string]netip.Addr{"hub": addr("10.0.0.1"), "c": addr("10.3.0.1")}},
		{name: "a second hub-role Peer is refused",
			local: memberA(v1alpha1.TopologyHub), peers: []v1alpha1.Peer{hubPeer, func() v1alpha1.Peer {
				p := *hubPeer.DeepCopy()
				p.Name, p.Spec.ClusterID, p.Spec.Subnets, p.Spec.HealthCheckIP = "x", "x", []string{"10.9.0.1/32"}, ""
				return p
			}()},
			wantPeers: []tunnel.Peer{tp(hubPeer, "10.0.0.1/32")}, wantVia: map[string]string{},
			wantRefused: map[string]string{"x": ReasonInvalidPeer}, wantTargets: map[string]netip.Addr{"hub": addr("10.0.0.1")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := computeHonest(tt.local, tt.peers)
			if !reflect.DeepEqual(d.Tunnel.Peers, tt.wantPeers) {
				t.Errorf("tunnel peers\n got %+v\nwant %+v", d.Tunnel.Peers, tt.wantPeers)
			}
			if !reflect.DeepEqual(d.Via, tt.wantVia) {
				t.Errorf("via %v, want %v", d.Via, tt.wantVia)
			}
			if refused := refusedReasons(t, d); !reflect.DeepEqual(refused, tt.wantRefused) {
				t.Errorf("refused %v, want %v", refused, tt.wantRefused)
			}
			if !reflect.DeepEqual(d.Targets, tt.wantTargets) {
				t.Errorf("targets %v, want %v", d.Targets, tt.wantTargets)
			}
		})
	}
}

func TestComputeNoHubGatewayMessage(t *testing.T) {
	local := Local{ClusterID: "a", Topology: v1alpha1.TopologyHub, Backend: v1alpha1.BackendWireGuard, Subnets: prefixes("10.1.0.0/16")}
	d := computeHonest(local, []v1alpha1.Peer{peer("b", keyB, "203.0.113.17", 4500, "10.2.0.0/16")})
	if len(d.Refused) != 1 {
		t.Fatalf("refused %v", d.Refused)
	}
	for _, want := range []string{"cluster b", "this cluster (a) uses the hub topology", "octopus-agent gateway --hub", "--topology mesh"} {
		if !strings.Contains(d.Refused[0].Message, want) {
			t.Errorf("message %q lacks %q", d.Refused[0].Message, want)
		}
	}
}

// TestComputeGlobalnet: a globalnet cluster advertises its global CIDR and keeps its own pod
// and service CIDRs private. A globalnet Peer with the very same pod CIDRs is accepted (only
// global CIDRs are compared), a direct Peer whose CIDRs overlap our private ones is refused
// (its routes would shadow our pods), and a distinct direct Peer is accepted (mixing).
func TestComputeGlobalnet(t *testing.T) {
	local := Local{ClusterID: "a", Backend: v1alpha1.BackendWireGuard, Subnets: prefixes("242.1.0.0/16"),
		Private: prefixes("10.244.0.0/16", "10.96.0.0/12"), ListenPort: 4500, LocalAddr: netip.MustParseAddr("203.0.113.1")}
	globalB := peer("b", keyB, "203.0.113.17", 4500, "242.2.0.0/16")
	directC := peer("c", keyC, "203.0.113.33", 4500, "10.244.0.0/16")
	directD := peer("d", keyOf("d"), "203.0.113.49", 4500, "10.3.0.0/16")
	globalE := peer("e", keyOf("e"), "203.0.113.65", 4500, "242.1.0.0/16")
	d := computeHonest(local, []v1alpha1.Peer{globalB, directC, directD, globalE})
	if got, want := refusedReasons(t, d), map[string]string{"c": ReasonOverlappingSubnets, "e": ReasonOverlappingSubnets}; !reflect.DeepEqual(got, want) {
		t.Fatalf("refused %v, want %v", got, want)
	}
	if got, want := d.RemoteSubnets(), prefixes("10.3.0.0/16", "242.2.0.0/16"); !slices.Equal(got, want) {
		t.Fatalf("remote subnets %v, want %v", got, want)
	}
}

// TestComputeSecondary: a secondary cluster advertises its secondary block and keeps its
// primary CIDRs private. Secondary Peers with the very same primary CIDRs are accepted (only
// the blocks are compared) unless their blocks overlap; Peers on the primary network (direct,
// globalnet, or a Peer without a Cluster, which counts as direct) are refused as an
// addressing mismatch, from both sides, before any overlap; the hub's gateway accepts
// everyone and everyone accepts it.
func TestComputeSecondary(t *testing.T) {
	addressing := map[string]v1alpha1.Addressing{
		"a": v1alpha1.AddressingSecondary, "b": v1alpha1.AddressingSecondary, "e": v1alpha1.AddressingSecondary,
		"c": v1alpha1.AddressingDirect, "d": "", "g": v1alpha1.AddressingGlobalnet,
	}
	secondaryA := Local{ClusterID: "a", Backend: v1alpha1.BackendWireGuard, Addressing: v1alpha1.AddressingSecondary,
		Subnets: prefixes("10.112.0.0/16"), Private: prefixes("10.244.0.0/16", "10.96.0.0/12"), PeerAddressing: addressing}
	directA := Local{ClusterID: "a", Backend: v1alpha1.BackendWireGuard, Addressing: v1alpha1.AddressingDirect,
		Subnets: prefixes("10.1.0.0/16"), PeerAddressing: addressing}
	globalA := Local{ClusterID: "a", Backend: v1alpha1.BackendWireGuard, Addressing: v1alpha1.AddressingGlobalnet,
		Subnets: prefixes("242.1.0.0/16"), Private: prefixes("10.244.0.0/16"), PeerAddressing: addressing}
	hubLocal := Local{ClusterID: v1alpha1.HubPeerName, Role: v1alpha1.PeerRoleHub, Backend: v1alpha1.BackendWireGuard,
		Subnets: prefixes("10.0.0.1/32"), PeerAddressing: addressing}

	secondaryB := peer("b", keyB, "203.0.113.17", 4500, "10.113.0.0/16")
	secondaryE := peer("e", keyOf("e"), "203.0.113.65", 4500, "10.113.128.0/17") // overlaps b's block
	directC := peer("c", keyC, "203.0.113.33", 4500, "10.3.0.0/16")
	unsetD := peer("d", keyOf("d"), "203.0.113.49", 4500, "10.4.0.0/16")     // addressing "" is direct
	globalG := peer("g", keyOf("g"), "203.0.113.81", 4500, "242.2.0.0/16")   // globalnet is the primary network too
	unknownX := peer("x", keyOf("x"), "203.0.113.97", 4500, "10.114.0.0/16") // no Cluster on the hub
	// A direct cluster whose CIDRs the secondary pool would hold: refused as a mismatch, not
	// an overlap, since the mismatch is what the user must fix first.
	directInBlock := peer("c", keyC, "203.0.113.33", 4500, "10.112.0.0/16")
	hubPeer := peer(v1alpha1.HubPeerName, keyOf("h"), "203.0.113.250", 4500, "10.0.0.1/32")
	hubPeer.Spec.Role = v1alpha1.PeerRoleHub
	hubB := *secondaryB.DeepCopy()
	hubB.Spec.Topology = v1alpha1.TopologyHub
	hubC := *directC.DeepCopy()
	hubC.Spec.Topology = v1alpha1.TopologyHub

	tests := []struct {
		name        string
		local       Local
		peers       []v1alpha1.Peer
		wantRemote  []netip.Prefix
		wantRefused map[string]string
	}{
		{name: "secondary accepts secondary", local: secondaryA, peers: []v1alpha1.Peer{secondaryB},
			wantRemote: prefixes("10.113.0.0/16")},
		{name: "secondary refuses direct, unset, globalnet and unknown", local: secondaryA, peers: []v1alpha1.Peer{secondaryB, directC, unsetD, globalG, unknownX},
			wantRemote: prefixes("10.113.0.0/16"),
			wantRefused: map[string]string{"c": ReasonAddressingMismatch, "d": ReasonAddressingMismatch, "g": ReasonAddressingMismatch,
				"x": ReasonAddressingMismatch}},
		{name: "mismatch comes before overlap", local: secondaryA, peers: []v1alpha1.Peer{directInBlock},
			wantRefused: map[string]string{"c": ReasonAddressingMismatch}},
		{name: "secondary blocks overlapping: the older wins", local: secondaryA, peers: []v1alpha1.Peer{secondaryB, secondaryE},
			wantRemote: prefixes("10.113.0.0/16"), wantRefused: map[string]string{"e": ReasonOverlappingSubnets}},
		{name: "a secondary Peer over our private primary CIDRs is refused", local: secondaryA,
			peers:       []v1alpha1.Peer{peer("b", keyB, "203.0.113.17", 4500, "10.244.0.0/16")},
			wantRefused: map[string]string{"b": ReasonOverlappingSubnets}},
		{name: "direct refuses secondary, accepts direct and globalnet", local: directA, peers: []v1alpha1.Peer{secondaryB, directC, globalG},
			wantRemote: prefixes("10.3.0.0/16", "242.2.0.0/16"), wantRefused: map[string]string{"b": ReasonAddressingMismatch}},
		{name: "globalnet refuses secondary", local: globalA, peers: []v1alpha1.Peer{secondaryB, directC},
			wantRemote: prefixes("10.3.0.0/16"), wantRefused: map[string]string{"b": ReasonAddressingMismatch}},
		{name: "secondary through the hub: only the secondary member is carried", local: func() Local {
			l := secondaryA
			l.Topology = v1alpha1.TopologyHub
			return l
		}(), peers: []v1alpha1.Peer{hubPeer, hubB, hubC},
			wantRemote: prefixes("10.0.0.1/32", "10.113.0.0/16"), wantRefused: map[string]string{"c": ReasonAddressingMismatch}},
		{name: "the hub's gateway carries both networks", local: hubLocal, peers: []v1alpha1.Peer{hubB, hubC},
			wantRemote: prefixes("10.3.0.0/16", "10.113.0.0/16")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := computeHonest(tt.local, tt.peers)
			if got := d.RemoteSubnets(); !slices.Equal(got, tt.wantRemote) {
				t.Errorf("remote subnets %v, want %v", got, tt.wantRemote)
			}
			if refused := refusedReasons(t, d); !reflect.DeepEqual(refused, tt.wantRefused) {
				t.Errorf("refused %v, want %v", refused, tt.wantRefused)
			}
		})
	}
}

// TestComputeAddressingMismatchMessage: the refusal names both addressings and the fix.
func TestComputeAddressingMismatchMessage(t *testing.T) {
	local := Local{ClusterID: "a", Backend: v1alpha1.BackendWireGuard, Addressing: v1alpha1.AddressingSecondary,
		Subnets: prefixes("10.112.0.0/16"), PeerAddressing: map[string]v1alpha1.Addressing{"b": ""}}
	d := computeHonest(local, []v1alpha1.Peer{peer("b", keyB, "203.0.113.17", 4500, "10.2.0.0/16")})
	if len(d.Refused) != 1 {
		t.Fatalf("refused %v", d.Refused)
	}
	for _, want := range []string{"cluster b", "uses direct addressing", "this cluster (a) secondary", "net1", "octopus join --addressing secondary"} {
		if !strings.Contains(d.Refused[0].Message, want) {
			t.Errorf("message %q lacks %q", d.Refused[0].Message, want)
		}
	}
}

func TestRoutedOnPrimary(t *testing.T) {
	remote := prefixes("10.113.0.0/16")
	if got := routedOnPrimary(Local{Addressing: v1alpha1.AddressingSecondary}, remote); got != nil {
		t.Errorf("secondary: %v, want nothing", got)
	}
	for _, a := range []v1alpha1.Addressing{"", v1alpha1.AddressingDirect, v1alpha1.AddressingGlobalnet} {
		if got := routedOnPrimary(Local{Addressing: a}, remote); !slices.Equal(got, remote) {
			t.Errorf("%q: %v, want %v", a, got, remote)
		}
	}
}
