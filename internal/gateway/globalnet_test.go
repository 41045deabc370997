package gateway

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/datapath/nat"
	"github.com/octopus-mcs/octopus/internal/globalnet"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/ipam"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// lastNAT is the last state applied to the gateway's NAT, and how often it was deleted.
func (g *runningGateway) lastNAT() (nat.State, bool, int) {
	g.nat.mu.Lock()
	defer g.nat.mu.Unlock()
	if len(g.nat.applied) == 0 {
		return nat.State{}, false, g.nat.deletes
	}
	return g.nat.applied[len(g.nat.applied)-1], true, g.nat.deletes
}

// TestGlobalnetGateway runs real gateways (fake tunnel drivers and NAT) of two globalnet
// clusters with the same pod CIDR against a real hub: each Peer advertises the global CIDR and
// the layout's health-check address and the two accept each other; the active gateway's NAT
// gets the exported Service's global IP onto its ready endpoint and the other cluster's global
// CIDR as remote; a standby deletes any NAT of its node; after a failover the new active
// gateway applies the same state. East joins with an egress range of 4 addresses (the default
// is 8): its NAT's egress range and the pool its global IPs come from follow the Cluster.
func TestGlobalnetGateway(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east", "west")
	ctx := t.Context()
	info, err := hub.Deploy(ctx, env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podCIDR := env.Cluster("east").PodCIDR.String() // the same in both: an overlapping fleet
	layouts := map[string]v1alpha1.ClusterSpec{}
	for name, egressSize := range map[string]int32{"east": 4, "west": 0} {
		joined, err := cluster.Join(ctx, env.Cluster(name).RESTConfig(), cluster.JoinOptions{
			BrokerInfo: info, ClusterID: name, PodCIDRs: []string{podCIDR}, Addressing: v1alpha1.AddressingGlobalnet,
			GlobalEgressSize: egressSize,
		})
		if err != nil {
			t.Fatalf("joining %s: %v", name, err)
		}
		layouts[name] = joined.Cluster.Spec
	}
	eastLayout, err := globalnet.ClusterLayout(layouts["east"])
	if err != nil {
		t.Fatal(err)
	}
	westLayout, err := globalnet.ClusterLayout(layouts["west"])
	if err != nil {
		t.Fatal(err)
	}
	// East's egress range is the first 4 addresses of its global CIDR, and its pool starts
	// right after them: worked out here, not by the layout code under test.
	eastFirst := eastLayout.CIDR.Addr()
	eastEgress := ipam.Range{First: eastFirst, Last: eastFirst.Next().Next().Next()}
	hubc := newClient(t, env.Cluster("hub").RESTConfig())
	eastCfg, westCfg := env.Cluster("east").RESTConfig(), env.Cluster("west").RESTConfig()
	east, west := newClient(t, eastCfg), newClient(t, westCfg)
	testenv.AddNode(t, east, "east-gw1", "198.51.100.2", "10.101.0.0/24")
	testenv.AddNode(t, east, "east-gw2", "198.51.100.3", "10.101.1.0/24")
	testenv.AddNode(t, west, "west-gw1", "198.51.100.18", "10.101.0.0/24")

	// An exported Service of east with one ready endpoint and its allocated global IP, as the
	// agent's allocator leaves them.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
	}}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.101.0.7"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	// The first address of a 4-address egress range's pool: inside the egress range of the
	// default size, where the NAT would not translate it.
	globalIP := eastEgress.Last.Next()
	record := &v1alpha1.GlobalIngressIP{
		ObjectMeta: metav1.ObjectMeta{Name: "svc-web", Namespace: "default", Labels: kube.ManagedLabels()},
		Spec:       v1alpha1.GlobalIngressIPSpec{Target: v1alpha1.GlobalIngressTarget{Kind: v1alpha1.GlobalIngressTargetService, Name: "web"}},
	}
	for _, o := range []client.Object{svc, slice, record} {
		if err := east.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	record.Status.IP = globalIP.String()
	meta.SetStatusCondition(&record.Status.Conditions, metav1.Condition{Type: v1alpha1.GlobalIngressIPConditionAllocated, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAllocated})
	if err := east.Status().Update(ctx, record); err != nil {
		t.Fatal(err)
	}

	gw1 := startGateway(t, eastCfg, "east-gw1", "203.0.113.1")
	wgw := startGateway(t, westCfg, "west-gw1", "203.0.113.17")
	for _, c := range []struct {
		id     string
		cidr   netip.Prefix
		hc     netip.Addr
		remote netip.Prefix
	}{{"east", eastLayout.CIDR, eastLayout.HealthCheck, westLayout.CIDR}, {"west", westLayout.CIDR, westLayout.HealthCheck, eastLayout.CIDR}} {
		eventually(t, c.id+"'s Peer advertises its global CIDR and accepts the other cluster", func() error {
			p := &v1alpha1.Peer{}
			if err := hubc.Get(ctx, client.ObjectKey{Namespace: info.Namespace, Name: c.id}, p); err != nil {
				return err
			}
			if !slices.Equal(p.Spec.Subnets, []string{c.cidr.String()}) || p.Spec.HealthCheckIP != c.hc.String() {
				return fmt.Errorf("subnets %v, health check %s; want [%s], %s", p.Spec.Subnets, p.Spec.HealthCheckIP, c.cidr, c.hc)
			}
			if !meta.IsStatusConditionTrue(p.Status.Conditions, ConditionPeersAccepted) {
				return fmt.Errorf("conditions %+v", p.Status.Conditions)
			}
			return nil
		})
	}
	wantNAT := func(g *runningGateway) error {
		s, ok, _ := g.lastNAT()
		if !ok {
			return fmt.Errorf("no NAT applied by %s", g.node)
		}
		want := fmt.Sprint(nat.State{
			GlobalCIDRs: []netip.Prefix{eastLayout.CIDR}, RemoteCIDRs: []netip.Prefix{westLayout.CIDR}, ClusterEgress: s.ClusterEgress,
			TunnelDevice: "og-test", // the gateway's Options.Device: egress only through the tunnel
			Services: []nat.Service{{Name: "default/web", GlobalIP: globalIP, Ports: []nat.Port{{Protocol: nat.TCP, Port: 80,
				Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.101.0.7:8080")}}}}},
		})
		if fmt.Sprint(s) != want || len(s.ClusterEgress) != 1 || s.ClusterEgress[0] != eastEgress {
			return fmt.Errorf("%s's NAT\n got %+v\nwant %s, egress %s", g.node, s, want, eastEgress)
		}
		return nil
	}
	eventually(t, "east's active gateway translates the Service's global IP", func() error { return wantNAT(gw1) })

	// A standby deletes whatever NAT its node holds and applies none.
	gw2 := startGateway(t, eastCfg, "east-gw2", "203.0.113.2")
	eventually(t, "the standby deletes its node's NAT", func() error {
		if _, applied, deletes := gw2.lastNAT(); applied || deletes == 0 {
			return fmt.Errorf("applied %v, deleted %d times", applied, deletes)
		}
		return nil
	})

	// Failover: the new active gateway translates the same.
	gw1.stop(t)
	eventually(t, "gw2 takes over with the same NAT", func() error { return wantNAT(gw2) })
	_ = wgw
}
