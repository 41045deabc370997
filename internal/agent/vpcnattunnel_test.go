package agent

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/rbac"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/kernel"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func natTunnel(name, clusterID, gateway, vpc string, typ v1alpha1.VpcTunnelType) *v1alpha1.VpcNatTunnel {
	return &v1alpha1.VpcNatTunnel{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.VpcNatTunnelSpec{ClusterID: clusterID, GatewayName: gateway, InterfaceAddr: "10.100.0.1/24", NatGwDp: vpc, Type: typ},
	}
}

// gatewayExIPCopy is the GatewayExIp the syncer copies into member "a" from cluster's object
// on the hub (wantedGatewayExIPs, gatewayexip.go), so that these tests find copies exactly as
// the syncer makes them.
func gatewayExIPCopy(clusterID, gateway, externalIP, global string) *v1alpha1.GatewayExIp {
	want, refused := wantedGatewayExIPs("a", []v1alpha1.GatewayExIp{*hubGatewayExIP(clusterID, gateway, externalIP, global)},
		[]v1alpha1.Cluster{*cluster(clusterID, "", "10.2.0.0/16", global, "")})
	name := v1alpha1.GatewayExIpName(gateway, clusterID)
	if len(refused) > 0 || want[name] == nil {
		panic(fmt.Sprintf("the syncer would not copy gateway %s of cluster %s: %v", gateway, clusterID, refused))
	}
	return want[name]
}

// condSummary is "Type=Status/Reason" of every condition, in the order of want's types.
func condSummary(conds []metav1.Condition, types ...string) string {
	var out []string
	for _, typ := range types {
		c := meta.FindStatusCondition(conds, typ)
		if c == nil {
			out = append(out, typ+"=<none>")
			continue
		}
		out = append(out, fmt.Sprintf("%s=%s/%s", typ, c.Status, c.Reason))
	}
	return strings.Join(out, " ")
}

var tunnelCondTypes = []string{
	v1alpha1.VpcNatTunnelConditionReady, v1alpha1.VpcNatTunnelConditionRemoteGatewayFound,
	v1alpha1.VpcNatTunnelConditionVpcFound, v1alpha1.VpcNatTunnelConditionTunnelTypeSupported,
}

