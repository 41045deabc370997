package cli

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

// TestShowVpcs: each Vpc's subnets, namespaces, the pods addressed on it (not those that only
// carry a stale VPC annotation without an address), its gateway's external IP and its conditions; a condition that is not
// True is printed with its message under the table. Then the VpcNatTunnels: each with its Vpc,
// remote cluster, gateway, type (wireguard when unset), remote address and Ready, and Ready's
// reason and message for every tunnel that is not Ready.
func TestShowVpcs(t *testing.T) {
	entry, err := podnet.Set("", &podnet.Status{Name: podnet.NetworkName, Interface: "net1", IPs: []string{"10.0.1.2"}})
	if err != nil {
		t.Fatal(err)
	}
	onRed := podnet.VpcAttachment{Vpc: "red", Subnet: "a", CIDR: netip.MustParsePrefix("10.0.1.0/24")}.Encode()
	pod := func(name string, a map[string]string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, Annotations: a}}
	}
	cond := func(typ string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg}
	}
	red := v1alpha1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "red"}, Spec: v1alpha1.VpcSpec{
		Subnets: []v1alpha1.VpcSubnet{{Name: "a", CIDR: "10.0.1.0/24"}, {Name: "b", CIDR: "10.0.2.0/24"}}, Namespaces: []string{"apps", "shared"}},
		Status: v1alpha1.VpcStatus{Conditions: []metav1.Condition{
			cond(v1alpha1.VpcConditionReady, metav1.ConditionFalse, v1alpha1.ReasonVpcInUse, "deletion waits: pod apps/web still use it"),
			cond(v1alpha1.VpcConditionNamespacesBound, metav1.ConditionTrue, "Bound", "")}}}
	red.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	blue := v1alpha1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "blue"}, Spec: v1alpha1.VpcSpec{
		Subnets: []v1alpha1.VpcSubnet{{Name: "a", CIDR: "10.0.1.0/24"}}, Namespaces: []string{"shared"}},
		Status: v1alpha1.VpcStatus{Conditions: []metav1.Condition{
			cond(v1alpha1.VpcConditionReady, metav1.ConditionTrue, "Applied", ""),
			cond(v1alpha1.VpcConditionNamespacesBound, metav1.ConditionFalse, v1alpha1.ReasonNamespaceConflict, "spec.namespaces: namespace shared is already bound to Vpc red")},
			Gateway: &v1alpha1.VpcGatewayStatus{ExternalIP: "242.1.0.9"}}}
	rows := vpcRows([]v1alpha1.Vpc{red, blue}, []corev1.Pod{
		pod("web", map[string]string{podnet.NetworkStatusAnnotation: entry, podnet.VpcAnnotation: onRed}),
		pod("db", map[string]string{podnet.NetworkStatusAnnotation: entry, podnet.VpcAnnotation: onRed}),
		pod("stale", map[string]string{podnet.VpcAnnotation: onRed}),
		pod("flat", map[string]string{podnet.NetworkStatusAnnotation: entry}),
	})
	tunnels := tunnelRows([]v1alpha1.VpcNatTunnel{
		{ObjectMeta: metav1.ObjectMeta{Name: "to-b"}, Spec: v1alpha1.VpcNatTunnelSpec{ClusterID: "b", GatewayName: "red", NatGwDp: "red", Type: v1alpha1.VpcTunnelVXLAN},
			Status: v1alpha1.VpcNatTunnelStatus{RemoteIP: "192.0.2.2", RemoteGlobalnetCIDR: "242.2.0.0/16", LocalGlobalnetCIDR: "242.1.0.0/16", Conditions: []metav1.Condition{
				cond(v1alpha1.VpcNatTunnelConditionRemoteGatewayFound, metav1.ConditionTrue, "Found", ""),
				cond(v1alpha1.VpcNatTunnelConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDataPlanePending, "the vxlan tunnel is not built yet")}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "gre"}, Spec: v1alpha1.VpcNatTunnelSpec{ClusterID: "c", GatewayName: "red", NatGwDp: "red", Type: v1alpha1.VpcTunnelGRE},
			Status: v1alpha1.VpcNatTunnelStatus{Conditions: []metav1.Condition{
				cond(v1alpha1.VpcNatTunnelConditionTunnelTypeSupported, metav1.ConditionFalse, v1alpha1.ReasonGREUnavailable, "spec.type gre: this kernel has no GRE"),
				cond(v1alpha1.VpcNatTunnelConditionReady, metav1.ConditionFalse, v1alpha1.ReasonGREUnavailable, "spec.type gre: this kernel has no GRE")}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Spec: v1alpha1.VpcNatTunnelSpec{ClusterID: "b", GatewayName: "blue", NatGwDp: "blue"}},
	})
	var b strings.Builder
	if err := renderVpcs(&b, vpcsReport{Vpcs: rows, Tunnels: tunnels}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"NAME  SUBNETS                      NAMESPACES   PODS  EXTERNAL IP  READY             NAMESPACES BOUND",
		"blue  a=10.0.1.0/24                shared       0     242.1.0.9    True              False",
		"red   a=10.0.1.0/24,b=10.0.2.0/24  apps,shared  2     -            False (deleting)  True",
		"Vpc blue: NamespacesBound=False (NamespaceConflict): spec.namespaces: namespace shared is already bound to Vpc red",
		"Vpc red: Ready=False (InUse): deletion waits: pod apps/web still use it",
		"",
		"TUNNEL  VPC   CLUSTER  GATEWAY  TYPE       REMOTE IP  REMOTE GLOBAL CIDR  READY",
		"gre     red   c        red      gre        -          -                   False",
		"new     blue  b        blue     wireguard  -          -                   -",
		"to-b    red   b        red      vxlan      192.0.2.2  242.2.0.0/16        False",
		"VpcNatTunnel gre: Ready=False (GREUnavailable): spec.type gre: this kernel has no GRE",
		"VpcNatTunnel to-b: Ready=False (DataPlanePending): the vxlan tunnel is not built yet",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("output:\n%s\nwant:\n%s", b.String(), strings.Join(want, "\n"))
	}
	js, err := json.Marshal(vpcsReport{Vpcs: rows, Tunnels: tunnels})
	if err != nil || !strings.Contains(string(js), `"name":"red","subnets":[{"name":"a","cidr":"10.0.1.0/24"}`) || !strings.Contains(string(js), `"pods":2`) || !strings.Contains(string(js), `"externalIP":"242.1.0.9"`) ||
		!strings.Contains(string(js), `"tunnels":[{"name":"gre","vpc":"red","clusterId":"c"`) || !strings.Contains(string(js), `"remoteIp":"192.0.2.2","remoteGlobalnetCidr":"242.2.0.0/16","localGlobalnetCidr":"242.1.0.0/16"`) {
		t.Errorf("JSON %s (%v)", js, err)
	}
}
