package crd_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
)

func validVpc() *v1alpha1.Vpc {
	return &v1alpha1.Vpc{
		ObjectMeta: metav1.ObjectMeta{Name: "red"},
		Spec: v1alpha1.VpcSpec{
			Subnets:    []v1alpha1.VpcSubnet{{Name: "a", CIDR: "10.0.1.0/24"}, {Name: "b", CIDR: "10.0.2.0/30"}},
			Namespaces: []string{"red-apps", "red-db"},
		},
	}
}

func withSubnets(subnets ...v1alpha1.VpcSubnet) func() client.Object {
	return func() client.Object {
		v := validVpc()
		v.Spec.Subnets = subnets
		return v
	}
}

func validVpcNatTunnel() *v1alpha1.VpcNatTunnel {
	return &v1alpha1.VpcNatTunnel{
		ObjectMeta: metav1.ObjectMeta{Name: "red-to-cluster2"},
		Spec: v1alpha1.VpcNatTunnelSpec{
			ClusterID: "cluster2", GatewayName: "red", InterfaceAddr: "10.100.0.1/24", NatGwDp: "red",
		},
	}
}

func validGatewayExIP() *v1alpha1.GatewayExIp {
	return &v1alpha1.GatewayExIp{
		ObjectMeta: metav1.ObjectMeta{Name: "red-cluster1", Namespace: ns},
		Spec:       v1alpha1.GatewayExIPSpec{ExternalIP: "192.0.2.10", GlobalnetCIDR: "242.1.0.0/16"},
	}
}

