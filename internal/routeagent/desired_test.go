package routeagent

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/octopus-mcs/octopus/internal/datapath/route"
)

func TestDesired(t *testing.T) {
	gw4, gw6 := netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("2001:db8:ff::2")
	remote := []netip.Prefix{netip.MustParsePrefix("10.98.0.0/16"), netip.MustParsePrefix("2001:db8:2::/56"), netip.MustParsePrefix("10.2.0.0/16"), netip.MustParsePrefix("2001:db8:98::/112")}
	r := func(dst string, via netip.Addr) route.Route {
		return route.Route{Dst: netip.MustParsePrefix(dst), Via: via}
	}
	tests := []struct {
		name string
		self string
		gw   Gateway
		want []route.Route
	}{
		{"IPv4-only gateway node: IPv4 CIDRs via it, sorted; IPv6 ones have no next hop", "c1-node2", Gateway{Node: "c1-node1", Addrs: []netip.Addr{gw4}},
			[]route.Route{r("10.2.0.0/16", gw4), r("10.98.0.0/16", gw4)}},
		{"dual-stack gateway node: each CIDR via the address of its family", "c1-node2", Gateway{Node: "c1-node1", Addrs: []netip.Addr{gw4, gw6}},
			[]route.Route{r("10.2.0.0/16", gw4), r("10.98.0.0/16", gw4), r("2001:db8:2::/56", gw6), r("2001:db8:98::/112", gw6)}},
		{"IPv6-only gateway node", "c1-node2", Gateway{Node: "c1-node1", Addrs: []netip.Addr{gw6}},
			[]route.Route{r("2001:db8:2::/56", gw6), r("2001:db8:98::/112", gw6)}},
		{"IPv4-mapped IPv6 address counts as IPv4", "c1-node2", Gateway{Node: "c1-node1", Addrs: []netip.Addr{netip.AddrFrom16(gw4.As16())}},
			[]route.Route{r("10.2.0.0/16", gw4), r("10.98.0.0/16", gw4)}},
		{"gateway node leaves routing to its tunnel driver", "c1-node1", Gateway{Node: "c1-node1", Addrs: []netip.Addr{gw4, gw6}}, nil},
		{"no gateway elected yet", "c1-node2", Gateway{}, nil},
		{"gateway node without InternalIP", "c1-node2", Gateway{Node: "c1-node1"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Desired(tt.self, tt.gw, remote); !slices.Equal(got, tt.want) {
				t.Fatalf("Desired = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestInternalIPs(t *testing.T) {
	addr := func(typ corev1.NodeAddressType, a string) corev1.NodeAddress {
		return corev1.NodeAddress{Type: typ, Address: a}
	}
	tests := []struct {
		name string
		in   []corev1.NodeAddress
		want []string
	}{
		{"IPv4 only", []corev1.NodeAddress{addr(corev1.NodeInternalIP, "198.51.100.2")}, []string{"198.51.100.2"}},
		{"dual-stack, IPv6 listed first: IPv4 first all the same", []corev1.NodeAddress{
			addr(corev1.NodeInternalIP, "2001:db8:ff::2"), addr(corev1.NodeInternalIP, "198.51.100.2")}, []string{"198.51.100.2", "2001:db8:ff::2"}},
		{"the first of each family", []corev1.NodeAddress{addr(corev1.NodeInternalIP, "198.51.100.2"), addr(corev1.NodeInternalIP, "198.51.100.3"),
			addr(corev1.NodeInternalIP, "2001:db8:ff::2"), addr(corev1.NodeInternalIP, "2001:db8:ff::3")}, []string{"198.51.100.2", "2001:db8:ff::2"}},
		{"IPv6 only", []corev1.NodeAddress{addr(corev1.NodeInternalIP, "2001:db8:ff::2")}, []string{"2001:db8:ff::2"}},
		{"ExternalIP, hostname and garbage ignored", []corev1.NodeAddress{addr(corev1.NodeExternalIP, "203.0.113.9"), addr(corev1.NodeHostName, "c1-node1"),
			addr(corev1.NodeInternalIP, "not-an-ip"), addr(corev1.NodeInternalIP, "2001:db8:ff::2")}, []string{"2001:db8:ff::2"}},
		{"none", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, a := range InternalIPs(&corev1.Node{Status: corev1.NodeStatus{Addresses: tt.in}}) {
				got = append(got, a.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("InternalIPs = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSubnetsConfigMapRoundTrip(t *testing.T) {
	in := []netip.Prefix{netip.MustParsePrefix("10.98.0.0/16"), netip.MustParsePrefix("10.2.0.0/16"), netip.MustParsePrefix("10.2.0.0/16")}
	cm := SubnetsConfigMap(in)
	if got := cm.Data[SubnetsKey]; got != "10.2.0.0/16\n10.98.0.0/16" {
		t.Fatalf("rendered %q", got)
	}
	out, err := ParseSubnets(cm)
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16"), netip.MustParsePrefix("10.98.0.0/16")}; !slices.Equal(out, want) {
		t.Fatalf("parsed %v, want %v", out, want)
	}
}

func TestParseSubnets(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		want    []string
		wantErr string
	}{
		{"empty", "", nil, ""},
		{"host bits are masked", "10.2.3.4/16\n", []string{"10.2.0.0/16"}, ""},
		{"bad line keeps the good ones", "10.2.0.0/16\nbogus\n 10.3.0.0/16 ", []string{"10.2.0.0/16", "10.3.0.0/16"}, `"bogus"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSubnets(&corev1.ConfigMap{Data: map[string]string{SubnetsKey: tt.data}})
			if (err != nil) != (tt.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			var s []string
			for _, p := range got {
				s = append(s, p.String())
			}
			if !slices.Equal(s, tt.want) {
				t.Fatalf("got %v, want %v", s, tt.want)
			}
		})
	}
}
