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
	gwAddr := netip.MustParseAddr("198.51.100.2")
	remote := []netip.Prefix{netip.MustParsePrefix("10.98.0.0/16"), netip.MustParsePrefix("10.2.0.0/16"), netip.MustParsePrefix("fd00:2::/48")}
	tests := []struct {
		name string
		self string
		gw   Gateway
		want []route.Route
	}{
		{"worker routes every IPv4 CIDR via the gateway, sorted", "c1-node2", Gateway{Node: "c1-node1", Addr: gwAddr},
			[]route.Route{{Dst: netip.MustParsePrefix("10.2.0.0/16"), Via: gwAddr}, {Dst: netip.MustParsePrefix("10.98.0.0/16"), Via: gwAddr}}},
		{"gateway node leaves routing to its tunnel driver", "c1-node1", Gateway{Node: "c1-node1", Addr: gwAddr}, nil},
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
