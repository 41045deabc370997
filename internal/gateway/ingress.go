package gateway

import (
	"context"
	"net/netip"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/ingressfilter"
)

// IngressWriter is the tunnel ingress filter of the gateway's node (ingressfilter.Filter; a
// fake in tests).
type IngressWriter interface {
	Apply(ctx context.Context, s ingressfilter.State) error
	Delete(ctx context.Context) error
}

// newIngressFilter is the default of Options.NewIngressFilter: nftables in the process's
// network namespace.
func newIngressFilter() (IngressWriter, error) { return ingressfilter.New() }

// ingressState is what may come out of the tunnel for the desired state d: this cluster's
// advertised prefixes (under globalnet its global CIDR, never its private pod CIDR; on the
// hub's gateway, the members' prefixes it forwards between, which are all it carries), the
// health-check address for the probes' echo, and, for vxlan, datagrams from the remote
// gateways' endpoints only.
func ingressState(local Local, hc netip.Addr, device string, d Desired) ingressfilter.State {
	s := ingressfilter.State{Tunnels: []string{device}, Destinations: append([]netip.Prefix(nil), local.Subnets...)}
	if hc.IsValid() {
		s.HealthCheck = []netip.Addr{hc}
	}
	if local.Role == v1alpha1.PeerRoleHub {
		s.Destinations = append(s.Destinations, d.RemoteSubnets()...)
	}
	if local.Backend == v1alpha1.BackendVXLAN {
		s.VXLANPort = local.ListenPort
		for _, p := range d.Tunnel.Peers {
			s.VXLANSources = append(s.VXLANSources, p.Endpoint.Addr())
		}
	}
	return s
}
