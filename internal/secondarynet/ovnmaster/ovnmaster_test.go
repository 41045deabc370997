package ovnmaster

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/rbac"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

const clusterID = "east"

var cidr = netip.MustParsePrefix("10.112.0.0/24")

// master runs an ovnmaster until the returned stop function is called.
func master(t *testing.T, cfg *rest.Config, nb *ovntest.Server) (stop func()) {
	t.Helper()
	return masterWith(t, cfg, nb, nil)
}

// masterWith is master with the options edit changes (nil: none).
func masterWith(t *testing.T, cfg *rest.Config, nb *ovntest.Server, edit func(*Options)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	o := Options{
		Member: cfg, ClusterID: clusterID, CIDR: cidr, NBEndpoint: nb.Endpoint,
		LeaderElection: true, LeaderElectionNamespace: "octopus-system",
		Log: testr.NewWithOptions(t, testr.Options{Verbosity: 1}),
	}
	if edit != nil {
		edit(&o)
	}
	go func() { done <- Run(ctx, o) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ovnmaster: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// eventually is testenv.EventuallyCheck with this package's timeout.
func eventually(t *testing.T, what string, check func(ctx context.Context) string) {
	t.Helper()
	testenv.EventuallyCheck(t, 30*time.Second, what, check)
}

type podOpt func(*corev1.Pod)

func annotated(k, v string) podOpt { return func(p *corev1.Pod) { p.Annotations[k] = v } }

func hostNetwork(p *corev1.Pod) { p.Spec.HostNetwork = true }

func createPod(t *testing.T, c client.Client, ns, name string, opts ...podOpt) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{
			Containers:                   []corev1.Container{{Name: "app", Image: "app"}},
			AutomountServiceAccountToken: ptr.To(false),
		},
	}
	for _, o := range opts {
		o(pod)
	}
	// Admission wants the namespace's default ServiceAccount, which appears shortly after
	// the namespace.
	eventually(t, "creating pod "+name, func(ctx context.Context) string {
		if err := c.Create(ctx, pod.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
			return err.Error()
		}
		return ""
	})
}

func getPod(ctx context.Context, c client.Client, ns, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	return pod, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod)
}

// addressOf waits for the pod's network-status entry and checks it: interface net1, one
// address in the block, the MAC derived from it.
func addressOf(t *testing.T, c client.Client, ns, name string) netip.Addr {
	t.Helper()
	var addr netip.Addr
	eventually(t, "pod "+name+" annotated", func(ctx context.Context) string {
		pod, err := getPod(ctx, c, ns, name)
		if err != nil {
			return err.Error()
		}
		s, ok, err := podnet.Find(pod.Annotations)
		switch {
		case err != nil:
			return err.Error()
		case !ok:
			return fmt.Sprintf("no network-status entry; annotations %v", pod.Annotations)
		case pod.Annotations[podnet.ErrorAnnotation] != "":
			return "error annotation still set: " + pod.Annotations[podnet.ErrorAnnotation]
		}
		if s.Interface != "net1" || len(s.IPs) != 1 {
			t.Fatalf("pod %s: entry %+v", name, s)
		}
		addr = netip.MustParseAddr(s.IPs[0])
		if !cidr.Contains(addr) || s.MAC != ovn.MACFor(addr).String() {
			t.Fatalf("pod %s: entry %+v outside %s or with a MAC not derived from its address", name, s, cidr)
		}
		return ""
	})
	return addr
}

// errorOf waits for the pod's error annotation to contain want.
func errorOf(t *testing.T, c client.Client, ns, name, want string) {
	t.Helper()
	eventually(t, "pod "+name+" told why it has no address", func(ctx context.Context) string {
		pod, err := getPod(ctx, c, ns, name)
		if err != nil {
			return err.Error()
		}
		if msg := pod.Annotations[podnet.ErrorAnnotation]; !strings.Contains(msg, want) {
			return fmt.Sprintf("error annotation %q, want it to contain %q", msg, want)
		}
		if _, ok, _ := podnet.Find(pod.Annotations); ok {
			return "a pod without an address has a network-status entry"
		}
		return ""
	})
}

