package gateway

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/vxlan"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/wireguard"
)

// validateForDriver is the validation of the driver the backend names, which rejects a whole
// configuration.
func validateForDriver(b v1alpha1.Backend, cfg tunnel.Config) error {
	if b == v1alpha1.BackendVXLAN {
		return vxlan.Validate(cfg)
	}
	return wireguard.Validate(cfg)
}

// The pools hostile Peers are drawn from: honest values, other clusters' values, and values
// no honest gateway publishes.
var (
	propIDs     = []string{"a", "b", "c", "d", v1alpha1.HubPeerName, ""}
	propKeys    = []string{keyB, keyC, keyOf("d"), keyOf("h"), "", "bm90IGEga2V5", "!!!", keyB[:43] + "A"}
	propIPs     = []string{"203.0.113.17", "203.0.113.33", "203.0.113.17", "2001:db8::1", "0.0.0.0", "", "gw.example", "::ffff:203.0.113.33"}
	propPorts   = []int32{4500, 4500, 4789, 0, -1, 65535, 70000}
	propSubnets = []string{
		"10.1.0.0/16", "10.2.0.0/16", "10.3.0.0/16", "10.98.0.0/16", "10.2.7.0/24", "242.2.0.0/16", "10.113.0.0/16",
		"8.0.0.0/8", "169.254.169.254/32", "0.0.0.0/0", "::/0", "fd00:2::/64", "10.0.0.1/32", "10.2.0.1/16",
		"203.0.113.0/24", "10.2.0.0/33", "not-a-cidr", "",
	}
	propHCs = []string{"10.2.0.1", "10.3.0.1", "10.0.0.1", "169.254.169.254", "", "x"}
)

// propAllocated is what the hub allocated in the generated fleet; "d" has no Cluster.
var propAllocated = map[string][]netip.Prefix{
	"a": prefixes("10.1.0.0/16"),
	"b": prefixes("10.2.0.0/16", "10.98.0.0/16", "fd00:2::/48"),
	"c": prefixes("10.3.0.0/16", "242.2.0.0/16", "10.113.0.0/16"),
}

// genPeers draws up to 12 Peers from next, a source of choices.
func genPeers(next func(n int) int) []v1alpha1.Peer {
	pick := func(ss []string) string { return ss[next(len(ss))] }
	var peers []v1alpha1.Peer
	for range next(13) {
		id := pick(propIDs)
		p := v1alpha1.Peer{ObjectMeta: metav1.ObjectMeta{Name: pick(propIDs), CreationTimestamp: metav1.NewTime(time.Unix(int64(next(4)), 0))},
			Spec: v1alpha1.PeerSpec{ClusterID: id, Hostname: "n", PublicKey: pick(propKeys),
				Endpoint:      v1alpha1.PeerEndpoint{PrivateIP: pick(propIPs), Port: propPorts[next(len(propPorts))]},
				HealthCheckIP: pick(propHCs)}}
		if next(4) == 0 {
			p.Spec.Endpoint.PublicIP = pick(propIPs)
		}
		switch next(6) {
		case 0:
			p.Spec.Role = v1alpha1.PeerRoleHub
		case 1:
			p.Spec.Role = v1alpha1.PeerRoleMember
		}
		switch next(4) {
		case 0:
			p.Spec.Backend = v1alpha1.BackendVXLAN
		case 1:
			p.Spec.Backend = v1alpha1.BackendWireGuard
		}
		if next(2) == 0 {
			p.Spec.Topology = v1alpha1.TopologyHub
		}
		if next(8) == 0 {
			p.DeletionTimestamp = &metav1.Time{}
		}
		for range next(6) {
			p.Spec.Subnets = append(p.Spec.Subnets, pick(propSubnets))
		}
		peers = append(peers, p)
	}
	return peers
}

// genLocal draws the receiving gateway: a member or the hub's, either backend and topology.
func genLocal(next func(n int) int) Local {
	l := Local{ClusterID: "a", Backend: v1alpha1.BackendWireGuard, Subnets: prefixes("10.1.0.0/16"), ListenPort: 4500,
		LocalAddr: netip.MustParseAddr("203.0.113.1"), Allocated: propAllocated}
	if next(2) == 0 {
		l.Backend = v1alpha1.BackendVXLAN
	}
	if next(2) == 0 {
		l.Topology = v1alpha1.TopologyHub
	}
	if next(4) == 0 {
		l.ClusterID, l.Role, l.Subnets = v1alpha1.HubPeerName, v1alpha1.PeerRoleHub, prefixes("10.0.0.1/32")
	}
	return l
}

