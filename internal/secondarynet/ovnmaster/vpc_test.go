package ovnmaster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr/testr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
	"github.com/octopus-mcs/octopus/internal/secondarynet/nriplugin"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func vpcObj(name string, created time.Time, namespaces []string, subnets ...string) v1alpha1.Vpc {
	v := v1alpha1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec: v1alpha1.VpcSpec{Namespaces: namespaces}}
	for i := 0; i+1 < len(subnets); i += 2 {
		v.Spec.Subnets = append(v.Spec.Subnets, v1alpha1.VpcSubnet{Name: subnets[i], CIDR: subnets[i+1]})
	}
	return v
}

func TestBindings(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	deleting := vpcObj("gone", t0.Add(-time.Hour), []string{"a"})
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	for _, tc := range []struct {
		name      string
		vpcs      []v1alpha1.Vpc
		bound     map[string]string
		conflicts map[string]string // Vpc → a word its message must hold
	}{
		{name: "disjoint", vpcs: []v1alpha1.Vpc{vpcObj("red", t0, []string{"a"}), vpcObj("blue", t0, []string{"b"})},
			bound: map[string]string{"a": "red", "b": "blue"}},
		{name: "the older keeps a shared namespace, whatever the list order",
			vpcs:      []v1alpha1.Vpc{vpcObj("blue", t0.Add(time.Second), []string{"s", "b"}), vpcObj("red", t0, []string{"s"})},
			bound:     map[string]string{"s": "red", "b": "blue"},
			conflicts: map[string]string{"blue": "namespace s is already bound to Vpc red"}},
		{name: "same age: the name decides", vpcs: []v1alpha1.Vpc{vpcObj("zed", t0, []string{"s"}), vpcObj("abc", t0, []string{"s"})},
			bound: map[string]string{"s": "abc"}, conflicts: map[string]string{"zed": "spec.namespaces"}},
		{name: "a Vpc being deleted binds nothing and holds nothing", vpcs: []v1alpha1.Vpc{deleting, vpcObj("red", t0, []string{"a"})},
			bound: map[string]string{"a": "red"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bound, conflicts := Bindings(tc.vpcs)
			if fmt.Sprint(bound) != fmt.Sprint(tc.bound) {
				t.Errorf("bound = %v, want %v", bound, tc.bound)
			}
			if len(conflicts) != len(tc.conflicts) {
				t.Errorf("conflicts = %v, want on %v", conflicts, tc.conflicts)
			}
			for vpc, word := range tc.conflicts {
				if msg := strings.Join(conflicts[vpc], "; "); !strings.Contains(msg, word) {
					t.Errorf("conflict of %s = %q, want it to say %q", vpc, msg, word)
				}
			}
		})
	}
}

// TestVpcGatewayOn: a VPC's gateway is on the active gateway's node, none without one, and
// none (saying which subnet is in the way, and what to do) when a subnet covers the link.
func TestVpcGatewayOn(t *testing.T) {
	subnets := func(cidrs ...string) ovn.Vpc {
		v := ovn.Vpc{ClusterID: "east", Name: "red"}
		for i, c := range cidrs {
			v.Subnets = append(v.Subnets, ovn.Subnet{Name: fmt.Sprintf("s%d", i), CIDR: netip.MustParsePrefix(c)})
		}
		return v
	}
	for _, tc := range []struct {
		name, chassis string
		v             ovn.Vpc
		want          string // the gateway's chassis, "" for none
		says          string
	}{
		{"on the active gateway's node", "node-a", subnets("10.0.1.0/24"), "node-a", "its gateway on node-a"},
		{"no active gateway", "", subnets("10.0.1.0/24"), "", "no gateway (no active gateway node)"},
		{"a subnet over the link", "node-a", subnets("10.0.1.0/24", "100.64.0.0/10"), "",
			"no gateway: spec.subnets[1] (s1, 100.64.0.0/10) overlaps 100.127.255.252/30, the link between the VPC's router and its gateway; give the subnet a CIDR outside it"},
		{"a subnet beside the link", "node-a", subnets("100.127.255.248/30"), "node-a", "its gateway on node-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw, says := VpcGatewayOn(tc.v, tc.chassis)
			got := ""
			if gw != nil {
				got = gw.Chassis
			}
			if got != tc.want || says != tc.says {
				t.Errorf("VpcGatewayOn = %q, %q; want %q, %q", got, says, tc.want, tc.says)
			}
		})
	}
}

