package podport

import (
	"slices"
	"testing"
)

// TestParseExternalIDs reads interfaces as ovs-vsctl 3.1 prints them: a pod's, br-int's own,
// one of someone else's, the cluster gateway's and a VPC gateway's. Sweep reads the sandbox
// key, so it never sees the gateways' ports; the VPC gateway loop reads its own key alone.
func TestParseExternalIDs(t *testing.T) {
	out := `{"data":[` +
		`[["map",[["iface-id","east_default_a"],["octopus-sandbox","0123abcd"]]]],` +
		`[["map",[]]],` +
		`[["map",[["iface-id","other"]]]],` +
		`[["map",[["iface-id","east_gateway"],["octopus-gateway","east_gateway"]]]],` +
		`[["map",[["iface-id","octopus-east.red.gateway.port"],["octopus-vpc-gateway","red"]]]]` +
		`],"headings":["external_ids"]}`
	for _, tc := range []struct {
		key  string
		want []string
	}{
		{externalIDSandbox, []string{"0123abcd"}},
		{externalIDVpcGateway, []string{"red"}},
		{externalIDGateway, []string{"east_gateway"}},
		{"absent", nil},
	} {
		got, err := parseExternalIDs([]byte(out), tc.key)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("parseExternalIDs(%s) = %v, want %v", tc.key, got, tc.want)
		}
	}
	if _, err := parseExternalIDs([]byte("not json"), externalIDSandbox); err == nil {
		t.Fatal("parseExternalIDs of garbage succeeded")
	}
}

// TestVpcGatewayNames checks that the node end of a VPC gateway's veth fits the kernel's 15
// bytes for every VPC name, differs between VPCs, and can be neither a pod's node end ("oct"
// + sandbox hex digits) nor the cluster gateway's links; and that the namespace names are the
// prefix and the VPC.
func TestVpcGatewayNames(t *testing.T) {
	long := "a23456789012345678901234567890123456789012345678901234567890123"
	seen := map[string]string{}
	for _, vpc := range []string{"red", "blue", "gateway", long, long[:62] + "b"} {
		link := VpcGatewayNodeLink(vpc)
		if len(link) != 15 {
			t.Errorf("VpcGatewayNodeLink(%q) = %q, %d bytes: want 15", vpc, link, len(link))
		}
		if other, ok := seen[link]; ok {
			t.Errorf("VPCs %q and %q share the node link %q", vpc, other, link)
		}
		seen[link] = vpc
		if link == GatewayLink || link == GatewayBridgePort || link == LinkName(link[3:]) && isHex(link[3:]) {
			t.Errorf("VpcGatewayNodeLink(%q) = %q can be another interface's name", vpc, link)
		}
		if got := VpcGatewayNetns(vpc); got != "octvpc-"+vpc || len(got) > 70 {
			t.Errorf("VpcGatewayNetns(%q) = %q", vpc, got)
		}
	}
}

func isHex(s string) bool {
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}
