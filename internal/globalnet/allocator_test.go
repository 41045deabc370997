package globalnet_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/datapath/nat"
	"github.com/octopus-mcs/octopus/internal/globalnet"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

const ns = "shop"

// member is a real API server (with kube-controller-manager, whose EndpointSlice controller
// turns the test's pods into slices) with Octopus's member CRDs.
type member struct {
	cfg *rest.Config
	c   client.Client
}

func newMember(t *testing.T) *member {
	t.Helper()
	return memberOf(t, testenv.ControlPlanes(t, "west").Cluster("west").RESTConfig())
}

// memberOf prepares the cluster of cfg: the CRDs, namespace shop and Node node-1.
func memberOf(t *testing.T, cfg *rest.Config) *member {
	t.Helper()
	logf.SetLogger(logr.Discard())
	m := &member{cfg: cfg, c: testenv.Client(t, cfg)}
	crds, err := crd.Member()
	if err != nil {
		t.Fatal(err)
	}
	mcs, err := crd.MCS()
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.InstallCRDs(t.Context(), m.c, append(crds, mcs...)); err != nil {
		t.Fatal(err)
	}
	// The EndpointSlice controller leaves out endpoints on a Node it does not know.
	for _, obj := range []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}} {
		if err := m.c.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// startAllocator runs the allocator in a manager of its own until the returned function (or
// the test's end) stops it.
func (m *member) startAllocator(t *testing.T, layout globalip.Layout) func() {
	t.Helper()
	return m.start(t, func(mgr manager.Manager) error { return globalnet.SetupAllocator(mgr, layout) })
}

// start runs a manager with what setup adds until the returned function (or the test's end)
// stops it.
func (m *member) start(t *testing.T, setup func(manager.Manager) error) func() {
	t.Helper()
	mgr, err := manager.New(m.cfg, manager.Options{
		Scheme: kube.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		// The test restarts the allocator in one process, as a new process would.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := setup(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	t.Cleanup(stop)
	return stop
}

// service creates Service name selecting app=name (headless if asked), its pods (ready, at
// the given addresses, as a kubelet would report them) and a ServiceExport.
func (m *member) service(t *testing.T, name string, headless bool, pods ...string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(5353)},
		}},
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	if err := m.c.Create(t.Context(), svc); err != nil {
		t.Fatal(err)
	}
	for i, ip := range pods {
		m.pod(t, fmt.Sprintf("%s-%d", name, i), name, netip.MustParseAddr(ip), true)
	}
	m.export(t, name)
}

func (m *member) export(t *testing.T, name string) {
	t.Helper()
	if err := m.c.Create(t.Context(), &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// pod creates (if needed) pod name of app and reports it running at ip, ready or not.
func (m *member) pod(t *testing.T, name, app string, ip netip.Addr, ready bool) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{NodeName: "node-1", AutomountServiceAccountToken: ptr.To(false), Containers: []corev1.Container{{
			Name: app, Image: app, Ports: []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 5353, Protocol: corev1.ProtocolUDP}},
		}}},
	}
	// The namespace's default ServiceAccount, which admission requires, appears shortly after
	// the namespace.
	eventually(t, "creating pod "+name, func(ctx context.Context) string {
		if err := m.c.Create(ctx, pod.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
			return err.Error()
		}
		return ""
	})
	testenv.ReportPod(t, m.c, ns, name, ip, ready)
}

// records returns the cluster's GlobalIngressIPs by name: address, or the Allocated reason.
func (m *member) records(ctx context.Context) (map[string]string, []v1alpha1.GlobalIngressIP, error) {
	list := &v1alpha1.GlobalIngressIPList{}
	if err := m.c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, nil, err
	}
	out := map[string]string{}
	for _, g := range list.Items {
		c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.GlobalIngressIPConditionAllocated)
		switch {
		case c == nil:
			out[g.Name] = "(no condition)"
		case c.Status == metav1.ConditionTrue:
			out[g.Name] = g.Status.IP
		default:
			out[g.Name] = c.Reason
		}
	}
	return out, list.Items, nil
}

// waitRecords waits until the records are exactly want; "*" matches any allocated address.
func (m *member) waitRecords(t *testing.T, what string, want map[string]string) map[string]string {
	t.Helper()
	var got map[string]string
	eventually(t, what, func(ctx context.Context) string {
		var err error
		if got, _, err = m.records(ctx); err != nil {
			return err.Error()
		}
		if len(got) != len(want) {
			return fmt.Sprintf("records %v, want %v", got, want)
		}
		for name, w := range want {
			g, ok := got[name]
			if !ok || (w == "*" && !parseOr(g).IsValid()) || (w != "*" && g != w) {
				return fmt.Sprintf("records %v, want %v", got, want)
			}
		}
		return ""
	})
	return got
}