// TestVpcSchemaValidation sends each kind of bad VPC input to a real API server serving the
// generated CRDs: every rule refuses its input with a message naming the field and the fix,
// and the valid objects (VPCs overlapping each other included) pass.
func TestVpcSchemaValidation(t *testing.T) {
	c := servingCRDs(t, crd.Member)

	sub := func(name, cidr string) v1alpha1.VpcSubnet { return v1alpha1.VpcSubnet{Name: name, CIDR: cidr} }
	tests := []struct {
		name    string
		obj     func() client.Object
		wantErr string // empty: must be accepted
	}{
		{"valid Vpc", func() client.Object { return validVpc() }, ""},
		{"valid VpcNatTunnel", func() client.Object { return validVpcNatTunnel() }, ""},
		{"valid VpcDnsForward", func() client.Object {
			return &v1alpha1.VpcDnsForward{ObjectMeta: metav1.ObjectMeta{Name: "red"}, Spec: v1alpha1.VpcDNSForwardSpec{Vpc: "red"}}
		}, ""},
		{"valid GatewayExIp", func() client.Object { return validGatewayExIP() }, ""},
		{"a VPC with the cluster network's CIDR", withSubnets(sub("a", "10.112.0.0/16")), ""},

		{"Vpc name not a label", func() client.Object {
			v := validVpc()
			v.Name = "red.tenant"
			return v
		}, "metadata.name must be an RFC 1123 label"},
		{"no subnet", withSubnets(), "spec.subnets: Required value"},
		{"subnet CIDR not a CIDR", withSubnets(sub("a", "10.0.1.0")), `spec.subnets[0].cidr: Invalid value: "10.0.1.0": must be an IPv4 CIDR no longer than /30`},
		{"subnet CIDR IPv6", withSubnets(sub("a", "fd00::/64")), `spec.subnets[0].cidr: Invalid value: "fd00::/64": must be an IPv4 CIDR`},
		{"subnet CIDR /31", withSubnets(sub("a", "10.0.1.0/31")), "must be an IPv4 CIDR no longer than /30"},
		{"subnet over the gateway link", withSubnets(sub("a", "100.64.0.0/10")), `spec.subnets[0].cidr: Invalid value: "100.64.0.0/10": must not overlap 100.127.255.252/30, the link between the VPC's router and its gateway`},
		// The rule spells the data plane's link block out; this row fails if they part.
		{"subnet inside the gateway link", withSubnets(sub("a", ovn.VpcGatewayLink.String())), "must not overlap " + ovn.VpcGatewayLink.String()},
		{"subnet beside the gateway link", withSubnets(sub("a", "100.127.255.248/30")), ""},
		{"subnet CIDR with host bits", withSubnets(sub("a", "10.0.1.5/24")), "spec.subnets[0].cidr: Invalid value: \"10.0.1.5/24\": must be the block's network address: write the CIDR with its host bits zero"},
		{"subnet name not a label", withSubnets(sub("A_1", "10.0.1.0/24")), "spec.subnets[0].name: Invalid value: \"A_1\": must be an RFC 1123 label"},
		{"two subnets of one name", withSubnets(sub("a", "10.0.1.0/24"), sub("a", "10.0.2.0/24")), "spec.subnets[1]: Duplicate value"},
		{"two subnets overlapping", withSubnets(sub("a", "10.0.0.0/16"), sub("b", "10.0.2.0/24")), "spec.subnets: two subnets of one VPC overlap; give each subnet a CIDR of its own"},
		{"two subnets overlapping the other way", withSubnets(sub("a", "10.0.2.0/24"), sub("b", "10.0.0.0/16")), "two subnets of one VPC overlap"},
		{"the same CIDR twice", withSubnets(sub("a", "10.0.2.0/24"), sub("b", "10.0.2.0/24")), "two subnets of one VPC overlap"},
		{"namespace listed twice", func() client.Object {
			v := validVpc()
			v.Spec.Namespaces = []string{"red-apps", "red-apps"}
			return v
		}, "spec.namespaces[1]: Duplicate value"},
		{"namespace not a label", func() client.Object {
			v := validVpc()
			v.Spec.Namespaces = []string{"Red"}
			return v
		}, "spec.namespaces[0]: Invalid value: \"Red\": must be a namespace name"},

		{"tunnel to a cluster ID that is not a label", func() client.Object {
			tun := validVpcNatTunnel()
			tun.Spec.ClusterID = "Cluster_2"
			return tun
		}, "spec.clusterId: Invalid value: \"Cluster_2\": must be a cluster ID"},
		{"tunnel interface address without a prefix", func() client.Object {
			tun := validVpcNatTunnel()
			tun.Spec.InterfaceAddr = "10.100.0.1"
			return tun
		}, "spec.interfaceAddr: Invalid value: \"10.100.0.1\": must be an IPv4 address with its prefix length"},
		{"tunnel of an unknown type", func() client.Object {
			tun := validVpcNatTunnel()
			tun.Spec.Type = "ipip"
			return tun
		}, `spec.type: Unsupported value: "ipip"`},
		{"tunnel without its local gateway", func() client.Object {
			tun := validVpcNatTunnel()
			tun.Spec.NatGwDp = ""
			return tun
		}, "spec.natGwDp"},
		{"GatewayExIp external IP not an IP", func() client.Object {
			g := validGatewayExIP()
			g.Spec.ExternalIP = "gw.example.com"
			return g
		}, "spec.externalip: Invalid value: \"gw.example.com\": must be an IP address"},
		{"GatewayExIp global CIDR not a CIDR", func() client.Object {
			g := validGatewayExIP()
			g.Spec.GlobalnetCIDR = "242.1.0.0"
			return g
		}, "spec.globalnetcidr: Invalid value: \"242.1.0.0\": must be a CIDR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkAdmission(t, c, tt.obj(), tt.wantErr) })
	}

	// The tunnel type defaults to WireGuard, the default.
	tun := validVpcNatTunnel()
	if err := c.Create(t.Context(), tun); err != nil {
		t.Fatal(err)
	}
	if tun.Spec.Type != v1alpha1.VpcTunnelWireGuard {
		t.Errorf("spec.type defaulted to %q, want wireguard", tun.Spec.Type)
	}
}
