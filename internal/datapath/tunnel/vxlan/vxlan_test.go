package vxlan

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/octopus-mcs/octopus/internal/datapath/route"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
)

func TestMACFor(t *testing.T) {
	for _, tt := range []struct{ addr, want string }{
		{"203.0.113.1", "02:6f:cb:00:71:01"},
		{"::ffff:203.0.113.1", "02:6f:cb:00:71:01"}, // a mapped address is the same gateway
		{"10.0.0.2", "02:6f:0a:00:00:02"},
	} {
		if got := MACFor(netip.MustParseAddr(tt.addr)).String(); got != tt.want {
			t.Errorf("MACFor(%s) = %s, want %s", tt.addr, got, tt.want)
		}
	}
	a, b := MACFor(netip.MustParseAddr("2001:db8::1")), MACFor(netip.MustParseAddr("2001:db8::2"))
	if a.String() == b.String() || !strings.HasPrefix(a.String(), "02:6f:") || len(a) != 6 {
		t.Fatalf("IPv6 MACs %s and %s", a, b)
	}
}

func TestValidate(t *testing.T) {
	local := netip.MustParseAddr("203.0.113.1")
	ep := netip.MustParseAddrPort("203.0.113.2:4789")
	sub := []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}
	for _, tt := range []struct {
		name, wantErr string
		cfg           tunnel.Config
	}{
		{name: "ok", cfg: tunnel.Config{ListenPort: 4789, LocalAddr: local, Peers: []tunnel.Peer{{Cluster: "b", Endpoint: ep, Subnets: sub}}}},
		{name: "no local address", wantErr: "LocalAddr", cfg: tunnel.Config{ListenPort: 4789}},
		{name: "other port", wantErr: "same tunnel port", cfg: tunnel.Config{ListenPort: 4790, LocalAddr: local, Peers: []tunnel.Peer{{Cluster: "b", Endpoint: ep}}}},
		{name: "mixed families", wantErr: "IP families", cfg: tunnel.Config{ListenPort: 4789, LocalAddr: netip.MustParseAddr("2001:db8::1"), Peers: []tunnel.Peer{{Cluster: "b", Endpoint: ep}}}},
		{name: "subnet of the other family", wantErr: "IP family", cfg: tunnel.Config{ListenPort: 4789, LocalAddr: local, Peers: []tunnel.Peer{
			{Cluster: "b", Endpoint: ep, Subnets: []netip.Prefix{netip.MustParsePrefix("fd00::/64")}}}}},
		{name: "shared endpoint", wantErr: "share the endpoint", cfg: tunnel.Config{ListenPort: 4789, LocalAddr: local, Peers: []tunnel.Peer{
			{Cluster: "b", Endpoint: ep}, {Cluster: "c", Endpoint: ep}}}},
		{name: "shared subnet", wantErr: "claimed by two peers", cfg: tunnel.Config{ListenPort: 4789, LocalAddr: local, Peers: []tunnel.Peer{
			{Cluster: "b", Endpoint: ep, Subnets: sub}, {Cluster: "c", Endpoint: netip.MustParseAddrPort("203.0.113.3:4789"), Subnets: sub}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			routes, _, err := validate(tt.cfg)
			if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("validate = %v, want %q", err, tt.wantErr)
			}
			if want := []route.Route{{Dst: sub[0], Via: ep.Addr()}}; err == nil && !slices.Equal(routes, want) {
				t.Fatalf("routes = %v, want %s via the peer's underlay address %s", routes, sub[0], ep.Addr())
			}
		})
	}
}