// TestTunnelStatus checks the pure status computation: each missing piece gets its condition
// naming the field and the fix, Ready reports the first of them (the type, the Vpc, the
// gateway, the global CIDR), a tunnel with everything is DataPlanePending and never Ready, and
// recomputing a status changes nothing (no write, no hot loop).
func TestTunnelStatus(t *testing.T) {
	remote := gatewayExIPCopy("b", "red", "242.2.0.2", "242.2.0.0/16")
	tests := []struct {
		name   string
		tunnel *v1alpha1.VpcNatTunnel
		in     tunnelInputs
		want   string
		fields [3]string // remote IP, remote and local global CIDRs
		msgs   []string  // in Ready's message
	}{
		{
			name:   "waiting for the remote gateway",
			tunnel: natTunnel("t", "b", "red", "red", ""),
			in:     tunnelInputs{Vpc: vpcLive, LocalGlobalCIDR: "242.1.0.0/16"},
			want:   "Ready=False/RemoteGatewayNotFound RemoteGatewayFound=False/RemoteGatewayNotFound VpcFound=True/Found TunnelTypeSupported=True/Supported",
			fields: [3]string{"", "", "242.1.0.0/16"},
			msgs:   []string{"waiting for GatewayExIp red-b in octopus-system (gateway red of cluster b, published on the hub as b.red); the tunnel comes up when it appears"},
		},
		{
			name:   "everything found: the data plane is pending",
			tunnel: natTunnel("t", "b", "red", "red", v1alpha1.VpcTunnelVXLAN),
			in:     tunnelInputs{Remote: remote, Vpc: vpcLive, LocalGlobalCIDR: "242.1.0.0/16"},
			want:   "Ready=False/DataPlanePending RemoteGatewayFound=True/Found VpcFound=True/Found TunnelTypeSupported=True/Supported",
			fields: [3]string{"242.2.0.2", "242.2.0.0/16", "242.1.0.0/16"},
			msgs:   []string{"the vxlan tunnel, its route to 242.2.0.0/16 and the SNAT to 242.1.0.0/16 are not built yet"},
		},
		{
			name:   "no such Vpc",
			tunnel: natTunnel("t", "b", "red", "green", ""),
			in:     tunnelInputs{Remote: remote, LocalGlobalCIDR: "242.1.0.0/16"},
			want:   "Ready=False/VpcNotFound RemoteGatewayFound=True/Found VpcFound=False/VpcNotFound TunnelTypeSupported=True/Supported",
			fields: [3]string{"242.2.0.2", "242.2.0.0/16", "242.1.0.0/16"},
			msgs:   []string{"spec.natGwDp: there is no Vpc green in this cluster; create it, or set spec.natGwDp to the name of the local Vpc"},
		},
		{
			name:   "a Vpc being deleted",
			tunnel: natTunnel("t", "b", "red", "red", ""),
			in:     tunnelInputs{Remote: remote, Vpc: vpcDeleting, LocalGlobalCIDR: "242.1.0.0/16"},
			want:   "Ready=False/VpcNotFound RemoteGatewayFound=True/Found VpcFound=False/VpcNotFound TunnelTypeSupported=True/Supported",
			fields: [3]string{"242.2.0.2", "242.2.0.0/16", "242.1.0.0/16"},
			msgs:   []string{"spec.natGwDp: Vpc red is being deleted and waits for this tunnel to go; delete the tunnel"},
		},
		{
			name:   "gre without GRE comes first, and says what to use",
			tunnel: natTunnel("t", "b", "red", "green", v1alpha1.VpcTunnelGRE),
			in:     tunnelInputs{LocalGlobalCIDR: "242.1.0.0/16"},
			want:   "Ready=False/GREUnavailable RemoteGatewayFound=False/RemoteGatewayNotFound VpcFound=False/VpcNotFound TunnelTypeSupported=False/GREUnavailable",
			fields: [3]string{"", "", "242.1.0.0/16"},
			msgs:   []string{"spec.type gre: this kernel has no GRE (ip_gre), so nothing is made for this tunnel; set spec.type to wireguard (encrypted, the default) or vxlan", "spec.natGwDp", "waiting for GatewayExIp red-b"},
		},
		{
			name:   "gre with GRE",
			tunnel: natTunnel("t", "b", "red", "red", v1alpha1.VpcTunnelGRE),
			in:     tunnelInputs{Remote: remote, Vpc: vpcLive, LocalGlobalCIDR: "242.1.0.0/16", GREAvailable: true},
			want:   "Ready=False/DataPlanePending RemoteGatewayFound=True/Found VpcFound=True/Found TunnelTypeSupported=True/Supported",
			fields: [3]string{"242.2.0.2", "242.2.0.0/16", "242.1.0.0/16"},
			msgs:   []string{"the gre tunnel"},
		},
		{
			name:   "a probe that cannot tell",
			tunnel: natTunnel("t", "b", "red", "red", v1alpha1.VpcTunnelGRE),
			in:     tunnelInputs{Remote: remote, Vpc: vpcLive, LocalGlobalCIDR: "242.1.0.0/16", GREProbeErr: errors.New("netlink: boom")},
			want:   "Ready=False/ProbeFailed RemoteGatewayFound=True/Found VpcFound=True/Found TunnelTypeSupported=Unknown/ProbeFailed",
			fields: [3]string{"242.2.0.2", "242.2.0.0/16", "242.1.0.0/16"},
			msgs:   []string{"could not tell whether the kernel has GRE (netlink: boom)"},
		},
		{
			name:   "a cluster without a global CIDR",
			tunnel: natTunnel("t", "b", "red", "red", ""),
			in:     tunnelInputs{Remote: remote, Vpc: vpcLive},
			want:   "Ready=False/NoGlobalCIDR RemoteGatewayFound=True/Found VpcFound=True/Found TunnelTypeSupported=True/Supported",
			fields: [3]string{"242.2.0.2", "242.2.0.0/16", ""},
			msgs:   []string{"must join with globalnet addressing"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.tunnel.Generation = 3
			st := tunnelStatus(tt.tunnel, tt.in)
			if got := condSummary(st.Conditions, tunnelCondTypes...); got != tt.want {
				t.Errorf("conditions\n%s\nwant\n%s", got, tt.want)
			}
			if got := [3]string{st.RemoteIP, st.RemoteGlobalnetCIDR, st.LocalGlobalnetCIDR}; got != tt.fields {
				t.Errorf("remote IP, remote and local global CIDRs %q, want %q", got, tt.fields)
			}
			ready := meta.FindStatusCondition(st.Conditions, v1alpha1.VpcNatTunnelConditionReady)
			for _, m := range tt.msgs {
				if !strings.Contains(ready.Message, m) {
					t.Errorf("Ready's message %q lacks %q", ready.Message, m)
				}
			}
			for _, c := range st.Conditions {
				if c.ObservedGeneration != 3 {
					t.Errorf("%s observed generation %d, want 3", c.Type, c.ObservedGeneration)
				}
			}
			// Computed again from what it wrote, the status is the same, transition times
			// included: the reconciler writes nothing.
			again := tt.tunnel.DeepCopy()
			again.Status = st
			time.Sleep(time.Millisecond)
			if st2 := tunnelStatus(again, tt.in); !equalStatus(st, st2) {
				t.Errorf("recomputed status differs:\n%+v\n%+v", st, st2)
			}
		})
	}
}