// nbPorts lists the port names on the cluster's switch, read with ovn-nbctl.
func nbPorts(ctx context.Context, nb *ovntest.Server) ([]string, error) {
	out, err := nb.Ctl(ctx, "lsp-list", ovn.SwitchName(clusterID))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			names = append(names, strings.Trim(f[1], "()"))
		}
	}
	return names, nil
}

func waitPorts(t *testing.T, nb *ovntest.Server, want ...string) {
	t.Helper()
	eventually(t, "ports in the NB database", func(ctx context.Context) string {
		got, err := nbPorts(ctx, nb)
		if err != nil {
			return err.Error()
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Sprintf("ports %v, want %v", got, want)
		}
		return ""
	})
}

// TestOvnmaster runs the ovnmaster against a real member control plane and a real NB
// database: pods get addresses and annotations, bad requests and an unreachable database are
// reported on the pods, deleted pods release their ports, and a restarted ovnmaster keeps
// every address.
func TestOvnmaster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	env := testenv.ControlPlanes(t, clusterID)
	cfg := env.Cluster(clusterID).RESTConfig()
	testenv.InstallCRDs(t, cfg) // the ovnmaster watches Vpcs
	c := testenv.Client(t, cfg)
	ctx := t.Context()
	for _, ns := range []string{"shop", "octopus-system"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	nb := ovntest.StartNB(t)
	stop := master(t, cfg, nb)

	createPod(t, c, "shop", "a")
	createPod(t, c, "shop", "b")
	createPod(t, c, "shop", "want", annotated(podnet.RequestedIPAnnotation, "10.112.0.50"))
	createPod(t, c, "shop", "far", annotated(podnet.RequestedIPAnnotation, "10.200.0.1"))
	createPod(t, c, "shop", "typo", annotated(podnet.RequestedIPAnnotation, "10.112.0.500"))
	createPod(t, c, "shop", "out", annotated(podnet.OptOutAnnotation, "false"))
	createPod(t, c, "shop", "host", hostNetwork)
	createPod(t, c, "kube-system", "sys")

	addrs := map[string]netip.Addr{}
	for _, name := range []string{"a", "b", "want"} {
		addrs[name] = addressOf(t, c, "shop", name)
	}
	if addrs["want"] != netip.MustParseAddr("10.112.0.50") {
		t.Errorf("pod want got %s, asked for 10.112.0.50", addrs["want"])
	}
	if addrs["a"] == addrs["b"] {
		t.Errorf("pods a and b share %s", addrs["a"])
	}
	errorOf(t, c, "shop", "far", "not in 10.112.0.0/24")
	errorOf(t, c, "shop", "typo", "not an IP address")
	waitPorts(t, nb, "east_shop_a", "east_shop_b", "east_shop_want")
	for _, p := range []struct{ ns, name string }{{"shop", "out"}, {"shop", "host"}, {"kube-system", "sys"}} {
		pod, err := getPod(ctx, c, p.ns, p.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := pod.Annotations[podnet.NetworkStatusAnnotation]; ok {
			t.Errorf("pod %s/%s is not on the secondary network but was annotated: %v", p.ns, p.name, pod.Annotations)
		}
	}
	eventually(t, "an event on pod far", func(ctx context.Context) string {
		var evs eventsv1.EventList
		if err := c.List(ctx, &evs, client.InNamespace("shop")); err != nil {
			return err.Error()
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "far" && e.Reason == ReasonAddressFailed && strings.Contains(e.Note, "10.200.0.1") {
				return ""
			}
		}
		return fmt.Sprintf("no %s event on pod far among %d events", ReasonAddressFailed, len(evs.Items))
	})
	var lease coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: "octopus-system", Name: LeaderElectionID}, &lease); err != nil || lease.Spec.HolderIdentity == nil {
		t.Errorf("leader-election Lease %s: %v %+v", LeaderElectionID, err, lease.Spec)
	}

	// Deleting a pod releases its port.
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	waitPorts(t, nb, "east_shop_b", "east_shop_want")

	// A restarted ovnmaster keeps every address, and hands a new pod a fresh one: not even
	// the address the deleted pod had.
	stop()
	stop = master(t, cfg, nb)
	createPod(t, c, "shop", "c")
	addrs["c"] = addressOf(t, c, "shop", "c")
	for _, name := range []string{"b", "want"} {
		if got := addressOf(t, c, "shop", name); got != addrs[name] {
			t.Errorf("pod %s had %s before the restart, %s after", name, addrs[name], got)
		}
	}
	for _, name := range []string{"a", "b", "want"} {
		if addrs["c"] == addrs[name] {
			t.Errorf("new pod c got %s, the address of pod %s", addrs["c"], name)
		}
	}

	// With the NB database down, a new pod is told why it waits; when the database is back
	// it gets its address and the error goes.
	nb.Stop()
	createPod(t, c, "shop", "d")
	errorOf(t, c, "shop", "d", "OVN northbound database")
	errorOf(t, c, "shop", "far", "not in 10.112.0.0/24") // a known reason is not overwritten
	nb.Start()
	addrs["d"] = addressOf(t, c, "shop", "d")
	waitPorts(t, nb, "east_shop_b", "east_shop_c", "east_shop_d", "east_shop_want")
	stop()
}