// TestVpcWantsExternalIP: a Vpc that can have a gateway wants an address, whether or not a
// gateway node is active; one whose spec is invalid or whose subnet covers the gateway link
// does not; one being deleted keeps the address it holds and asks for none.
func TestVpcWantsExternalIP(t *testing.T) {
	deleting := func(v v1alpha1.Vpc, ip string) v1alpha1.Vpc {
		v.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		if ip != "" {
			v.Status.Gateway = &v1alpha1.VpcGatewayStatus{ExternalIP: ip}
		}
		return v
	}
	for _, tc := range []struct {
		name string
		v    v1alpha1.Vpc
		want bool
	}{
		{"a valid Vpc", vpcObj("red", time.Time{}, nil, "a", "10.0.1.0/24"), true},
		{"a subnet over the gateway link", vpcObj("red", time.Time{}, nil, "a", "10.0.1.0/24", "b", "100.64.0.0/10"), false},
		{"overlapping subnets", vpcObj("red", time.Time{}, nil, "a", "10.0.0.0/16", "b", "10.0.1.0/24"), false},
		{"being deleted, holding an address", deleting(vpcObj("red", time.Time{}, nil, "a", "10.0.1.0/24"), "242.1.0.9"), true},
		{"being deleted, holding none", deleting(vpcObj("red", time.Time{}, nil, "a", "10.0.1.0/24"), ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := VpcWantsExternalIP(&tc.v); got != tc.want {
				t.Errorf("VpcWantsExternalIP = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestVpcAttachment: a VPC pod routes the VPC's other subnets and the hub's globalnet pool
// through its router, the pool only when it is known and apart from every subnet.
func TestVpcAttachment(t *testing.T) {
	p := netip.MustParsePrefix
	vpc := ovn.Vpc{Name: "red", Subnets: []ovn.Subnet{{Name: "a", CIDR: p("10.200.1.0/24")}, {Name: "b", CIDR: p("10.200.2.0/24")}}}
	att := ovn.Attachment{IP: p("10.200.2.7/24")}
	for _, tc := range []struct {
		name string
		vpc  ovn.Vpc
		pool netip.Prefix
		want []netip.Prefix
	}{
		{"the other subnet and the pool", vpc, p("242.0.0.0/8"), []netip.Prefix{p("10.200.1.0/24"), p("242.0.0.0/8")}},
		{"no pool known", vpc, netip.Prefix{}, []netip.Prefix{p("10.200.1.0/24")}},
		{"a pool over a subnet is not routed", ovn.Vpc{Name: "odd", Subnets: []ovn.Subnet{{Name: "a", CIDR: p("242.1.0.0/24")}, {Name: "b", CIDR: p("10.200.2.0/24")}}},
			p("242.0.0.0/8"), []netip.Prefix{p("242.1.0.0/24")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := vpcAttachment(tc.vpc, att, tc.pool)
			if got.Vpc != tc.vpc.Name || got.Subnet != "b" || got.CIDR != p("10.200.2.0/24") || !slices.Equal(got.Routes, tc.want) {
				t.Fatalf("vpcAttachment = %+v, want subnet b 10.200.2.0/24 with routes %v", got, tc.want)
			}
		})
	}
}

// TestDesiredVpc: what the API server's CEL refuses is refused here too, naming the field, so a
// Vpc admitted without that validation is never half-applied.
func TestDesiredVpc(t *testing.T) {
	t0 := time.Now()
	for _, tc := range []struct {
		name    string
		vpc     v1alpha1.Vpc
		want    []ovn.Subnet
		wantErr string
	}{
		{name: "two subnets", vpc: vpcObj("red", t0, nil, "a", "10.0.1.0/24", "b", "10.0.2.0/24"),
			want: []ovn.Subnet{{Name: "a", CIDR: netip.MustParsePrefix("10.0.1.0/24")}, {Name: "b", CIDR: netip.MustParsePrefix("10.0.2.0/24")}}},
		{name: "overlapping subnets", vpc: vpcObj("red", t0, nil, "a", "10.0.0.0/16", "b", "10.0.2.0/24"),
			wantErr: "spec.subnets[1] (b, 10.0.2.0/24) overlaps spec.subnets[0] (a, 10.0.0.0/16): give each subnet of a VPC a CIDR of its own"},
		{name: "host bits set", vpc: vpcObj("red", t0, nil, "a", "10.0.1.5/24"), wantErr: "spec.subnets[0].cidr \"10.0.1.5/24\""},
		{name: "IPv6", vpc: vpcObj("red", t0, nil, "a", "fd00::/64"), wantErr: "not an IPv4 network address"},
		{name: "no subnet", vpc: vpcObj("red", t0, nil), wantErr: "spec.subnets is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DesiredVpc("east", &tc.vpc)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("DesiredVpc = %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got.ClusterID != "east" || got.Name != "red" || !slices.Equal(got.Subnets, tc.want) {
				t.Fatalf("DesiredVpc = %+v, %v; want subnets %v", got, err, tc.want)
			}
		})
	}
}

// vpcEnv is a member control plane with the CRDs, namespaces, and an ovnmaster running with
// nothing but its generated RBAC against nb.
func vpcEnv(t *testing.T, nb *ovntest.Server, namespaces ...string) client.Client {
	t.Helper()
	return vpcEnvWith(t, nb, nil, namespaces...)
}

// vpcEnvWith is vpcEnv with the ovnmaster's options edited by edit (nil: none).
func vpcEnvWith(t *testing.T, nb *ovntest.Server, edit func(*Options), namespaces ...string) client.Client {
	t.Helper()
	env := testenv.ControlPlanes(t, clusterID)
	cfg := env.Cluster(clusterID).RESTConfig()
	testenv.InstallCRDs(t, cfg)
	admin := testenv.Client(t, cfg)
	for _, ns := range append([]string{"octopus-system"}, namespaces...) {
		if err := admin.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	masterWith(t, asOVNMaster(t, admin, cfg), nb, edit)
	return admin
}

func createVpc(t *testing.T, c client.Client, name string, namespaces []string, subnets ...string) {
	t.Helper()
	v := vpcObj(name, time.Time{}, namespaces, subnets...)
	v.CreationTimestamp = metav1.Time{}
	if err := c.Create(t.Context(), &v); err != nil {
		t.Fatal(err)
	}
}

// vpcCondition waits until the Vpc's condition typ has status and reason and its message
// holds every one of words.
func vpcCondition(t *testing.T, c client.Client, name, typ string, status metav1.ConditionStatus, reason string, words ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("Vpc %s %s=%s (%s)", name, typ, status, reason), func(ctx context.Context) string {
		v := &v1alpha1.Vpc{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, v); err != nil {
			return err.Error()
		}
		cond := meta.FindStatusCondition(v.Status.Conditions, typ)
		if cond == nil || cond.Status != status || cond.Reason != reason {
			return fmt.Sprintf("conditions %+v", v.Status.Conditions)
		}
		for _, w := range words {
			if !strings.Contains(cond.Message, w) {
				return fmt.Sprintf("message %q lacks %q", cond.Message, w)
			}
		}
		return ""
	})
}

// vpcAddressOf waits for the pod's address and VPC annotation and checks that they agree: the
// address in the named subnet, the MAC derived from it.
func vpcAddressOf(t *testing.T, c client.Client, ns, name, vpc, subnet string) netip.Addr {
	t.Helper()
	var addr netip.Addr
	eventually(t, "pod "+ns+"/"+name+" addressed on VPC "+vpc, func(ctx context.Context) string {
		pod, err := getPod(ctx, c, ns, name)
		if err != nil {
			return err.Error()
		}
		s, ok, err := podnet.Find(pod.Annotations)
		if err != nil || !ok {
			return fmt.Sprintf("no address (%v); annotations %v", err, pod.Annotations)
		}
		a, ok, err := podnet.FindVpc(pod.Annotations)
		if err != nil || !ok || a.Vpc != vpc || a.Subnet != subnet {
			return fmt.Sprintf("VPC annotation %+v (%v), want VPC %s subnet %s", a, err, vpc, subnet)
		}
		addr = netip.MustParseAddr(s.IPs[0])
		if !a.CIDR.Contains(addr) || s.MAC != ovn.MACFor(addr).String() {
			t.Fatalf("pod %s/%s: entry %+v not in its subnet %s or with a MAC not derived from its address", ns, name, s, a.CIDR)
		}
		return ""
	})
	return addr
}

// switchPorts is the pods' port names on a logical switch (all but the router's), read with
// ovn-nbctl.
func switchPorts(ctx context.Context, nb *ovntest.Server, sw string) (string, error) {
	out, err := nb.Ctl(ctx, "lsp-list", sw)
	if err != nil {
		return "", err
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && !strings.HasSuffix(f[1], ".router)") {
			names = append(names, strings.Trim(f[1], "()"))
		}
	}
	slices.Sort(names)
	return strings.Join(names, ","), nil
}

func waitSwitchPorts(t *testing.T, nb *ovntest.Server, sw string, want ...string) {
	t.Helper()
	slices.Sort(want)
	eventually(t, "pods' ports on "+sw, func(ctx context.Context) string {
		got, err := switchPorts(ctx, nb, sw)
		if err != nil {
			return err.Error()
		}
		if got != strings.Join(want, ",") {
			return fmt.Sprintf("ports %s, want %v", got, want)
		}
		return ""
	})
}

// vpcRows counts the NB rows of a VPC, by its external_ids marker, in every table it writes.
func vpcRows(ctx context.Context, nb *ovntest.Server, vpc string) (int, error) {
	n := 0
	for _, table := range []string{"Logical_Router", "Logical_Router_Port", "Logical_Switch", "Logical_Switch_Port"} {
		out, err := nb.Ctl(ctx, "--bare", "--columns=_uuid", "find", table, "external_ids:octopus.io/vpc="+vpc)
		if err != nil {
			return 0, err
		}
		n += len(strings.Fields(out))
	}
	return n, nil
}

// waitVpcGatewayChassis waits until the VPC's gateway port is requested on want, or, for "",
// until the VPC has no gateway port.
func waitVpcGatewayChassis(t *testing.T, nb *ovntest.Server, vpc, want string) {
	t.Helper()
	port := ovn.VpcGatewayPortName(clusterID, vpc)
	eventually(t, fmt.Sprintf("VPC %s's gateway port requested on %q", vpc, want), func(ctx context.Context) string {
		out, err := nb.Ctl(ctx, "--bare", "--columns=options", "find", "Logical_Switch_Port", "name="+port)
		if err != nil {
			return err.Error()
		}
		got := strings.TrimSpace(out)
		switch {
		case want == "" && got != "":
			return "a gateway port with options " + got + ", want none"
		case want != "" && got != "requested-chassis="+want:
			return fmt.Sprintf("gateway port options %q", got)
		}
		return ""
	})
}

func deletePod(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	if err := c.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// TestVpcController runs the ovnmaster, with its generated RBAC only, against a real API
// server and NB database: Vpcs red and blue with identical subnets get their rows and their
// namespaces' pods addresses from their own switches, a namespace both list stays with the
// older (the other's condition says so), a subnet added later appears, a Vpc deleted while its
// pods live waits with a condition and keeps its rows, and once they are gone leaves no row.
func TestVpcController(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and an NB database")
	}
	nb := ovntest.StartNB(t)
	c := vpcEnv(t, nb, "red-apps", "blue-apps", "shared", "shop")
	ctx := t.Context()

	createVpc(t, c, "red", []string{"red-apps", "shared"}, "a", "10.0.1.0/24", "b", "10.0.2.0/24")
	vpcCondition(t, c, "red", v1alpha1.VpcConditionReady, metav1.ConditionTrue, ReasonVpcApplied)
	// This cluster has no global CIDR: no external address, and the condition says why.
	vpcCondition(t, c, "red", v1alpha1.VpcConditionExternalIP, metav1.ConditionFalse, v1alpha1.ReasonNoGlobalCIDR, "no global CIDR", "--global-cidr")
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has seconds: blue must be younger
	createVpc(t, c, "blue", []string{"blue-apps", "shared"}, "a", "10.0.1.0/24", "b", "10.0.2.0/24")
	vpcCondition(t, c, "blue", v1alpha1.VpcConditionNamespacesBound, metav1.ConditionFalse, v1alpha1.ReasonNamespaceConflict,
		"spec.namespaces", "namespace shared is already bound to Vpc red")
	vpcCondition(t, c, "red", v1alpha1.VpcConditionNamespacesBound, metav1.ConditionTrue, ReasonVpcBound)
	vpcCondition(t, c, "blue", v1alpha1.VpcConditionReady, metav1.ConditionTrue, ReasonVpcApplied)

	// The API server refuses overlapping subnets before the controller sees them
	// (TestVpcSchemaValidation has every rule); DesiredVpc refuses them too (TestDesiredVpc).
	bad := vpcObj("bad", time.Time{}, nil, "a", "10.0.0.0/16", "b", "10.0.2.0/24")
	if err := c.Create(ctx, &bad); err == nil || !strings.Contains(err.Error(), "spec.subnets") {
		t.Errorf("a Vpc with overlapping subnets was admitted or refused without naming spec.subnets: %v", err)
	}

	createPod(t, c, "red-apps", "web")
	createPod(t, c, "red-apps", "db", annotated(podnet.VpcSubnetAnnotation, "b"))
	createPod(t, c, "red-apps", "typo", annotated(podnet.VpcSubnetAnnotation, "z"))
	createPod(t, c, "blue-apps", "web")
	createPod(t, c, "shared", "s")
	createPod(t, c, "shop", "c")
	redWeb := vpcAddressOf(t, c, "red-apps", "web", "red", "a")
	blueWeb := vpcAddressOf(t, c, "blue-apps", "web", "blue", "a")
	if redWeb != blueWeb {
		t.Errorf("red's first pod %s, blue's %s: identical subnets should hand out the same first address", redWeb, blueWeb)
	}
	redDB := vpcAddressOf(t, c, "red-apps", "db", "red", "b")
	if !netip.MustParsePrefix("10.0.2.0/24").Contains(redDB) {
		t.Errorf("pod db asked for subnet b and got %s", redDB)
	}
	vpcAddressOf(t, c, "shared", "s", "red", "a")
	errorOf(t, c, "red-apps", "typo", `asks for subnet "z"`)
	if a := addressOf(t, c, "shop", "c"); !cidr.Contains(a) {
		t.Errorf("the unbound namespace's pod got %s, outside the cluster's block", a)
	}
	waitSwitchPorts(t, nb, ovn.VpcSubnetName(clusterID, "red", "a"), "east_red_red-apps_web", "east_red_shared_s")
	waitSwitchPorts(t, nb, ovn.VpcSubnetName(clusterID, "red", "b"), "east_red_red-apps_db")
	waitSwitchPorts(t, nb, ovn.VpcSubnetName(clusterID, "blue", "a"), "east_blue_blue-apps_web")
	waitPorts(t, nb, "east_shop_c") // the cluster's switch has only the unbound namespace's pod

	// Update: a third subnet appears, the pods keep their addresses.
	red := &v1alpha1.Vpc{}
	if err := c.Get(ctx, client.ObjectKey{Name: "red"}, red); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(red.Finalizers, VpcFinalizer) {
		t.Errorf("Vpc red's finalizers %v lack %s", red.Finalizers, VpcFinalizer)
	}
	red.Spec.Subnets = append(red.Spec.Subnets, v1alpha1.VpcSubnet{Name: "c", CIDR: "10.0.3.0/24"})
	if err := c.Update(ctx, red); err != nil {
		t.Fatal(err)
	}
	eventually(t, "subnet c's switch and router port", func(ctx context.Context) string {
		out, err := nb.Ctl(ctx, "lrp-list", ovn.VpcRouterName(clusterID, "red"))
		if err != nil {
			return err.Error()
		}
		if !strings.Contains(out, ovn.VpcSubnetName(clusterID, "red", "c")) {
			return "router ports: " + out
		}
		out, err = nb.Ctl(ctx, "ls-list")
		if err != nil || !strings.Contains(out, ovn.VpcSubnetName(clusterID, "red", "c")) {
			return fmt.Sprintf("switches: %s (%v)", out, err)
		}
		return ""
	})
	vpcCondition(t, c, "red", v1alpha1.VpcConditionReady, metav1.ConditionTrue, ReasonVpcApplied, "3 subnet(s)")
	if got := vpcAddressOf(t, c, "red-apps", "web", "red", "a"); got != redWeb {
		t.Errorf("pod web had %s before the new subnet, %s after", redWeb, got)
	}

	// The active gateway: every VPC's gateway port is requested on its node, where the
	// cluster's is, and follows a takeover; none before there is one.
	waitVpcGatewayChassis(t, nb, "red", "")
	waitVpcGatewayChassis(t, nb, "blue", "")
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "octopus-system", Name: "octopus-gateway"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a"), LeaseDurationSeconds: ptr.To(int32(15))},
	}
	if err := c.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"red", "blue"} {
		waitVpcGatewayChassis(t, nb, v, "node-a")
		vpcCondition(t, c, v, v1alpha1.VpcConditionReady, metav1.ConditionTrue, ReasonVpcApplied, "its gateway on node-a")
	}
	waitGatewayChassis(t, nb, "node-a") // the cluster's own, on the same node
	lease.Spec.HolderIdentity = ptr.To("node-b")
	if err := c.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"red", "blue"} {
		waitVpcGatewayChassis(t, nb, v, "node-b")
	}

	// Deleted while in use: it waits, says who holds it, keeps its rows; its namespaces free,
	// the shared one goes to blue, whose conflict is settled.
	if err := c.Delete(ctx, &v1alpha1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "red"}}); err != nil {
		t.Fatal(err)
	}
	vpcCondition(t, c, "red", v1alpha1.VpcConditionReady, metav1.ConditionFalse, v1alpha1.ReasonVpcInUse,
		"pod red-apps/web", "pod red-apps/db", "pod shared/s")
	vpcCondition(t, c, "blue", v1alpha1.VpcConditionNamespacesBound, metav1.ConditionTrue, ReasonVpcBound)
	createPod(t, c, "shared", "late")
	vpcAddressOf(t, c, "shared", "late", "blue", "a")
	if n, err := vpcRows(ctx, nb, "red"); err != nil || n == 0 {
		t.Fatalf("red's rows while it waits: %d, %v", n, err)
	}
	for _, p := range [][2]string{{"red-apps", "web"}, {"red-apps", "db"}, {"red-apps", "typo"}, {"shared", "s"}} {
		deletePod(t, c, p[0], p[1])
	}
	eventually(t, "Vpc red gone", func(ctx context.Context) string {
		err := c.Get(ctx, client.ObjectKey{Name: "red"}, &v1alpha1.Vpc{})
		if apierrors.IsNotFound(err) {
			return ""
		}
		return fmt.Sprintf("still there (%v)", err)
	})
	if n, err := vpcRows(ctx, nb, "red"); err != nil || n != 0 {
		t.Errorf("red left %d rows in the NB database (%v)", n, err)
	}
	if n, err := vpcRows(ctx, nb, "blue"); err != nil || n == 0 {
		t.Errorf("blue's rows after red's deletion: %d, %v", n, err)
	}
	waitSwitchPorts(t, nb, ovn.VpcSubnetName(clusterID, "blue", "a"), "east_blue_blue-apps_web", "east_blue_shared_late")
}