func equalStatus(a, b v1alpha1.VpcNatTunnelStatus) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}

// asController binds the agent controller's service account to the RBAC generated from the
// markers (config/rbac/controller) and returns cfg impersonating it.
func asController(t *testing.T, admin client.Client, cfg *rest.Config) *rest.Config {
	t.Helper()
	roles, err := rbac.Load(rbac.Controller)
	if err != nil {
		t.Fatal(err)
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: v1alpha1.SystemNamespace, Name: "octopus-controller"}}
	objs := []client.Object{roles.ClusterRole, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: roles.ClusterRole.Name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roles.ClusterRole.Name}, Subjects: subjects}}
	for _, r := range roles.Roles {
		objs = append(objs, r, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name}, Subjects: subjects})
	}
	for _, o := range objs {
		if err := admin.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	out := rest.CopyConfig(cfg)
	out.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + v1alpha1.SystemNamespace + ":octopus-controller"}
	return out
}

// TestVpcNatTunnelController runs the controller, with nothing but its generated RBAC, against
// a real API server: a tunnel naming a
// gateway not copied yet waits with RemoteGatewayFound=False and finds it, remote IP and global
// CIDR set, when the copy appears; follows a failover of the copy and goes back to waiting when
// the copy goes; a gre tunnel gets GREUnavailable (the probe faked, and the real kernel's as
// root); a tunnel naming no Vpc gets VpcFound=False and finds the Vpc once it is created. None
// is ever Ready: the data plane is not built.
func TestVpcNatTunnelController(t *testing.T) {
	env := testenv.ControlPlanes(t, "a")
	adminCfg := env.Cluster("a").RESTConfig()
	testenv.InstallCRDs(t, adminCfg)
	c := testenv.Client(t, adminCfg)
	ctx := t.Context()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace}}); err != nil {
		t.Fatal(err)
	}
	cfg := asController(t, c, adminCfg)
	if err := c.Create(ctx, &v1alpha1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "red"}, Spec: v1alpha1.VpcSpec{Subnets: []v1alpha1.VpcSubnet{{Name: "a", CIDR: "10.0.1.0/24"}}}}); err != nil {
		t.Fatal(err)
	}

	var probes atomic.Int32
	fake := GREProbeFunc(func() (bool, error) { probes.Add(1); return false, nil })
	start := func(t *testing.T, gre GREProbe) {
		mgr, copies := startAgentManager(t, cfg)
		if err := SetupVpcNatTunnels(mgr, copies, "242.1.0.0/16", gre); err != nil {
			t.Fatal(err)
		}
	}
	status := func(name string) (*v1alpha1.VpcNatTunnel, error) {
		tn := &v1alpha1.VpcNatTunnel{}
		return tn, c.Get(ctx, client.ObjectKey{Name: name}, tn)
	}
	hasStatus := func(name, want, remoteIP string) func() error {
		return func() error {
			tn, err := status(name)
			if err != nil {
				return err
			}
			if got := condSummary(tn.Status.Conditions, tunnelCondTypes...); got != want || tn.Status.RemoteIP != remoteIP {
				return fmt.Errorf("tunnel %s: %s, remote IP %q; want %s, remote IP %q", name, got, tn.Status.RemoteIP, want, remoteIP)
			}
			for _, cnd := range tn.Status.Conditions {
				if cnd.ObservedGeneration != tn.Generation {
					return fmt.Errorf("tunnel %s: %s observed generation %d of %d", name, cnd.Type, cnd.ObservedGeneration, tn.Generation)
				}
			}
			return nil
		}
	}

	t.Run("remote gateway", func(t *testing.T) {
		start(t, fake)
		if err := c.Create(ctx, natTunnel("to-b", "b", "red", "red", "")); err != nil {
			t.Fatal(err)
		}
		waiting := "Ready=False/RemoteGatewayNotFound RemoteGatewayFound=False/RemoteGatewayNotFound VpcFound=True/Found TunnelTypeSupported=True/Supported"
		testenv.Eventually(t, 10*time.Second, "the tunnel waits for its gateway", hasStatus("to-b", waiting, ""))
		tn, _ := status("to-b")
		if msg := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.VpcNatTunnelConditionRemoteGatewayFound).Message; !strings.Contains(msg, "waiting for GatewayExIp red-b in octopus-system") || !strings.Contains(msg, "comes up when it appears") {
			t.Errorf("RemoteGatewayFound's message %q", msg)
		}
		rv := tn.ResourceVersion

		// Another gateway's copy, and an object of the right name that is no copy, change nothing.
		if err := c.Create(ctx, gatewayExIPCopy("b", "blue", "242.2.0.3", "242.2.0.0/16")); err != nil {
			t.Fatal(err)
		}
		stray := &v1alpha1.GatewayExIp{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.SystemNamespace, Name: "red-b"}, Spec: v1alpha1.GatewayExIPSpec{ExternalIP: "198.51.100.1", GlobalnetCIDR: "242.2.0.0/16"}}
		if err := c.Create(ctx, stray); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if tn, _ := status("to-b"); tn.ResourceVersion != rv {
			t.Errorf("the tunnel's status was rewritten by unrelated GatewayExIps: %+v", tn.Status)
		}
		if err := c.Delete(ctx, stray); err != nil {
			t.Fatal(err)
		}

		cp := gatewayExIPCopy("b", "red", "242.2.0.2", "242.2.0.0/16")
		if err := c.Create(ctx, cp); err != nil {
			t.Fatal(err)
		}
		pending := "Ready=False/DataPlanePending RemoteGatewayFound=True/Found VpcFound=True/Found TunnelTypeSupported=True/Supported"
		testenv.Eventually(t, 10*time.Second, "the tunnel finds its gateway when the copy appears", hasStatus("to-b", pending, "242.2.0.2"))
		tn, _ = status("to-b")
		if tn.Status.RemoteGlobalnetCIDR != "242.2.0.0/16" || tn.Status.LocalGlobalnetCIDR != "242.1.0.0/16" {
			t.Errorf("global CIDRs remote %q local %q", tn.Status.RemoteGlobalnetCIDR, tn.Status.LocalGlobalnetCIDR)
		}
		found := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.VpcNatTunnelConditionRemoteGatewayFound).LastTransitionTime

		cp.Spec.ExternalIP = "242.2.0.22" // the remote gateway failed over
		if err := c.Update(ctx, cp); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, "the tunnel follows the copy's update", hasStatus("to-b", pending, "242.2.0.22"))
		tn, _ = status("to-b")
		if got := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.VpcNatTunnelConditionRemoteGatewayFound).LastTransitionTime; !got.Equal(&found) {
			t.Errorf("RemoteGatewayFound's transition time moved from %v to %v though it stayed True", found, got)
		}
		// Settled: nothing more is written (no hot loop).
		rv = tn.ResourceVersion
		time.Sleep(time.Second)
		if tn, _ := status("to-b"); tn.ResourceVersion != rv {
			t.Errorf("the status keeps being written: resourceVersion %s, then %s", rv, tn.ResourceVersion)
		}

		if err := c.Delete(ctx, cp); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, "the tunnel waits again once the copy is gone", hasStatus("to-b", waiting, ""))
	})

	t.Run("natGwDp", func(t *testing.T) {
		start(t, fake)
		if err := c.Create(ctx, natTunnel("from-green", "b", "blue", "green", v1alpha1.VpcTunnelWireGuard)); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, "a tunnel from no Vpc says so", hasStatus("from-green",
			"Ready=False/VpcNotFound RemoteGatewayFound=True/Found VpcFound=False/VpcNotFound TunnelTypeSupported=True/Supported", "242.2.0.3"))
		tn, _ := status("from-green")
		if msg := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.VpcNatTunnelConditionVpcFound).Message; !strings.Contains(msg, "spec.natGwDp: there is no Vpc green in this cluster; create it") {
			t.Errorf("VpcFound's message %q", msg)
		}
		// The ovnmaster's finalizer, which keeps a Vpc while a tunnel names it.
		green := &v1alpha1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "green", Finalizers: []string{"octopus.io/vpc"}}, Spec: v1alpha1.VpcSpec{Subnets: []v1alpha1.VpcSubnet{{Name: "a", CIDR: "10.0.1.0/24"}}}}
		if err := c.Create(ctx, green); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, "the tunnel finds the Vpc once it is created", hasStatus("from-green",
			"Ready=False/DataPlanePending RemoteGatewayFound=True/Found VpcFound=True/Found TunnelTypeSupported=True/Supported", "242.2.0.3"))

		vpcGone := "Ready=False/VpcNotFound RemoteGatewayFound=True/Found VpcFound=False/VpcNotFound TunnelTypeSupported=True/Supported"
		if err := c.Delete(ctx, green); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, "a Vpc being deleted is no place to leave from", hasStatus("from-green", vpcGone, "242.2.0.3"))
		tn, _ = status("from-green")
		if msg := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.VpcNatTunnelConditionVpcFound).Message; !strings.Contains(msg, "Vpc green is being deleted and waits for this tunnel to go") {
			t.Errorf("VpcFound's message while green is deleted %q", msg)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(green), green); err != nil {
			t.Fatal(err)
		}
		green.Finalizers = nil
		if err := c.Update(ctx, green); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, "the tunnel says so once the Vpc is gone", func() error {
			tn, err := status("from-green")
			if err != nil {
				return err
			}
			if msg := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.VpcNatTunnelConditionVpcFound).Message; !strings.Contains(msg, "there is no Vpc green") {
				return fmt.Errorf("VpcFound's message %q", msg)
			}
			return nil
		})
	})

	greUnavailable := "Ready=False/GREUnavailable RemoteGatewayFound=True/Found VpcFound=True/Found TunnelTypeSupported=False/GREUnavailable"
	t.Run("gre, probe faked", func(t *testing.T) {
		start(t, fake)
		before := probes.Load()
		if err := c.Create(ctx, natTunnel("gre-fake", "b", "blue", "red", v1alpha1.VpcTunnelGRE)); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, "a gre tunnel without GRE says so", hasStatus("gre-fake", greUnavailable, "242.2.0.3"))
		if probes.Load() == before {
			t.Error("the GRE probe was never asked")
		}
		tn, _ := status("gre-fake")
		if msg := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.VpcNatTunnelConditionTunnelTypeSupported).Message; !strings.Contains(msg, "set spec.type to wireguard (encrypted, the default) or vxlan") {
			t.Errorf("TunnelTypeSupported's message %q", msg)
		}
		// Switching to vxlan, as the message says, clears it.
		tn.Spec.Type = v1alpha1.VpcTunnelVXLAN
		if err := c.Update(ctx, tn); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, "the tunnel switched to vxlan is pending its data plane", hasStatus("gre-fake",
			"Ready=False/DataPlanePending RemoteGatewayFound=True/Found VpcFound=True/Found TunnelTypeSupported=True/Supported", "242.2.0.3"))
	})

	t.Run("gre, this kernel", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("the real probe needs root to make its network namespace")
		}
		has, err := kernel.GREAvailable()
		if err != nil {
			t.Fatal(err)
		}
		start(t, KernelGREProbe())
		if err := c.Create(ctx, natTunnel("gre-real", "b", "blue", "red", v1alpha1.VpcTunnelGRE)); err != nil {
			t.Fatal(err)
		}
		want := greUnavailable
		if has {
			want = "Ready=False/DataPlanePending RemoteGatewayFound=True/Found VpcFound=True/Found TunnelTypeSupported=True/Supported"
		}
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("a gre tunnel on this kernel (GRE: %v)", has), hasStatus("gre-real", want, "242.2.0.3"))
	})
}