// ovnmasterUser is the identity the ovnmaster's pods will have.
const ovnmasterUser = "system:serviceaccount:octopus-system:octopus-ovnmaster"

// asOVNMaster binds ovnmasterUser to the RBAC generated from this package's markers
// (config/rbac/ovnmaster) and returns cfg impersonating it: a request the markers do not
// allow fails the test that runs the ovnmaster with it.
func asOVNMaster(t *testing.T, admin client.Client, cfg *rest.Config) *rest.Config {
	t.Helper()
	roles, err := rbac.Load(rbac.OVNMaster)
	if err != nil {
		t.Fatal(err)
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "octopus-system", Name: "octopus-ovnmaster"}}
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
	out.Impersonate = rest.ImpersonationConfig{UserName: ovnmasterUser}
	return out
}

// requestedChassis reads the gateway port's requested chassis with ovn-nbctl; ok is false
// when there is no gateway port.
func requestedChassis(ctx context.Context, nb *ovntest.Server) (chassis string, ok bool, err error) {
	out, err := nb.Ctl(ctx, "--bare", "--columns=options", "find", "Logical_Switch_Port", "name="+ovn.GatewayPortName(clusterID))
	if err != nil || strings.TrimSpace(out) == "" {
		return "", false, err
	}
	for _, kv := range strings.Fields(out) {
		if v, found := strings.CutPrefix(kv, "requested-chassis="); found {
			return v, true, nil
		}
	}
	return "", true, nil
}

func waitGatewayChassis(t *testing.T, nb *ovntest.Server, want string) {
	t.Helper()
	eventually(t, "the gateway port requested on "+want, func(ctx context.Context) string {
		got, ok, err := requestedChassis(ctx, nb)
		switch {
		case err != nil:
			return err.Error()
		case want == "" && ok:
			return "a gateway port requested on " + got + ", want none"
		case want != "" && got != want:
			return fmt.Sprintf("gateway port present %v, requested on %q", ok, got)
		}
		return ""
	})
}

// gatewayChassisStays checks, for a few times the ovnmaster's usual reaction time, that the
// gateway port stays requested on want: a change that must not move it cannot be waited for.
func gatewayChassisStays(t *testing.T, nb *ovntest.Server, want string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got, ok, err := requestedChassis(t.Context(), nb)
		if err != nil {
			t.Fatal(err)
		}
		if !ok || got != want {
			t.Fatalf("the gateway port moved: present %v, requested on %q, want it to stay on %q", ok, got, want)
		}
	}
}

