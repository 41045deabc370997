package nriplugin

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"

	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

// inVpc is a pod addressed ip on subnet a (10.0.1.0/24) of VPC red, whose other subnet is b.
func inVpc(ip string, vpcValue string) *corev1.Pod {
	a := withAddress(ip)
	if vpcValue == "" {
		vpcValue = podnet.VpcAttachment{Vpc: "red", Subnet: "a", CIDR: netip.MustParsePrefix("10.0.1.0/24"),
			Routes: []netip.Prefix{netip.MustParsePrefix("10.0.2.0/24")}}.Encode()
	}
	a[podnet.VpcAnnotation] = vpcValue
	return pod(a)
}

// TestVpcPodAttachment: a pod the ovnmaster placed on a VPC gets net1 on the VPC's port, with
// its subnet's prefix length, routes to the VPC's other subnets through the VPC router and none
// to other clusters (the cluster's Routes), and an address outside its subnet fails the sandbox.
func TestVpcPodAttachment(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		want    podport.Attachment
		wantErr string
	}{
		{name: "VPC pod", pod: inVpc("10.0.1.5", ""), want: podport.Attachment{
			Port: "east_red_default_web", IP: netip.MustParsePrefix("10.0.1.5/24"),
			Routes: []podport.Route{{Dst: netip.MustParsePrefix("10.0.2.0/24"), Via: netip.MustParseAddr("10.0.1.1")}},
		}},
		{name: "an address in the cluster's block but not in the VPC's subnet", pod: inVpc("10.112.0.5", ""),
			wantErr: "not in subnet a (10.0.1.0/24) of its VPC red"},
		{name: "a malformed VPC annotation", pod: inVpc("10.0.1.5", `{"vpc":"red"}`), wantErr: "no subnet CIDR"},
		{name: "without the VPC annotation the cluster's network", pod: pod(withAddress("10.112.0.5")), want: podport.Attachment{
			Port: "east_default_web", IP: netip.MustParsePrefix("10.112.0.5/16"),
			Routes: []podport.Route{{Dst: netip.MustParsePrefix("10.113.0.0/16"), Via: netip.MustParseAddr("10.112.0.1")}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ifaces := &fakeInterfaces{}
			p, err := New(testConfig, &fakePods{versions: []*corev1.Pod{tc.pod}}, ifaces, testr.New(t))
			if err != nil {
				t.Fatal(err)
			}
			err = p.RunPodSandbox(context.Background(), sandbox("default", nil, true))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("RunPodSandbox = %v, want an error saying %q", err, tc.wantErr)
				}
				if len(ifaces.attached) != 0 {
					t.Fatalf("attached %+v after a refusal", ifaces.attached)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(ifaces.attached) != 1 {
				t.Fatalf("%d attachments, want 1", len(ifaces.attached))
			}
			a := ifaces.attached[0]
			if a.Port != tc.want.Port || a.IP != tc.want.IP || !slices.Equal(a.Routes, tc.want.Routes) || a.Interface != "net1" {
				t.Errorf("attachment port %s, IP %s, routes %v; want %s, %s, %v", a.Port, a.IP, a.Routes, tc.want.Port, tc.want.IP, tc.want.Routes)
			}
		})
	}
}
