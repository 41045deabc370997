package gateway

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// TestComputeFamilies checks the families Compute reports per connection in a mixed cluster
// set: a dual-stack pair carries both, a dual-stack and an IPv4-only cluster carry IPv4 and
// say which side has no IPv6 (in both directions), an IPv6-only pair carries IPv6, a cluster
// reached through the hub's gateway is judged on its own subnets, and the hub's gateway,
// local or remote, reports none. IPv6 subnets are accepted over an IPv4 underlay (WireGuard
// carries both families whatever the endpoint's).
func TestComputeFamilies(t *testing.T) {
	const keyH = "aGhoaGhoaGhoaGhoaGhoaGhoaGhoaGhoaGhoaGhoaGg="
	hubPeer := peer(v1alpha1.HubPeerName, keyH, "203.0.113.250", 4500, "10.0.0.1/32")
	hubPeer.Spec.Role = v1alpha1.PeerRoleHub
	dual := peer("dual", keyB, "203.0.113.17", 4500, "10.2.0.0/16", "2001:db8:2::/56", "10.98.0.0/16", "2001:db8:98::/112")
	v4 := peer("v4", keyC, "203.0.113.33", 4500, "10.3.0.0/16")
	v6 := peer("v6", keyOf("v6"), "2001:db8:ff::6", 4500, "2001:db8:6::/56")
	viaHub := peer("far", keyOf("far"), "203.0.113.49", 4500, "10.4.0.0/16", "2001:db8:4::/56")
	viaHub.Spec.Topology = v1alpha1.TopologyHub
	local := func(subnets ...string) Local {
		return Local{ClusterID: "a", Backend: v1alpha1.BackendWireGuard, Subnets: prefixes(subnets...)}
	}
	both, only4, only6 := []string{"IPv4", "IPv6"}, []string{"IPv4"}, []string{"IPv6"}
	tests := []struct {
		name  string
		local Local
		peers []v1alpha1.Peer
		// want maps each cluster to its carried families and the phrases its message must hold
		// (none: the message must be empty).
		want map[string]struct {
			carried []string
			msg     []string
		}
	}{
		{"dual-stack local", local("10.1.0.0/16", "2001:db8:1::/56"), []v1alpha1.Peer{hubPeer, dual, v4, v6, viaHub},
			map[string]struct {
				carried []string
				msg     []string
			}{
				"dual": {both, nil},
				"v4":   {only4, []string{"IPv6 is not offered between a and v4", "cluster v4 advertises no IPv6 subnet", "this cluster does (2001:db8:1::/56)"}},
				"v6":   {only6, []string{"IPv4 is not offered between a and v6", "cluster v6 advertises no IPv4 subnet"}},
				"far":  {both, nil},
			}},
		{"IPv4-only local", local("10.1.0.0/16"), []v1alpha1.Peer{dual, v4},
			map[string]struct {
				carried []string
				msg     []string
			}{
				"dual": {only4, []string{"IPv6 is not offered between a and dual", "this cluster advertises no IPv6 subnet", "cluster dual does (2001:db8:2::/56, 2001:db8:98::/112)"}},
				"v4":   {only4, nil},
			}},
		{"IPv6-only local", local("2001:db8:1::/56"), []v1alpha1.Peer{v6},
			map[string]struct {
				carried []string
				msg     []string
			}{"v6": {only6, nil}}},
		{"vxlan over an IPv4 underlay: the IPv6 subnets are withheld, and that is what it says",
			Local{ClusterID: "a", Backend: v1alpha1.BackendVXLAN, ListenPort: 4500, LocalAddr: netip.MustParseAddr("203.0.113.1"), Subnets: prefixes("10.1.0.0/16", "2001:db8:1::/56")},
			[]v1alpha1.Peer{vxlanPeer(dual)},
			map[string]struct {
				carried []string
				msg     []string
			}{"dual": {only4, []string{"IPv6 is not offered between a and dual", "cluster dual's IPv6 subnets (2001:db8:2::/56, 2001:db8:98::/112) are withheld", "SubnetsAccepted"}}}},
		{"hub gateway as local: nothing to say", Local{ClusterID: v1alpha1.HubPeerName, Role: v1alpha1.PeerRoleHub, Backend: v1alpha1.BackendWireGuard, Subnets: prefixes("10.0.0.1/32")},
			[]v1alpha1.Peer{dual, v4}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := computeHonest(tt.local, tt.peers)
			if len(d.Refused) > 0 {
				t.Fatalf("refused: %+v", d.Refused)
			}
			var got []string
			for id := range d.Families {
				got = append(got, id)
			}
			var want []string
			for id := range tt.want {
				want = append(want, id)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("families reported for %v, want %v (the hub's gateway never)", got, want)
			}
			for id, w := range tt.want {
				f := d.Families[id]
				if !slices.Equal(f.Carried, w.carried) {
					t.Errorf("%s: carried %v, want %v", id, f.Carried, w.carried)
				}
				if len(w.msg) == 0 && f.Message != "" {
					t.Errorf("%s: message %q, want none", id, f.Message)
				}
				for _, m := range w.msg {
					if !strings.Contains(f.Message, m) {
						t.Errorf("%s: message %q\nwant it to contain %q", id, f.Message, m)
					}
				}
			}
			// What reaches the status: every connection of an accepted member has its
			// families, the hub gateway's connection none.
			st := BuildStatus(nil, 1, "wireguard-go", d, nil, nil, nil, time.Now())
			for _, c := range st.Connections {
				f := d.Families[c.ClusterID]
				if !reflect.DeepEqual(c.IPFamilies, f.Carried) || c.FamilyMessage != f.Message {
					t.Errorf("connection %s: ipFamilies %v familyMessage %q, want %v %q", c.ClusterID, c.IPFamilies, c.FamilyMessage, f.Carried, f.Message)
				}
			}
		})
	}
}