// TestOvnmasterFollowsTheActiveGateway runs the ovnmaster with nothing but its generated RBAC
// against a real control plane and NB database, while the test plays the gateways' election
// and their ConfigMap. Without a ConfigMap (a gateway of an earlier version): no Lease, no
// gateway port; a holder gets the port requested on its chassis (its node name); a takeover
// moves it, a renewal does not touch it, a release removes it. Then the ConfigMap: the node
// it names gets the port whatever the Lease says (a successor that took the Lease but has not
// named itself does not), naming another node moves it, and a ConfigMap naming none, or none
// at all, leaves the choice to the Lease again.
func TestOvnmasterFollowsTheActiveGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	env := testenv.ControlPlanes(t, clusterID)
	testenv.InstallCRDs(t, env.Cluster(clusterID).RESTConfig()) // the ovnmaster watches Vpcs
	admin := testenv.Client(t, env.Cluster(clusterID).RESTConfig())
	ctx := t.Context()
	for _, ns := range []string{"shop", "octopus-system"} {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := asOVNMaster(t, admin, env.Cluster(clusterID).RESTConfig())
	nb := ovntest.StartNB(t)
	master(t, cfg, nb)

	createPod(t, admin, "shop", "a")
	addressOf(t, admin, "shop", "a")
	waitPorts(t, nb, "east_shop_a")
	waitGatewayChassis(t, nb, "")

	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "octopus-system", Name: "octopus-gateway"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a"), LeaseDurationSeconds: ptr.To(int32(15))},
	}
	if err := admin.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	waitGatewayChassis(t, nb, "node-a")
	if addr := addressOf(t, admin, "shop", "a"); addr == netip.MustParseAddr("10.112.0.1") {
		t.Errorf("pod a has the gateway's address")
	}

	// A takeover moves the port; the pod's is not touched.
	setHolder := func(holder string) {
		t.Helper()
		if err := admin.Get(ctx, client.ObjectKeyFromObject(lease), lease); err != nil {
			t.Fatal(err)
		}
		lease.Spec.HolderIdentity = ptr.To(holder)
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		if err := admin.Update(ctx, lease); err != nil {
			t.Fatal(err)
		}
	}
	setHolder("node-b")
	waitGatewayChassis(t, nb, "node-b")
	waitPorts(t, nb, "east_gateway", "east_shop_a")
	setHolder("node-b") // a renewal
	waitGatewayChassis(t, nb, "node-b")

	// Released (a gateway stopping cleanly): no active gateway, no port.
	setHolder("")
	waitGatewayChassis(t, nb, "")
	waitPorts(t, nb, "east_shop_a")
	setHolder("node-a")
	waitGatewayChassis(t, nb, "node-a")

	// The gateway names itself in the ConfigMap once it forwards; the Lease holder is not
	// yet forwarding (a handover in progress): the port goes to the named node.
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "octopus-system", Name: "octopus-gateway"},
		Data:       map[string]string{"remoteSubnets": "10.2.0.0/16", v1alpha1.GatewayConfigMapGatewayKey: "node-c"},
	}
	if err := admin.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	waitGatewayChassis(t, nb, "node-c")
	setHolder("node-b") // a takeover the ConfigMap does not follow yet
	gatewayChassisStays(t, nb, "node-c")
	setData := func(change func(map[string]string)) {
		t.Helper()
		if err := admin.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
			t.Fatal(err)
		}
		change(cm.Data)
		if err := admin.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	setData(func(d map[string]string) { d["remoteSubnets"] = "10.2.0.0/16\n10.3.0.0/16" })
	waitGatewayChassis(t, nb, "node-c")
	// The successor named itself: the port follows.
	setData(func(d map[string]string) { d[v1alpha1.GatewayConfigMapGatewayKey] = "node-b" })
	waitGatewayChassis(t, nb, "node-b")
	setData(func(d map[string]string) { d[v1alpha1.GatewayConfigMapGatewayKey] = "node-d" })
	waitGatewayChassis(t, nb, "node-d")
	// Released while named: the named gateway still forwards, the port stays.
	setHolder("")
	gatewayChassisStays(t, nb, "node-d")
	// Rewritten without the name (a gateway of an earlier version), then deleted: the Lease
	// decides again.
	setHolder("node-a")
	setData(func(d map[string]string) { delete(d, v1alpha1.GatewayConfigMapGatewayKey) })
	waitGatewayChassis(t, nb, "node-a")
	setData(func(d map[string]string) { d[v1alpha1.GatewayConfigMapGatewayKey] = "node-c" })
	waitGatewayChassis(t, nb, "node-c")
	if err := admin.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	waitGatewayChassis(t, nb, "node-a")

	// Deleted (the cluster left): no port.
	if err := admin.Delete(ctx, lease); err != nil {
		t.Fatal(err)
	}
	waitGatewayChassis(t, nb, "")
}

