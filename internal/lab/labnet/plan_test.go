package labnet

import (
	"net/netip"
	"strings"
	"testing"
)

func specs(n, nodes int) []ClusterSpec { return specsGW(n, nodes, 0) }

// specsGW is specs with gateways gateway nodes per cluster (0: the default).
func specsGW(n, nodes, gateways int) []ClusterSpec {
	var s []ClusterSpec
	for i := 1; i <= n; i++ {
		s = append(s, ClusterSpec{
			Name: "cluster" + string(rune('0'+i%10)) + strings.Repeat("x", i/10), Index: i,
			ServiceCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(96 + i), 0, 0}), 16), Nodes: nodes, Gateways: gateways,
		})
	}
	return s
}

type wantNode struct {
	name, netns, lan, underlay string
	gateway                    bool
}

func TestPlanAddresses(t *testing.T) {
	cases := map[string]struct {
		gateways int
		nodes    []wantNode
	}{
		"default one gateway": {0, []wantNode{
			{"cluster2-node1", "octo-ab12-cluster2-node1", "198.51.100.18/28", "203.0.113.17/24", true},
			{"cluster2-node2", "octo-ab12-cluster2-node2", "198.51.100.19/28", "invalid Prefix", false},
			{"cluster2-node3", "octo-ab12-cluster2-node3", "198.51.100.20/28", "invalid Prefix", false},
		}},
		"two gateways": {2, []wantNode{
			{"cluster2-node1", "octo-ab12-cluster2-node1", "198.51.100.18/28", "203.0.113.17/24", true},
			{"cluster2-node2", "octo-ab12-cluster2-node2", "198.51.100.19/28", "203.0.113.18/24", true},
			{"cluster2-node3", "octo-ab12-cluster2-node3", "198.51.100.20/28", "invalid Prefix", false},
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) { checkPlanAddresses(t, tc.gateways, tc.nodes) })
	}
}