// TestReconcileRetriesAFailedGREProbe: a probe that cannot tell makes Reconcile return an error
// (so controller-runtime asks again with backoff) when it writes the Unknown condition and again
// when the status already says so; once the probe answers, the next reconcile writes the
// answer and returns nil. A settled tunnel is not written to again.
func TestReconcileRetriesAFailedGREProbe(t *testing.T) {
	tn := natTunnel("gre", "b", "red", "red", v1alpha1.VpcTunnelGRE)
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithStatusSubresource(&v1alpha1.VpcNatTunnel{}).
		WithObjects(tn, &v1alpha1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "red"}}).Build()
	probeErr := errors.New("netlink: boom")
	r := &VpcNatTunnelReconciler{Client: c, LocalGlobalCIDR: "242.1.0.0/16", GRE: GREProbeFunc(func() (bool, error) { return false, probeErr })}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tn)}
	get := func() *v1alpha1.VpcNatTunnel {
		t.Helper()
		got := &v1alpha1.VpcNatTunnel{}
		if err := c.Get(t.Context(), req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for i := range 2 {
		if _, err := r.Reconcile(t.Context(), req); !errors.Is(err, probeErr) {
			t.Fatalf("reconcile %d: error %v, want the probe's", i, err)
		}
		if got := condSummary(get().Status.Conditions, v1alpha1.VpcNatTunnelConditionTunnelTypeSupported); got != "TunnelTypeSupported=Unknown/ProbeFailed" {
			t.Fatalf("reconcile %d: %s", i, got)
		}
	}
	r.GRE = GREProbeFunc(func() (bool, error) { return false, nil })
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	settled := get()
	if got := condSummary(settled.Status.Conditions, v1alpha1.VpcNatTunnelConditionTunnelTypeSupported); got != "TunnelTypeSupported=False/GREUnavailable" {
		t.Fatal(got)
	}
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if again := get(); again.ResourceVersion != settled.ResourceVersion {
		t.Errorf("a settled tunnel was written again: resourceVersion %s, then %s", settled.ResourceVersion, again.ResourceVersion)
	}
}