func TestFamilyName(t *testing.T) {
	for in, want := range map[string]string{"10.0.0.0/8": "IPv4", "2001:db8::/32": "IPv6", "::ffff:10.0.0.0/104": "IPv6"} {
		if got := familyName(netip.MustParsePrefix(in)); got != want {
			t.Errorf("familyName(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestComputeAdvertisedIsAllocatedPerFamily is the advertised = allocated rule on dual-stack
// registrations: a Peer's IPv6 subnets must lie inside its own registered IPv6 CIDRs like its
// IPv4 ones inside its IPv4 CIDRs; another cluster's IPv6 range, an IPv6 supernet of its own and
// an IPv4-mapped form of its IPv4 range are withheld, and the rest of the Peer is used.
func TestComputeAdvertisedIsAllocatedPerFamily(t *testing.T) {
	local := Local{ClusterID: "a", Backend: v1alpha1.BackendWireGuard, Subnets: prefixes("10.1.0.0/16", "2001:db8:1::/56"),
		Allocated: map[string][]netip.Prefix{
			"b": Allocation(v1alpha1.ClusterSpec{PodCIDRs: []string{"10.2.0.0/16", "2001:db8:2::/56"}, ServiceCIDRs: []string{"2001:db8:98::/112", "10.98.0.0/16"}}),
			"c": Allocation(v1alpha1.ClusterSpec{PodCIDRs: []string{"2001:db8:3::/56"}, ServiceCIDRs: []string{"2001:db8:99::/112"}}),
		}}
	for _, tt := range []struct {
		name         string
		subnets      []string
		wantSubnets  []string
		wantWithheld []string // "" when nothing is withheld
	}{
		{"both families inside the allocation", []string{"10.2.0.0/16", "2001:db8:2::/56", "2001:db8:98::/112", "10.98.0.0/16"},
			[]string{"10.2.0.0/16", "10.98.0.0/16", "2001:db8:2::/56", "2001:db8:98::/112"}, nil},
		{"a part of its IPv6 pod CIDR", []string{"2001:db8:2:80::/57"}, []string{"2001:db8:2:80::/57"}, nil},
		{"another cluster's IPv6 CIDR and an IPv6 supernet of its own", []string{"2001:db8:2::/56", "2001:db8:3::/56", "2001:db8::/48"},
			[]string{"2001:db8:2::/56"}, []string{"cluster b advertises 2001:db8:3::/56, 2001:db8::/48 outside"}},
		{"IPv4-mapped form of its IPv4 pod CIDR", []string{"10.2.0.0/16", "::ffff:10.2.0.0/112"}, []string{"10.2.0.0/16"}, []string{"::ffff:10.2.0.0/112"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := peer("b", keyB, "203.0.113.17", 4500, tt.subnets...)
			d := Compute(local, []v1alpha1.Peer{b})
			if len(d.Refused) > 0 || len(d.Tunnel.Peers) != 1 {
				t.Fatalf("tunnels %+v, refused %+v", d.Tunnel.Peers, d.Refused)
			}
			var got []string
			for _, s := range d.Tunnel.Peers[0].Subnets {
				got = append(got, s.String())
			}
			if !slices.Equal(got, tt.wantSubnets) {
				t.Errorf("subnets %v, want %v", got, tt.wantSubnets)
			}
			if len(tt.wantWithheld) == 0 && len(d.Withheld) > 0 {
				t.Errorf("withheld %+v, want nothing", d.Withheld)
			}
			for _, w := range tt.wantWithheld {
				if len(d.Withheld) != 1 || !strings.Contains(d.Withheld[0].Message, w) {
					t.Errorf("withheld %+v, want one message containing %q", d.Withheld, w)
				}
			}
		})
	}
}

// vxlanPeer is p on the vxlan backend.
func vxlanPeer(p v1alpha1.Peer) v1alpha1.Peer {
	p.Spec.Backend = v1alpha1.BackendVXLAN
	return p
}