// apiPods is the NRI plugin's pod reader on the test's client.
type apiPods struct{ c client.Client }

func (p apiPods) Get(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return getPod(ctx, p.c, ns, name)
}

// TestVpcPodsAreIsolated goes from Vpc objects to traffic: the ovnmaster addresses the pods of
// namespaces bound to red and to blue (identical subnets) from their own VPC's switches, the
// NRI plugin's RunPodSandbox gives each its net1 on a real chassis, red pods reach red pods on
// their subnet and across the router, and red never reaches blue, at an address both have nor
// at one only blue has.
func TestVpcPodsAreIsolated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and OVN")
	}
	central := ovntest.StartCentral(t)
	ch := ovntest.StartChassis(t, central)
	c := vpcEnv(t, central.NB, "red-apps", "blue-apps")
	createVpc(t, c, "red", []string{"red-apps"}, "a", "10.0.1.0/24", "b", "10.0.2.0/24")
	createVpc(t, c, "blue", []string{"blue-apps"}, "a", "10.0.1.0/24", "b", "10.0.2.0/24")
	// Bound before their pods come (a pod is placed once, when it gets its address).
	vpcCondition(t, c, "red", v1alpha1.VpcConditionReady, metav1.ConditionTrue, ReasonVpcApplied)
	vpcCondition(t, c, "blue", v1alpha1.VpcConditionReady, metav1.ConditionTrue, ReasonVpcApplied)

	plugin, err := nriplugin.New(nriplugin.Config{ClusterID: clusterID, CIDR: cidr, Node: ch.Node(), MTU: 1400, AddressWait: 20 * time.Second},
		apiPods{c}, nriplugin.Podport{}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	// start makes the pod and runs its sandbox through the plugin, as containerd would.
	start := func(ns, name string, opts ...podOpt) (netns string, addr netip.Addr) {
		t.Helper()
		createPod(t, c, ns, name, opts...)
		pod, err := getPod(t.Context(), c, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		netns = ch.NewPod()
		sb := &api.PodSandbox{Id: ovntest.SandboxID(), Name: name, Namespace: ns, Uid: string(pod.UID),
			Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: ovntest.NetnsPath(netns)}}}}
		if err := plugin.RunPodSandbox(t.Context(), sb); err != nil {
			t.Fatal(err)
		}
		vpc := strings.TrimSuffix(ns, "-apps")
		subnet := map[bool]string{true: "b", false: "a"}[len(opts) > 0]
		addr = vpcAddressOf(t, c, ns, name, vpc, subnet)
		ch.WaitPortUp(central.NB, ovn.VpcPortName(clusterID, vpc, ovn.PodKey{Namespace: ns, Name: name}))
		return netns, addr
	}
	onB := annotated(podnet.VpcSubnetAnnotation, "b")
	red1, red1IP := start("red-apps", "r1")
	red2, red2IP := start("red-apps", "r2")
	red3, red3IP := start("red-apps", "r3", onB)
	blue1, blue1IP := start("blue-apps", "b1")
	blue2, blue2IP := start("blue-apps", "b2")
	if red1IP != blue1IP || red2IP != blue2IP {
		t.Fatalf("red %s %s, blue %s %s: want the same addresses in both VPCs", red1IP, red2IP, blue1IP, blue2IP)
	}
	_, blueOnlyIP := start("blue-apps", "b3")

	ovntest.ExchangeTCP(t, red1, red2, red2IP) // same subnet
	ovntest.ExchangeTCP(t, red1, red3, red3IP) // across red's router (the plugin's route)
	ovntest.ExchangeTCP(t, blue1, blue2, blue2IP)

	serveName(t, blue2, blue2IP, 7001, "blue")
	serveName(t, red2, red2IP, 7002, "red")
	if got, err := dialAnswer(red1, red2IP, 7002); err != nil || got != "red" {
		t.Fatalf("red r1 -> red r2 (the control): %q, %v", got, err)
	}
	for _, ip := range []netip.Addr{blue2IP, blueOnlyIP} {
		for name, from := range map[string]string{"r1": red1, "r3": red3} {
			if got, err := dialAnswer(from, ip, 7001); err == nil || got == "blue" {
				t.Errorf("red %s -> %s answered %q: blue is reachable from red", name, ip, got)
			}
		}
	}
}