// TestGatewayTakeoverMovesTraffic is the gateway's failover from the Lease to the packets,
// without the lab: the ovnmaster (with its generated RBAC) against a real control plane and
// real OVN, three chassis, a pod attached on one as the NRI plugin would attach it, the gateway
// interface attached on the two others. The test plays the gateway election: each takeover is
// one update of the Lease's holder, and a UDP probe every 10 ms from the pod to the other
// cluster's address measures how long the traffic stops: the ovnmaster's watch, its Apply and
// OVN moving the binding.
func TestGatewayTakeoverMovesTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and OVN")
	}
	central := ovntest.StartCentral(t)
	podNode := ovntest.StartChassis(t, central)
	chA, chB := ovntest.StartChassis(t, central), ovntest.StartChassis(t, central)
	ovntest.Underlay(t, 249, podNode, chA, chB)
	env := testenv.ControlPlanes(t, clusterID)
	testenv.InstallCRDs(t, env.Cluster(clusterID).RESTConfig()) // the ovnmaster watches Vpcs
	admin := testenv.Client(t, env.Cluster(clusterID).RESTConfig())
	ctx := t.Context()
	for _, ns := range []string{"shop", "octopus-system"} {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	master(t, asOVNMaster(t, admin, env.Cluster(clusterID).RESTConfig()), central.NB)

	remote := netip.MustParseAddr("10.113.0.1")
	createPod(t, admin, "shop", "a")
	addr := addressOf(t, admin, "shop", "a")
	gwAddr := netip.MustParseAddr("10.112.0.1") // the block's first host
	podNetns := podNode.NewPod()
	if err := podport.Attach(ctx, podport.Attachment{
		Sandbox: ovntest.SandboxID(), PodNetns: ovntest.NetnsPath(podNetns), Node: podNode.Node(),
		Port: ovn.PortName(clusterID, ovn.PodKey{Namespace: "shop", Name: "a"}), Interface: "net1",
		MAC: ovn.MACFor(addr), IP: netip.PrefixFrom(addr, cidr.Bits()), MTU: 1400,
		Routes: []podport.Route{{Dst: netip.MustParsePrefix("10.113.0.0/16"), Via: gwAddr}},
	}); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*ovntest.Chassis{"A": chA, "B": chB}
	for name, ch := range nodes {
		if err := podport.AttachGateway(ctx, podport.Gateway{Node: ch.Node(), Port: ovn.GatewayPortName(clusterID),
			MAC: ovn.MACFor(gwAddr), IP: netip.PrefixFrom(gwAddr, cidr.Bits()), MTU: 1400}); err != nil {
			t.Fatal(err)
		}
		ch.ServeWhoAmI(remote, name)
	}

	// The Lease names the chassis: the gateway's node name, and the chassis is named after it.
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "octopus-system", Name: "octopus-gateway"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(chA.Name()), LeaseDurationSeconds: ptr.To(int32(15))},
	}
	if err := admin.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if who := ovntest.WhoAnswersTCP(t, podNetns, remote); who != "A" {
		t.Fatalf("the pod's TCP went through gateway node %s, want A", who)
	}
	p := ovntest.StartProbe(t, podNetns, remote, 10*time.Millisecond)
	p.WaitFor(t, "A", time.Now(), 20)
	var results []string
	for _, to := range []string{"B", "A", "B"} {
		from := map[string]string{"A": "B", "B": "A"}[to]
		if err := admin.Get(ctx, client.ObjectKeyFromObject(lease), lease); err != nil {
			t.Fatal(err)
		}
		lease.Spec.HolderIdentity = ptr.To(nodes[to].Name())
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		switched := time.Now()
		if err := admin.Update(ctx, lease); err != nil {
			t.Fatal(err)
		}
		first := p.WaitFor(t, to, switched, 50)
		f := p.Measure(switched, first, from)
		if who := ovntest.WhoAnswersTCP(t, podNetns, remote); who != to {
			t.Errorf("after the takeover by %s the pod's TCP went through %s", to, who)
		}
		if f.Outage > 10*time.Second {
			t.Errorf("takeover by %s: %s without a reply", to, f.Outage)
		}
		results = append(results, fmt.Sprintf("%s->%s: longest gap %s, %d probes lost, Lease update to first reply via %s %s, %d replies via %s after that",
			from, to, f.Outage.Round(time.Millisecond), f.Lost, to, f.ToNew.Round(time.Millisecond), f.OldAfter, from))
	}
	for _, r := range results {
		t.Logf("MEASURED gateway takeover through the ovnmaster (UDP probe every 10 ms, 3 chassis, userspace datapath): %s", r)
	}
}
