package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/ingressfilter"
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

// orderedIngress is an IngressWriter that records its calls in a shared log and can fail.
type orderedIngress struct {
	log     *[]string
	applied []ingressfilter.State
	errOn   error
}

func (f *orderedIngress) Apply(_ context.Context, s ingressfilter.State) error {
	*f.log = append(*f.log, "filter apply")
	if f.errOn != nil {
		return f.errOn
	}
	f.applied = append(f.applied, s)
	return nil
}

func (f *orderedIngress) Delete(context.Context) error {
	*f.log = append(*f.log, "filter delete")
	return nil
}

// orderedDriver is a tunnel.Driver that records its creation and closing in the shared log.
type orderedDriver struct {
	fakeDriver
	log *[]string
}

func (d *orderedDriver) Close() error {
	*d.log = append(*d.log, "driver close")
	return nil
}

// TestActiveTermFiltersBeforeTheTunnel: an active term writes the ingress filter, closed to
// everything but the health probes' echo (and, for vxlan, closed to every source), before it
// creates the tunnel driver, and deletes it only after the driver closed; a filter that cannot
// be opened or written ends the term with an error naming it and no tunnel is ever created
// (fail closed). The hub is never reached: the health prober, started after the driver,
// fails on purpose.
func TestActiveTermFiltersBeforeTheTunnel(t *testing.T) {
	errStopHere := errors.New("the prober ends the term here")
	broken := errors.New("nft: Operation not permitted")
	tests := []struct {
		name      string
		backend   v1alpha1.Backend
		openErr   error
		applyErr  error
		wantLog   string
		wantErr   string
		wantState string
	}{
		{
			name: "wireguard: filter, tunnel, tunnel closed, filter deleted", backend: v1alpha1.BackendWireGuard,
			wantLog:   "[filter apply driver new driver close filter delete]",
			wantState: "{Tunnels:[og-test] Destinations:[] HealthCheck:[10.101.0.1] VXLANPort:0 VXLANSources:[]}",
		},
		{
			name: "vxlan: the port accepts no source until a Peer is accepted", backend: v1alpha1.BackendVXLAN,
			wantLog:   "[filter apply driver new driver close filter delete]",
			wantState: "{Tunnels:[og-test] Destinations:[] HealthCheck:[10.101.0.1] VXLANPort:4500 VXLANSources:[]}",
		},
		{
			name: "a filter that cannot be opened: no tunnel", backend: v1alpha1.BackendVXLAN, openErr: broken,
			wantLog: "[]", wantErr: "opening the tunnel ingress filter (the gateway needs the nft binary and NET_ADMIN): nft: Operation not permitted",
		},
		{
			name: "a filter that cannot be written: no tunnel", backend: v1alpha1.BackendWireGuard, applyErr: broken,
			wantLog: "[filter apply]", wantErr: "writing the tunnel ingress filter before the tunnel comes up: nft: Operation not permitted",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log []string
			ingress := &orderedIngress{log: &log, errOn: tt.applyErr}
			o := Options{
				Member: &rest.Config{}, NodeName: "east-gw1", Backend: tt.backend, Device: "og-test",
				EndpointIP: netip.MustParseAddr("198.51.100.2"), HealthCheckIP: netip.MustParseAddr("10.101.0.1"),
				NewIngressFilter: func() (IngressWriter, error) {
					if tt.openErr != nil {
						return nil, tt.openErr
					}
					return ingress, nil
				},
				NewProber: func() (Prober, error) { return nil, errStopHere },
				NewDriver: func(string, tunnel.Options) (tunnel.Driver, error) {
					log = append(log, "driver new")
					return &orderedDriver{log: &log}, nil
				},
			}
			if err := o.setDefaults(); err != nil {
				t.Fatal(err)
			}
			err := (&active{o: o, at: hubAccess{ClusterID: "east"}}).run(t.Context())
			if got := fmt.Sprint(log); got != tt.wantLog {
				t.Errorf("calls %s, want %s", got, tt.wantLog)
			}
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Errorf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if !errors.Is(err, errStopHere) {
				t.Fatalf("error %v, want the prober's", err)
			}
			if len(ingress.applied) != 1 {
				t.Fatalf("filter states %+v, want one", ingress.applied)
			}
			if got := fmt.Sprintf("%+v", ingress.applied[0]); got != tt.wantState {
				t.Errorf("first filter state %s, want %s", got, tt.wantState)
			}
		})
	}
}