// checkCompute asserts the trust properties of one computed configuration: the driver
// accepts it as a whole, every routed subnet lies inside its sender's allocation (the hub
// gateway's: its health-check address) and off this cluster's own CIDRs, every Peer is
// accounted for, and the status has one connection per cluster.
func checkCompute(t *testing.T, local Local, peers []v1alpha1.Peer) {
	t.Helper()
	d := Compute(local, peers)
	if err := validateForDriver(local.Backend, d.Tunnel); err != nil {
		t.Fatalf("the driver rejects the whole configuration: %v\npeers: %+v", err, peers)
	}
	var hubHC []netip.Prefix // of every hub-role Peer of the hub's ID: one of them is used
	for _, p := range peers {
		if p.Spec.Role == v1alpha1.PeerRoleHub && p.Spec.ClusterID == v1alpha1.HubPeerName {
			if hc, err := netip.ParseAddr(p.Spec.HealthCheckIP); err == nil {
				hubHC = append(hubHC, netip.PrefixFrom(hc, hc.BitLen()))
			}
		}
	}
	carried := map[string][]string{} // tunnel → clusters whose subnets it may carry
	for id, via := range d.Via {
		carried[via] = append(carried[via], id)
	}
	for _, tp := range d.Tunnel.Peers {
		owners := append([]string{tp.Cluster}, carried[tp.Cluster]...)
		for _, s := range tp.Subnets {
			ok := false
			for _, o := range owners {
				allowed := local.Allocated[o]
				if tp.Cluster == v1alpha1.HubPeerName && o == tp.Cluster {
					allowed = append(slices.Clone(allowed), hubHC...)
				}
				ok = ok || insideAny(s, allowed)
			}
			if !ok {
				t.Fatalf("tunnel %s routes %s, outside the allocation of %v\npeers: %+v", tp.Cluster, s, owners, peers)
			}
			for _, own := range append(local.Subnets, local.Private...) {
				if s.Overlaps(own) {
					t.Fatalf("tunnel %s routes %s over this cluster's %s", tp.Cluster, s, own)
				}
			}
		}
	}
	accounted := map[string]bool{}
	for _, tp := range d.Tunnel.Peers {
		accounted[tp.Cluster] = true
	}
	for id := range d.Via {
		accounted[id] = true
	}
	for _, r := range d.Refused {
		accounted[r.Cluster] = true
	}
	for _, p := range peers {
		if id := p.Spec.ClusterID; id != "" && id != local.ClusterID && p.DeletionTimestamp == nil && !accounted[id] {
			t.Fatalf("Peer %s of cluster %s is neither connected nor refused", p.Name, id)
		}
	}
	st := BuildStatus(nil, 1, "test", d, nil, nil, nil, time.Now())
	seen := map[string]bool{}
	for _, c := range st.Connections {
		if seen[c.ClusterID] {
			t.Fatalf("two connections of cluster %s in the status", c.ClusterID)
		}
		seen[c.ClusterID] = true
	}
}

// insideAny is the test's own containment check, independent of Compute's.
func insideAny(p netip.Prefix, in []netip.Prefix) bool {
	for _, a := range in {
		if a.Addr().BitLen() == p.Addr().BitLen() && a.Bits() <= p.Bits() && netip.PrefixFrom(p.Addr(), a.Bits()).Masked() == a.Masked() {
			return true
		}
	}
	return false
}

// TestComputeProperties checks the trust properties over many generated fleets, hostile
// Peers included.
func TestComputeProperties(t *testing.T) {
	for seed := range uint64(3000) {
		r := rand.New(rand.NewPCG(seed, 30))
		next := func(n int) int { return r.IntN(n) }
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkCompute(t, genLocal(next), genPeers(next)) })
	}
}

// FuzzCompute is TestComputeProperties driven by the fuzzer: the input is the sequence of
// choices (make fuzz FUZZ_TARGETS).
func FuzzCompute(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x05\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"))
	f.Add(binary.BigEndian.AppendUint64(nil, 0x0102030405060708))
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func(n int) int {
			if len(data) == 0 {
				return 0
			}
			b := int(data[0])
			data = data[1:]
			return b % n
		}
		checkCompute(t, genLocal(next), genPeers(next))
	})
}