// serveName answers every TCP connection to ip:port in netns with name.
func serveName(t *testing.T, netns string, ip netip.Addr, port int, name string) {
	t.Helper()
	var ln net.Listener
	tunneltest.In(t, netns, func() {
		var err error
		if ln, err = net.Listen("tcp", netip.AddrPortFrom(ip, uint16(port)).String()); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte(name))
			_ = conn.Close()
		}
	}()
}

// dialAnswer connects from netns to ip:port and returns what the server wrote, or the error.
func dialAnswer(from string, ip netip.Addr, port int) (string, error) {
	var got []byte
	err := tunneltest.InErr(from, func() error {
		conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(ip, uint16(port)).String(), 2*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 64)
		n, err := conn.Read(buf)
		got = buf[:n]
		return err
	})
	return string(got), err
}

// externalIPOf waits for the Vpc's ExternalIPAllocated=True and returns its address.
func externalIPOf(t *testing.T, c client.Client, name string) netip.Addr {
	t.Helper()
	vpcCondition(t, c, name, v1alpha1.VpcConditionExternalIP, metav1.ConditionTrue, v1alpha1.ReasonAllocated)
	v := &v1alpha1.Vpc{}
	if err := c.Get(t.Context(), client.ObjectKey{Name: name}, v); err != nil {
		t.Fatal(err)
	}
	if v.Status.Gateway == nil {
		t.Fatalf("Vpc %s: ExternalIPAllocated=True and no status.gateway", name)
	}
	a, err := netip.ParseAddr(v.Status.Gateway.ExternalIP)
	if err != nil {
		t.Fatalf("Vpc %s: status.gateway.externalIP: %v", name, err)
	}
	return a
}

