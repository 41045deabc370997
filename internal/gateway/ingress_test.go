package gateway

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
)

func prefixStrings(ps []netip.Prefix) []string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return s
}

func TestIngressState(t *testing.T) {
	hc := netip.MustParseAddr("10.1.0.1")
	d := Desired{Tunnel: tunnel.Config{Peers: []tunnel.Peer{
		{Cluster: "b", Endpoint: netip.MustParseAddrPort("172.18.0.3:4500"), Subnets: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}},
		{Cluster: "c", Endpoint: netip.MustParseAddrPort("172.18.0.4:4500"), Subnets: []netip.Prefix{netip.MustParsePrefix("10.3.0.0/16")}},
	}}}
	own := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.96.0.0/16")}
	tests := []struct {
		name  string
		local Local
		want  string
	}{
		{
			name:  "a wireguard member lets out only its own subnets, filters no port",
			local: Local{Backend: v1alpha1.BackendWireGuard, ListenPort: 4500, Subnets: own},
			want:  "{Tunnels:[octopus0] Destinations:[10.1.0.0/16 10.96.0.0/16] HealthCheck:[10.1.0.1] VXLANPort:0 VXLANSources:[]}",
		},
		{
			name:  "a vxlan member accepts vxlan from the accepted Peers' endpoints alone",
			local: Local{Backend: v1alpha1.BackendVXLAN, ListenPort: 4500, Subnets: own},
			want:  "{Tunnels:[octopus0] Destinations:[10.1.0.0/16 10.96.0.0/16] HealthCheck:[10.1.0.1] VXLANPort:4500 VXLANSources:[172.18.0.3 172.18.0.4]}",
		},
		{
			name:  "a globalnet member lets out only its global CIDR, never its private ones",
			local: Local{Backend: v1alpha1.BackendWireGuard, Subnets: []netip.Prefix{netip.MustParsePrefix("242.1.0.0/16")}, Private: own},
			want:  "{Tunnels:[octopus0] Destinations:[242.1.0.0/16] HealthCheck:[10.1.0.1] VXLANPort:0 VXLANSources:[]}",
		},
		{
			name:  "the hub's gateway forwards between the members",
			local: Local{Role: v1alpha1.PeerRoleHub, Backend: v1alpha1.BackendWireGuard, Subnets: []netip.Prefix{netip.PrefixFrom(hc, 32)}},
			want:  "{Tunnels:[octopus0] Destinations:[10.1.0.1/32 10.2.0.0/16 10.3.0.0/16] HealthCheck:[10.1.0.1] VXLANPort:0 VXLANSources:[]}",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fmt.Sprintf("%+v", ingressState(tt.local, hc, "octopus0", d)); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}
