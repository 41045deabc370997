package ovn

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
)

// rowsOf are the switches and switch ports ApplyVpc would write for the plans, as a gateway
// node's VpcGatewaysOn reads them.
func rowsOf(plans ...vpcPlan) ([]nbdb.LogicalSwitchPort, []nbdb.LogicalSwitch) {
	var ports []nbdb.LogicalSwitchPort
	var switches []nbdb.LogicalSwitch
	for _, p := range plans {
		for _, s := range p.subnets {
			switches = append(switches, nbdb.LogicalSwitch{Name: s.name, ExternalIDs: s.plan.switchIDs})
			ports = append(ports, s.plan.create...)
		}
		if g := p.gateway; g != nil {
			switches = append(switches, nbdb.LogicalSwitch{Name: "link", ExternalIDs: g.switchIDs})
			ports = append(ports, g.create...)
		}
	}
	return ports, switches
}

// TestVpcGatewaysOn reads back, from the rows ApplyVpc writes, the gateways a chassis must
// attach: its own cluster's VPCs whose gateway is requested there, each with its subnets,
// and the very attachment ApplyVpc reported; not another chassis's, another cluster's, a VPC
// without a gateway, nor the link switch's router port, which carries the same marks. A
// gateway port not as ApplyVpc writes it fails the answer.
func TestVpcGatewaysOn(t *testing.T) {
	subnets := []Subnet{{Name: "b", CIDR: netip.MustParsePrefix("10.1.1.0/24")}, {Name: "a", CIDR: netip.MustParsePrefix("10.1.0.0/24")}}
	plan := func(cluster, vpc, chassis string) vpcPlan {
		v := Vpc{ClusterID: cluster, Name: vpc, Subnets: subnets, Pods: []VpcPod{vpod("p1", "a")}}
		if chassis != "" {
			v.Gateway = &VpcGateway{Chassis: chassis}
		}
		return mustPlan(t, v, vpcObserved{})
	}
	red, blue := plan("east", "red", "node-a"), plan("east", "blue", "node-a")
	plans := []vpcPlan{red, blue, plan("east", "green", "node-b"), plan("east", "grey", ""), plan("west", "red", "node-a")}
	ports, switches := rowsOf(plans...)
	want := []VpcGatewayPort{
		{Vpc: "blue", Attachment: blue.result.Gateway, Subnets: []netip.Prefix{subnets[1].CIDR, subnets[0].CIDR}},
		{Vpc: "red", Attachment: red.result.Gateway, Subnets: []netip.Prefix{subnets[1].CIDR, subnets[0].CIDR}},
	}
	for _, tc := range []struct {
		cluster, chassis string
		want             []VpcGatewayPort
	}{
		{"east", "node-a", want},
		{"east", "node-b", []VpcGatewayPort{{Vpc: "green", Attachment: plans[2].result.Gateway, Subnets: want[0].Subnets}}},
		{"east", "node-c", nil},
		{"west", "node-a", []VpcGatewayPort{{Vpc: "red", Attachment: plans[4].result.Gateway, Subnets: want[0].Subnets}}},
	} {
		got, err := vpcGatewaysOn(tc.cluster, tc.chassis, ports, switches)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(got, tc.want, func(a, b VpcGatewayPort) bool {
			return a.Vpc == b.Vpc && a.Equal(b.Attachment) && slices.Equal(a.Subnets, b.Subnets)
		}) {
			t.Errorf("vpcGatewaysOn(%s, %s) = %+v, want %+v", tc.cluster, tc.chassis, got, tc.want)
		}
	}
	if g := want[1].Attachment; g.IP.String() != "100.127.255.254/30" || g.Gateway.String() != "100.127.255.253" || g.Port != "octopus-east.red.gateway.port" {
		t.Errorf("red's gateway %+v", g)
	}

	// A gateway port whose address is not the link's gateway address refuses the whole answer.
	for i := range ports {
		if ports[i].Name == VpcGatewayPortName("east", "red") {
			ports[i].Addresses = []string{"0a:58:64:7f:ff:fe 10.9.9.9"}
		}
	}
	if got, err := vpcGatewaysOn("east", "node-a", ports, switches); err == nil || !strings.Contains(err.Error(), "octopus-east.red.gateway.port") {
		t.Errorf("vpcGatewaysOn with a malformed port = %+v, %v; want an error naming it", got, err)
	}
}