// waitGatewayExternalIP waits until the VPC's gateway port carries want in its external_ids.
func waitGatewayExternalIP(t *testing.T, nb *ovntest.Server, vpc string, want netip.Addr) {
	t.Helper()
	port := ovn.VpcGatewayPortName(clusterID, vpc)
	eventually(t, fmt.Sprintf("VPC %s's gateway port with external address %s", vpc, want), func(ctx context.Context) string {
		out, err := nb.Ctl(ctx, "--if-exists", "get", "Logical_Switch_Port", port, "external_ids:"+owner.OVNKeyExternalIP)
		if err != nil {
			return err.Error()
		}
		if got := strings.Trim(strings.TrimSpace(out), `"`); got != want.String() {
			return fmt.Sprintf("external_ids:%s = %q", owner.OVNKeyExternalIP, got)
		}
		return ""
	})
}

// TestVpcExternalIPController runs the ovnmaster with a global CIDR against a real API server
// and NB database: each Vpc gets an address of the pool that no GlobalIngressIP holds, recorded
// in its status (with the condition) before any gateway exists, written on its gateway port
// once there is one, and kept across a failover and an ovnmaster restart; a younger
// GlobalIngressIP on a Vpc's address does not take it; a full pool is said so; a deleted Vpc
// frees its address for the next one.
func TestVpcExternalIPController(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and an NB database")
	}
	nb := ovntest.StartNB(t)
	layout, err := globalip.NewLayout(netip.MustParsePrefix("242.1.0.0/28"), 0) // pool 242.1.0.8-14
	if err != nil {
		t.Fatal(err)
	}
	env := testenv.ControlPlanes(t, clusterID)
	cfg := env.Cluster(clusterID).RESTConfig()
	testenv.InstallCRDs(t, cfg)
	c := testenv.Client(t, cfg)
	ctx := t.Context()
	for _, ns := range []string{"octopus-system", "shop"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	// Six of the pool's seven addresses held by an ingress record: the VPCs share one.
	for i, ip := range []string{"242.1.0.8", "242.1.0.9", "242.1.0.10", "242.1.0.11", "242.1.0.12", "242.1.0.13"} {
		g := &v1alpha1.GlobalIngressIP{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("svc-%d", i)},
			Spec: v1alpha1.GlobalIngressIPSpec{Target: v1alpha1.GlobalIngressTarget{Kind: v1alpha1.GlobalIngressTargetService, Name: fmt.Sprintf("s%d", i)}}}
		if err := c.Create(ctx, g); err != nil {
			t.Fatal(err)
		}
		g.Status.IP = ip
		if err := c.Status().Update(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	ovnmasterCfg := asOVNMaster(t, c, cfg)
	withGlobal := func(o *Options) { o.Global = &layout }
	stop := masterWith(t, ovnmasterCfg, nb, withGlobal)

	createVpc(t, c, "red", nil, "a", "10.0.1.0/24")
	red := externalIPOf(t, c, "red")
	if red.String() != "242.1.0.14" {
		t.Fatalf("red got %s, want 242.1.0.14, the one address of the pool no ingress record holds", red)
	}
	createVpc(t, c, "blue", nil, "a", "10.0.1.0/24")
	vpcCondition(t, c, "blue", v1alpha1.VpcConditionExternalIP, metav1.ConditionFalse, v1alpha1.ReasonPoolExhausted, "242.1.0.8-242.1.0.14", "242.1.0.0/28")

	// A younger ingress record on red's address does not take it.
	young := &v1alpha1.GlobalIngressIP{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "svc-young"},
		Spec: v1alpha1.GlobalIngressIPSpec{Target: v1alpha1.GlobalIngressTarget{Kind: v1alpha1.GlobalIngressTargetService, Name: "young"}}}
	if err := c.Create(ctx, young); err != nil {
		t.Fatal(err)
	}
	young.Status.IP = red.String()
	if err := c.Status().Update(ctx, young); err != nil {
		t.Fatal(err)
	}

	// A gateway: the address is on its port, and stays through a failover.
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "octopus-system", Name: "octopus-gateway"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a"), LeaseDurationSeconds: ptr.To(int32(15))},
	}
	if err := c.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	waitVpcGatewayChassis(t, nb, "red", "node-a")
	waitGatewayExternalIP(t, nb, "red", red)
	lease.Spec.HolderIdentity = ptr.To("node-b")
	if err := c.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	waitVpcGatewayChassis(t, nb, "red", "node-b")
	waitGatewayExternalIP(t, nb, "red", red)
	if got := externalIPOf(t, c, "red"); got != red {
		t.Errorf("red's address moved from %s to %s with its gateway", red, got)
	}

	// A restarted ovnmaster keeps it.
	stop()
	masterWith(t, ovnmasterCfg, nb, withGlobal)
	createVpc(t, c, "green", nil, "a", "10.0.1.0/24") // a pass after the restart
	vpcCondition(t, c, "green", v1alpha1.VpcConditionExternalIP, metav1.ConditionFalse, v1alpha1.ReasonPoolExhausted)
	if got := externalIPOf(t, c, "red"); got != red {
		t.Errorf("red's address moved from %s to %s across a restart", red, got)
	}
	waitGatewayExternalIP(t, nb, "red", red)

	// red deleted: its address goes to one of the two waiting, blue (the first by name). The
	// younger record on it goes first: no agent runs here, whose allocator would have taken
	// its address away (red is older) and found it no other.
	if err := c.Delete(ctx, young); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &v1alpha1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "red"}}); err != nil {
		t.Fatal(err)
	}
	if got := externalIPOf(t, c, "blue"); got != red {
		t.Errorf("blue got %s after red went, want red's %s", got, red)
	}
	waitGatewayExternalIP(t, nb, "blue", red)
	vpcCondition(t, c, "green", v1alpha1.VpcConditionExternalIP, metav1.ConditionFalse, v1alpha1.ReasonPoolExhausted)
}