func checkPlanAddresses(t *testing.T, gateways int, wantNodes []wantNode) {
	p, err := NewPlan("ab12", specsGW(2, 3, gateways), 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.APILink != "octo-ab12-api" || p.Underlay != "octo-ab12-underlay" {
		t.Errorf("APILink %q Underlay %q", p.APILink, p.Underlay)
	}
	c2 := p.Cluster("cluster2")
	if c2 == nil {
		t.Fatal("no cluster2")
	}
	want := struct{ uplink, uplinkAddr, lan string }{"octo-ab12-c2", "198.51.100.17/28", "octo-ab12-cluster2-lan"}
	if c2.Uplink != want.uplink || c2.UplinkAddr.String() != want.uplinkAddr || c2.LAN != want.lan {
		t.Errorf("cluster2: uplink %s %s lan %s, want %+v", c2.Uplink, c2.UplinkAddr, c2.LAN, want)
	}
	if len(c2.Nodes) != len(wantNodes) {
		t.Fatalf("%d nodes, want %d", len(c2.Nodes), len(wantNodes))
	}
	for i, w := range wantNodes {
		n := c2.Nodes[i]
		if n.Name != w.name || n.Netns != w.netns || n.LANAddr.String() != w.lan || n.UnderlayAddr.String() != w.underlay || n.Gateway != w.gateway {
			t.Errorf("node %d = %+v, want %+v", i, n, w)
		}
		if (n.UnderlayLink() != "") != w.gateway {
			t.Errorf("node %d: underlay link %q for gateway=%v", i, n.UnderlayLink(), w.gateway)
		}
	}
}

// TestPlanStaysInRanges checks the largest plan: every address in its documentation range,
// no two equal, every LAN address inside its cluster's /28 and not its network or broadcast
// address, every name within the kernel's limits and carrying the ownership prefixes. Every
// node but one is a gateway, so the underlay addresses are at their most numerous too.
func TestPlanStaysInRanges(t *testing.T) {
	p, err := NewPlan("0f0f", specsGW(MaxClusters, MaxNodesPerCluster, MaxNodesPerCluster-1), MaxHubGateways)
	if err != nil {
		t.Fatal(err)
	}
	gateways := 0
	seen := map[netip.Addr]string{APIAddress: "api"}
	check := func(what string, a netip.Prefix, in netip.Prefix) {
		t.Helper()
		if !in.Contains(a.Addr()) {
			t.Errorf("%s: %s outside %s", what, a, in)
		}
		if prev, dup := seen[a.Addr()]; dup {
			t.Errorf("%s: %s already used by %s", what, a, prev)
		}
		seen[a.Addr()] = what
	}
	for _, c := range p.Clusters {
		lan := c.UplinkAddr.Masked()
		check(c.Uplink, c.UplinkAddr, LANRange)
		if !strings.HasPrefix(c.Uplink, RootLinkOwnerPrefix("0f0f")) || len(c.Uplink) > maxIfNameLen {
			t.Errorf("uplink name %q", c.Uplink)
		}
		for _, n := range c.Nodes {
			check(n.Name, n.LANAddr, lan)
			last := nthAddr(lan, 1<<(32-lanBits)-1)
			if n.LANAddr.Addr() == lan.Addr() || n.LANAddr.Addr() == last {
				t.Errorf("%s: %s is the network or broadcast address of %s", n.Name, n.LANAddr, lan)
			}
			if n.Gateway {
				gateways++
				check(n.Name+" underlay", n.UnderlayAddr, UnderlayRange)
			}
			if !strings.HasPrefix(n.Netns, NetnsOwnerPrefix("0f0f")) {
				t.Errorf("netns %q lacks the owner prefix", n.Netns)
			}
			for _, l := range []string{n.port, n.underlayPort} {
				if len(l) > maxIfNameLen {
					t.Errorf("link name %q too long", l)
				}
			}
		}
	}
	if len(p.HubGateways) != MaxHubGateways {
		t.Fatalf("%d hub gateways in the plan, want %d", len(p.HubGateways), MaxHubGateways)
	}
	for _, h := range p.HubGateways {
		check(h.Name+" underlay", h.UnderlayAddr, UnderlayRange)
		check(h.Uplink, h.UplinkAddr, LANRange)
		check(h.Name+" uplink peer", h.Addr, LANRange)
		if h.UplinkAddr.Masked() != h.Addr.Masked() || h.Addr.Bits() != 31 {
			t.Errorf("%s uplink %s and %s are not one /31", h.Name, h.UplinkAddr, h.Addr)
		}
		if !strings.HasPrefix(h.Uplink, RootLinkOwnerPrefix("0f0f")) || len(h.Uplink) > maxIfNameLen || len(h.underlayPort) > maxIfNameLen {
			t.Errorf("%s link names %q, %q", h.Name, h.Uplink, h.underlayPort)
		}
		for _, c := range p.Clusters {
			if c.UplinkAddr.Overlaps(h.Addr) {
				t.Errorf("%s uplink %s overlaps cluster LAN %s", h.Name, h.Addr, c.UplinkAddr.Masked())
			}
		}
	}
	if want := MaxClusters * (MaxNodesPerCluster - 1); gateways != want {
		t.Errorf("%d gateway nodes, want %d", gateways, want)
	}
	if !LANRange.Contains(APIAddress) {
		t.Errorf("APIAddress %s outside %s: the root namespace would gain another range", APIAddress, LANRange)
	}
	for _, r := range []netip.Prefix{LANRange, UnderlayRange} {
		ok := false
		for _, doc := range []string{"192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"} {
			ok = ok || netip.MustParsePrefix(doc) == r.Masked()
		}
		if !ok {
			t.Errorf("%s is not a documentation range", r)
		}
	}
}

func TestPlanRejects(t *testing.T) {
	cases := map[string]struct {
		id          string
		specs       []ClusterSpec
		want        string
		hubGateways int
	}{
		"bad id":                {"XYZ1", specs(1, 2), "hex", 0},
		"too many":              {"aaaa", specs(MaxClusters+1, 2), "room for", 0},
		"one node":              {"aaaa", specs(1, 1), "gateway and at least one other node", 0},
		"too many nodes":        {"aaaa", specs(1, MaxNodesPerCluster+1), "want 2..13", 0},
		"duplicate":             {"aaaa", append(specs(1, 2), specs(1, 2)...), "given twice", 0},
		"no services":           {"aaaa", []ClusterSpec{{Name: "a", Index: 1, Nodes: 2}}, "service CIDR", 0},
		"more gateways":         {"aaaa", specsGW(1, 3, 4), "4 gateway nodes of 3 nodes, want 1..3", 0},
		"negative gateways":     {"aaaa", specsGW(1, 3, -1), "want 1..3", 0},
		"bad name":              {"aaaa", []ClusterSpec{{Name: "A_b", Index: 1, Nodes: 2, ServiceCIDR: netip.MustParsePrefix("10.96.0.0/16")}}, "cluster name", 0},
		"too many hub gateways": {"aaaa", specs(1, 2), "want 0..3", MaxHubGateways + 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := NewPlan(tc.id, tc.specs, tc.hubGateways)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestLabID(t *testing.T) {
	a, b := LabID("/var/lib/octopus/lab"), LabID("/tmp/other")
	if len(a) != idLen || a == b || a != LabID("/var/lib/octopus/lab") {
		t.Errorf("LabID: %q %q", a, b)
	}
	if _, err := NewPlan(a, specs(1, 2), 0); err != nil {
		t.Errorf("plan with LabID: %v", err)
	}
}