func parseOr(s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}
	}
	return a
}

// eventually is testenv.EventuallyCheck with this package's timeout.
func eventually(t *testing.T, what string, check func(ctx context.Context) string) {
	t.Helper()
	testenv.EventuallyCheck(t, time.Minute, what, check)
}

// TestAllocator runs the allocator against a real API server through the life of exports: a
// ClusterSetIP and a headless service get addresses, the NAT state follows the records, the
// addresses survive a restart, a pod that is no longer ready and an unexport release theirs,
// and an exhausted pool says so on the record that got nothing until an address is free.
func TestAllocator(t *testing.T) {
	m := newMember(t)
	// A tiny global CIDR: 8 egress addresses, the health check, and 7 ingress addresses.
	layout, err := globalip.NewLayout(netip.MustParsePrefix("242.1.0.0/28"), 0)
	if err != nil {
		t.Fatal(err)
	}
	stop := m.startAllocator(t, layout)
	m.service(t, "web", false, "10.244.1.5", "10.244.1.6")
	m.service(t, "db", true, "10.244.2.5", "10.244.2.6", "10.244.2.7")
	first := m.waitRecords(t, "addresses for web and the three db pods", map[string]string{
		"svc-web": "*", "pod-db-0": "*", "pod-db-1": "*", "pod-db-2": "*",
	})
	seen := map[string]bool{}
	for name, ip := range first {
		if !layout.Pool.Contains(netip.MustParseAddr(ip)) || seen[ip] {
			t.Fatalf("%s got %s: outside the pool %s or given twice (%v)", name, ip, layout.Pool, first)
		}
		seen[ip] = true
	}

	// The NAT state the gateway would apply, from the same objects.
	remote := []netip.Prefix{netip.MustParsePrefix("242.2.0.0/16")}
	var state nat.State
	eventually(t, "the NAT state", func(ctx context.Context) string {
		if state, err = globalnet.DesiredNAT(ctx, m.c, layout, remote); err != nil {
			return err.Error()
		}
		if len(state.Services) != 1 || len(state.Pods) != 3 || len(state.Services[0].Ports) != 2 || len(state.Services[0].Ports[0].Endpoints) != 2 {
			return fmt.Sprintf("state %+v", state)
		}
		return ""
	})
	wantWeb := nat.Service{Name: ns + "/web", GlobalIP: netip.MustParseAddr(first["svc-web"]), Ports: []nat.Port{
		{Protocol: nat.TCP, Port: 80, Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.244.1.5:8080"), netip.MustParseAddrPort("10.244.1.6:8080")}},
		{Protocol: nat.UDP, Port: 53, Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.244.1.5:5353"), netip.MustParseAddrPort("10.244.1.6:5353")}},
	}}
	got := state.Services[0]
	for i := range got.Ports {
		slices.SortFunc(got.Ports[i].Endpoints, netip.AddrPort.Compare)
	}
	if fmt.Sprint(got) != fmt.Sprint(wantWeb) {
		t.Errorf("web in the NAT state: %+v\nwant %+v", got, wantWeb)
	}
	for _, p := range state.Pods {
		i := strings.TrimPrefix(p.Name, ns+"/db-")
		if p.Pod.String() != "10.244.2.5" && p.Pod.String() != "10.244.2.6" && p.Pod.String() != "10.244.2.7" || first["pod-db-"+i] != p.GlobalIP.String() {
			t.Errorf("pod %s in the NAT state: %s → %s; records %v", p.Name, p.GlobalIP, p.Pod, first)
		}
	}
	if state.GlobalCIDRs[0] != layout.CIDR || state.ClusterEgress[0] != layout.ClusterEgress || !slices.Equal(state.RemoteCIDRs, remote) {
		t.Errorf("NAT state ranges: %+v", state)
	}

	// A restart keeps every address and rewrites nothing.
	_, before, err := m.records(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stop()
	m.startAllocator(t, layout)
	time.Sleep(2 * time.Second) // time for a pass that would (wrongly) change something
	_, after, err := m.records(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := range before {
		if before[i].ResourceVersion != after[i].ResourceVersion {
			t.Errorf("the restarted allocator rewrote %s: %+v → %+v", before[i].Name, before[i].Status, after[i].Status)
		}
	}

	// db-2 no longer ready: its address goes. web unexported: its address goes.
	m.pod(t, "db-2", "db", netip.MustParseAddr("10.244.2.7"), false)
	if err := m.c.Delete(t.Context(), &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	m.waitRecords(t, "web and db-2 released", map[string]string{"pod-db-0": first["pod-db-0"], "pod-db-1": first["pod-db-1"]})

	// 6 more services for 5 free addresses: one of them is told the pool is exhausted.
	for i := range 6 {
		m.service(t, fmt.Sprintf("s%d", i), false)
	}
	var exhausted string
	eventually(t, "the pool exhausted", func(ctx context.Context) string {
		got, items, err := m.records(ctx)
		if err != nil {
			return err.Error()
		}
		var ex []string
		for name, v := range got {
			if v == v1alpha1.ReasonPoolExhausted {
				ex = append(ex, name)
			}
		}
		if len(got) != 8 || len(ex) != 1 {
			return fmt.Sprintf("records %v", got)
		}
		exhausted = ex[0]
		for _, g := range items {
			if g.Name == exhausted {
				c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.GlobalIngressIPConditionAllocated)
				if !strings.Contains(c.Message, "ingress pool 242.1.0.8-242.1.0.14 of global CIDR 242.1.0.0/28") || g.Status.IP != "" {
					return fmt.Sprintf("exhausted record %s: ip %q, %s", g.Name, g.Status.IP, c.Message)
				}
			}
		}
		return ""
	})
	if state, err := globalnet.DesiredNAT(t.Context(), m.c, layout, remote); err != nil {
		t.Fatal(err)
	} else if n := len(state.Services); n != 5 {
		t.Errorf("NAT state has %d services, want the 5 with addresses (nothing of %s)", n, exhausted)
	}
	// Unexporting another one frees an address for it.
	other := "s0"
	if exhausted == "svc-s0" {
		other = "s1"
	}
	if err := m.c.Delete(t.Context(), &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: other}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, exhausted+" allocated once "+other+" is unexported", func(ctx context.Context) string {
		got, _, err := m.records(ctx)
		if err != nil {
			return err.Error()
		}
		if _, ok := got["svc-"+other]; ok || !layout.Pool.Contains(parseOr(got[exhausted])) {
			return fmt.Sprintf("records %v", got)
		}
		return ""
	})
}

// TestAllocatorEgress runs the allocator against a real API server with GlobalEgressIPs: a
// namespace's range and a pod selector's are allocated from the pool the ingress addresses use
// (the API server defaults numberOfIPs), the NAT state maps the selected pod to its selector's
// range and the namespace's other pods to the namespace's, a restart rewrites nothing, a range
// that does not fit says so naming the pool, and deleting a GlobalEgressIP releases its range.
func TestAllocatorEgress(t *testing.T) {
	m := newMember(t)
	layout, err := globalip.NewLayout(netip.MustParsePrefix("242.1.0.0/28"), 0) // pool 242.1.0.8-14
	if err != nil {
		t.Fatal(err)
	}
	stop := m.startAllocator(t, layout)
	m.service(t, "web", false, "10.244.1.5")
	m.pod(t, "db-0", "db", netip.MustParseAddr("10.244.2.5"), true)
	create := func(name string, n int32, sel map[string]string) {
		g := &v1alpha1.GlobalEgressIP{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.GlobalEgressIPSpec{NumberOfIPs: n}}
		if sel != nil {
			g.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: sel}
		}
		if err := m.c.Create(t.Context(), g); err != nil {
			t.Fatal(err)
		}
	}
	create("namespace", 2, nil)
	create("db", 0, map[string]string{"app": "db"}) // defaulted to 1
	ranges := func(ctx context.Context) (map[string]string, []v1alpha1.GlobalEgressIP, error) {
		list := &v1alpha1.GlobalEgressIPList{}
		if err := m.c.List(ctx, list); err != nil {
			return nil, nil, err
		}
		out := map[string]string{}
		for _, g := range list.Items {
			c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.GlobalEgressIPConditionAllocated)
			switch {
			case c == nil:
				out[g.Name] = ""
			case c.Status == metav1.ConditionTrue:
				out[g.Name] = strings.Join(g.Status.AllocatedIPs, ",")
			default:
				out[g.Name] = c.Reason + ": " + c.Message
			}
		}
		return out, list.Items, nil
	}
	var first map[string]string
	eventually(t, "egress ranges for the namespace and the db selector", func(ctx context.Context) string {
		got, _, err := ranges(ctx)
		if err != nil {
			return err.Error()
		}
		records, _, err := m.records(ctx)
		if err != nil {
			return err.Error()
		}
		if len(strings.Split(got["namespace"], ",")) != 2 || len(strings.Split(got["db"], ",")) != 1 || records["svc-web"] == "" {
			return fmt.Sprintf("ranges %v, records %v", got, records)
		}
		for _, ip := range strings.Split(got["namespace"]+","+got["db"], ",") {
			if !layout.Pool.Contains(parseOr(ip)) || ip == records["svc-web"] {
				return fmt.Sprintf("%s: outside the pool %s or web's address too (ranges %v, records %v)", ip, layout.Pool, got, records)
			}
		}
		first = got
		return ""
	})
	eventually(t, "the pods' egress in the NAT state", func(ctx context.Context) string {
		state, err := globalnet.DesiredNAT(ctx, m.c, layout, nil)
		if err != nil {
			return err.Error()
		}
		var got []string
		for _, e := range state.PodEgress {
			got = append(got, e.Pod.String()+"="+e.Range.String())
		}
		slices.Sort(got)
		nsRange := strings.Split(first["namespace"], ",")
		want := []string{"10.244.1.5=" + nsRange[0] + "-" + nsRange[1], "10.244.2.5=" + first["db"] + "-" + first["db"]}
		if !slices.Equal(got, want) {
			return fmt.Sprintf("pod egress %v, want %v", got, want)
		}
		return ""
	})

	// A restart keeps the ranges and rewrites nothing.
	_, before, err := ranges(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stop()
	m.startAllocator(t, layout)
	time.Sleep(2 * time.Second) // time for a pass that would (wrongly) change something
	_, after, err := ranges(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := range before {
		if before[i].ResourceVersion != after[i].ResourceVersion {
			t.Errorf("the restarted allocator rewrote %s: %+v → %+v", before[i].Name, before[i].Status, after[i].Status)
		}
	}

	// 4 consecutive addresses do not fit in what is left (7 - web's - 3), wherever they are.
	create("big", 4, map[string]string{"app": "big"})
	eventually(t, "the big range refused, naming the pool", func(ctx context.Context) string {
		got, _, err := ranges(ctx)
		if err != nil {
			return err.Error()
		}
		if !strings.HasPrefix(got["big"], v1alpha1.ReasonPoolExhausted+": No 4 consecutive free addresses in the pool 242.1.0.8-242.1.0.14 of global CIDR 242.1.0.0/28") {
			return fmt.Sprintf("ranges %v", got)
		}
		return ""
	})
	// Deleting the other ranges releases them: room for the big one (web's address, placed by
	// its key's hash, leaves 4 in a row).
	if err := m.c.Delete(t.Context(), &v1alpha1.GlobalEgressIP{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "namespace"}}); err != nil {
		t.Fatal(err)
	}
	if err := m.c.Delete(t.Context(), &v1alpha1.GlobalEgressIP{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the big range allocated once the others are deleted", func(ctx context.Context) string {
		got, _, err := ranges(ctx)
		if err != nil {
			return err.Error()
		}
		if len(got) != 1 || len(strings.Split(got["big"], ",")) != 4 {
			return fmt.Sprintf("ranges %v", got)
		}
		return ""
	})
}

// TestAllocatorFollowsClusterEgressSize runs the allocator with the layout of a Cluster whose
// spec sets a 2-address egress range in a /29 global CIDR (the default 8 would not fit): the
// 5 addresses between the egress range and the health-check address go to 5 exports, a sixth
// finds the pool exhausted, and the NAT state's egress range is those 2 addresses. The gateway
// lays its NAT out from the same spec (TestGlobalnetGateway in internal/gateway).
func TestAllocatorFollowsClusterEgressSize(t *testing.T) {
	m := newMember(t)
	layout, err := globalnet.ClusterLayout(v1alpha1.ClusterSpec{
		ClusterID: "west", Addressing: v1alpha1.AddressingGlobalnet, GlobalCIDR: "242.1.0.0/29", GlobalEgressSize: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.startAllocator(t, layout)
	want := map[string]string{}
	for i := range 6 {
		name := fmt.Sprintf("s%d", i)
		m.service(t, name, false, fmt.Sprintf("10.244.1.%d", i+1))
		want["svc-"+name] = "*"
	}
	eventually(t, "5 addresses of the pool handed out, the sixth export told it is exhausted", func(ctx context.Context) string {
		got, _, err := m.records(ctx)
		if err != nil {
			return err.Error()
		}
		var ips []string
		exhausted := 0
		for _, v := range got {
			if v == v1alpha1.ReasonPoolExhausted {
				exhausted++
			} else {
				ips = append(ips, v)
			}
		}
		slices.Sort(ips)
		if len(got) != len(want) || exhausted != 1 || !slices.Equal(ips, []string{"242.1.0.2", "242.1.0.3", "242.1.0.4", "242.1.0.5", "242.1.0.6"}) {
			return fmt.Sprintf("records %v, want 242.1.0.2-242.1.0.6 handed out and one %s", got, v1alpha1.ReasonPoolExhausted)
		}
		return ""
	})
	eventually(t, "the NAT state's egress range and services", func(ctx context.Context) string {
		state, err := globalnet.DesiredNAT(ctx, m.c, layout, nil)
		if err != nil {
			return err.Error()
		}
		if got := fmt.Sprint(state.ClusterEgress); got != "[242.1.0.0-242.1.0.1]" || len(state.Services) != 5 {
			return fmt.Sprintf("egress %s and %d services, want [242.1.0.0-242.1.0.1] and 5", got, len(state.Services))
		}
		return ""
	})
}
