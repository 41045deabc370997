package ovnmaster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

// fakeNB records the network it was given and attaches every pod at a fixed address, or
// fails as a whole.
type fakeNB struct {
	got ovn.Network
	err error
	// gatewayErr is reported as Result.GatewayFailed.
	gatewayErr error
}

func (f *fakeNB) Apply(_ context.Context, n ovn.Network) (ovn.Result, error) {
	f.got = n
	if f.err != nil {
		return ovn.Result{}, f.err
	}
	res := ovn.Result{Attached: map[ovn.PodKey]ovn.Attachment{}, GatewayFailed: f.gatewayErr}
	for _, p := range n.Pods {
		ip := netip.MustParseAddr("10.112.0.7")
		res.Attached[p.Key()] = ovn.Attachment{Port: ovn.PortName("east", p.Key()), MAC: ovn.MACFor(ip), IP: netip.PrefixFrom(ip, 24)}
	}
	return res, nil
}

var _ Applier = (*fakeNB)(nil)

func testPod(ns, name string, annotations map[string]string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Annotations: annotations}}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func TestReconcileChoosesMembersAndCleansUp(t *testing.T) {
	ours, err := podnet.Set(`[{"name":"cbr0","interface":"eth0"}]`, &podnet.Status{Name: podnet.NetworkName, Interface: "net1", IPs: []string{"10.112.0.9"}})
	if err != nil {
		t.Fatal(err)
	}
	succeeded := func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }
	pods := []client.Object{
		testPod("shop", "plain", nil),
		testPod("shop", "done", map[string]string{podnet.NetworkStatusAnnotation: ours}, succeeded),
		testPod("shop", "left", map[string]string{podnet.NetworkStatusAnnotation: ours, podnet.OptOutAnnotation: "false"}),
		testPod("shop", "host", nil, hostNetwork),
		testPod("octopus-system", "gw", nil),
		// Its request is broken, but it already has its address: it keeps it.
		testPod("shop", "had", map[string]string{podnet.NetworkStatusAnnotation: ours, podnet.RequestedIPAnnotation: "nope"}),
	}
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(pods...).Build()
	nb := &fakeNB{}
	r := &Reconciler{Client: c, NB: nb, ClusterID: "east", CIDR: netip.MustParsePrefix("10.112.0.0/24"), Events: events.NewFakeRecorder(10), Log: logr.Discard()}
	if _, err := r.Reconcile(t.Context(), networkRequest); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range nb.got.Pods {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"had", "plain"}) {
		t.Errorf("network holds pods %v, want had and plain", names)
	}
	annotations := func(name string) map[string]string {
		p, err := getPod(t.Context(), c, "shop", name)
		if err != nil {
			t.Fatal(err)
		}
		return p.Annotations
	}
	if a := annotations("left"); !maps.Equal(a, map[string]string{podnet.NetworkStatusAnnotation: `[{"name":"cbr0","interface":"eth0"}]`, podnet.OptOutAnnotation: "false"}) {
		t.Errorf("a pod that opted out keeps our entry: %v", a)
	}
	if a := annotations("done"); a[podnet.NetworkStatusAnnotation] != `[{"name":"cbr0","interface":"eth0"}]` {
		t.Errorf("a finished pod, whose address went back to the block, still claims it: %v", a)
	}
	if s, ok, _ := podnet.Find(annotations("plain")); !ok || s.IPs[0] != "10.112.0.7" {
		t.Errorf("pod plain: %+v %v", s, ok)
	}
}

func TestReconcileDatabaseDown(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(
		testPod("shop", "new", nil),
		testPod("shop", "told", map[string]string{podnet.ErrorAnnotation: "address block exhausted"}),
	).Build()
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Client: c, NB: &fakeNB{err: errors.New("connection refused")}, ClusterID: "east", CIDR: netip.MustParsePrefix("10.112.0.0/24"), Events: rec, Log: logr.Discard()}
	if _, err := r.Reconcile(t.Context(), networkRequest); err == nil {
		t.Fatal("Reconcile succeeded with the database down; it must fail to be retried")
	}
	p, _ := getPod(t.Context(), c, "shop", "new")
	if got := p.Annotations[podnet.ErrorAnnotation]; got != "could not write to the OVN northbound database, retrying: connection refused" {
		t.Errorf("new pod's error annotation %q", got)
	}
	p, _ = getPod(t.Context(), c, "shop", "told")
	if got := p.Annotations[podnet.ErrorAnnotation]; got != "address block exhausted" {
		t.Errorf("the known reason was overwritten: %q", got)
	}
	if len(rec.Events) != 1 {
		t.Errorf("%d events, want one for the new pod", len(rec.Events))
	}
}

// TestReconcileAnnotatesABurstConcurrently: a burst of new pods gets its addresses written a
// few at a time, not one round trip after another (each pod's sandbox waits for its address),
// and never more than patchConcurrency at once.
func TestReconcileAnnotatesABurstConcurrently(t *testing.T) {
	const burst = 3 * patchConcurrency
	var pods []client.Object
	for i := range burst {
		pods = append(pods, testPod("shop", fmt.Sprintf("web-%d", i), nil))
	}
	var inFlight, most atomic.Int32
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(pods...).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(20 * time.Millisecond) // an API server's round trip
			return c.Patch(ctx, obj, patch, opts...)
		},
	}).Build()
	r := &Reconciler{Client: c, NB: &fakeNB{}, ClusterID: "east", CIDR: netip.MustParsePrefix("10.112.0.0/24"), Events: events.NewFakeRecorder(burst), Log: logr.Discard()}
	if _, err := r.Reconcile(t.Context(), networkRequest); err != nil {
		t.Fatal(err)
	}
	for i := range burst {
		p, err := getPod(t.Context(), c, "shop", fmt.Sprintf("web-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := podnet.Find(p.Annotations); !ok {
			t.Errorf("pod %s has no address: %v", p.Name, p.Annotations)
		}
	}
	if m := most.Load(); m < 2 || m > patchConcurrency {
		t.Errorf("at most %d patches were in flight at once, want 2 to %d", m, patchConcurrency)
	}
}

func gatewayLeaseHeldBy(holder *string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: gatewayLease.Namespace, Name: gatewayLease.Name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: holder},
	}
}

func gatewayConfigMapNaming(node *string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: gatewayConfigMap.Namespace, Name: gatewayConfigMap.Name},
		Data:       map[string]string{"remoteSubnets": "10.2.0.0/16"},
	}
	if node != nil {
		cm.Data[v1alpha1.GatewayConfigMapGatewayKey] = *node
	}
	return cm
}

// TestReconcileGatewayChassis: the gateway's port is requested on the chassis of the node the
// gateway ConfigMap names (the gateway wrote itself there once its tunnels were up), else of
// the gateway Lease's holder (a gateway of an earlier version names no node); neither is no
// gateway port. An object that cannot be read stops the Apply (which would take the port from
// a working gateway), and a gateway port the data plane refuses fails the request so that it
// is retried.
func TestReconcileGatewayChassis(t *testing.T) {
	for _, tc := range []struct {
		name       string
		lease      *coordinationv1.Lease
		cm         *corev1.ConfigMap
		leaseKey   bool  // the Reconciler is told the Lease
		cmKey      bool  // the Reconciler is told the ConfigMap
		leaseErr   error // reading the Lease fails with it
		cmErr      error // reading the ConfigMap fails with it
		gatewayErr error
		want       string
		wantErr    string
		applied    bool
	}{
		{name: "held", lease: gatewayLeaseHeldBy(ptr.To("node-a")), leaseKey: true, cmKey: true, want: "node-a", applied: true},
		{name: "released", lease: gatewayLeaseHeldBy(ptr.To("")), leaseKey: true, cmKey: true, applied: true},
		{name: "never held", lease: gatewayLeaseHeldBy(nil), leaseKey: true, cmKey: true, applied: true},
		{name: "no Lease yet", leaseKey: true, cmKey: true, applied: true},
		{name: "no Lease configured", lease: gatewayLeaseHeldBy(ptr.To("node-a")), applied: true},
		{name: "Lease unreadable", leaseKey: true, cmKey: true, leaseErr: errors.New("forbidden"), wantErr: "reading the gateway Lease"},
		{name: "gateway port refused", lease: gatewayLeaseHeldBy(ptr.To("node-a")), leaseKey: true, cmKey: true, want: "node-a",
			gatewayErr: errors.New("address in use"), wantErr: "the gateway's port", applied: true},
		// The successor took the Lease but has not named itself yet: the port stays with the
		// gateway that still forwards.
		{name: "ConfigMap names another node than the Lease", lease: gatewayLeaseHeldBy(ptr.To("node-a")), cm: gatewayConfigMapNaming(ptr.To("node-b")),
			leaseKey: true, cmKey: true, want: "node-b", applied: true},
		{name: "ConfigMap names a node, Lease released", lease: gatewayLeaseHeldBy(ptr.To("")), cm: gatewayConfigMapNaming(ptr.To("node-b")),
			leaseKey: true, cmKey: true, want: "node-b", applied: true},
		{name: "ConfigMap names a node, no Lease", cm: gatewayConfigMapNaming(ptr.To("node-b")), leaseKey: true, cmKey: true, want: "node-b", applied: true},
		{name: "ConfigMap name trimmed", lease: gatewayLeaseHeldBy(ptr.To("node-a")), cm: gatewayConfigMapNaming(ptr.To(" node-b\n")),
			leaseKey: true, cmKey: true, want: "node-b", applied: true},
		{name: "ConfigMap without the key", lease: gatewayLeaseHeldBy(ptr.To("node-a")), cm: gatewayConfigMapNaming(nil),
			leaseKey: true, cmKey: true, want: "node-a", applied: true},
		{name: "ConfigMap with an empty name", lease: gatewayLeaseHeldBy(ptr.To("node-a")), cm: gatewayConfigMapNaming(ptr.To(" ")),
			leaseKey: true, cmKey: true, want: "node-a", applied: true},
		{name: "no ConfigMap", lease: gatewayLeaseHeldBy(ptr.To("node-a")), leaseKey: true, cmKey: true, want: "node-a", applied: true},
		{name: "no ConfigMap configured", lease: gatewayLeaseHeldBy(ptr.To("node-a")), cm: gatewayConfigMapNaming(ptr.To("node-b")),
			leaseKey: true, want: "node-a", applied: true},
		{name: "ConfigMap unreadable", lease: gatewayLeaseHeldBy(ptr.To("node-a")), leaseKey: true, cmKey: true,
			cmErr: errors.New("forbidden"), wantErr: "reading the gateway ConfigMap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(testPod("shop", "plain", nil))
			if tc.lease != nil {
				b = b.WithObjects(tc.lease)
			}
			if tc.cm != nil {
				b = b.WithObjects(tc.cm)
			}
			b = b.WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				switch obj.(type) {
				case *coordinationv1.Lease:
					if tc.leaseErr != nil {
						return tc.leaseErr
					}
				case *corev1.ConfigMap:
					if tc.cmErr != nil {
						return tc.cmErr
					}
				}
				return c.Get(ctx, key, obj, opts...)
			}})
			nb := &fakeNB{gatewayErr: tc.gatewayErr}
			r := &Reconciler{Client: b.Build(), NB: nb, ClusterID: "east", CIDR: netip.MustParsePrefix("10.112.0.0/24"),
				Events: events.NewFakeRecorder(10), Log: logr.Discard()}
			if tc.leaseKey {
				r.GatewayLease = gatewayLease
			}
			if tc.cmKey {
				r.GatewayConfigMap = gatewayConfigMap
			}
			_, err := r.Reconcile(t.Context(), networkRequest)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Reconcile = %v, want an error containing %q", err, tc.wantErr)
			}
			if applied := nb.got.ClusterID != ""; applied != tc.applied {
				t.Fatalf("applied = %v, want %v", applied, tc.applied)
			}
			if nb.got.GatewayChassis != tc.want {
				t.Errorf("GatewayChassis = %q, want %q", nb.got.GatewayChassis, tc.want)
			}
		})
	}
}

func TestHolderChange(t *testing.T) {
	renewed := gatewayLeaseHeldBy(ptr.To("node-a"))
	renewed.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	for _, tc := range []struct {
		name     string
		old, new *coordinationv1.Lease
		want     bool
	}{
		{"renewed", gatewayLeaseHeldBy(ptr.To("node-a")), renewed, false},
		{"taken over", gatewayLeaseHeldBy(ptr.To("node-a")), gatewayLeaseHeldBy(ptr.To("node-b")), true},
		{"released", gatewayLeaseHeldBy(ptr.To("node-a")), gatewayLeaseHeldBy(ptr.To("")), true},
		{"first held", gatewayLeaseHeldBy(nil), gatewayLeaseHeldBy(ptr.To("node-a")), true},
		{"empty and nil are the same", gatewayLeaseHeldBy(nil), gatewayLeaseHeldBy(ptr.To("")), false},
	} {
		if got := holderChange.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: holderChange = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNamedGatewayChange(t *testing.T) {
	subnetsChanged := gatewayConfigMapNaming(ptr.To("node-a"))
	subnetsChanged.Data["remoteSubnets"] = "10.2.0.0/16\n10.3.0.0/16"
	for _, tc := range []struct {
		name     string
		old, new *corev1.ConfigMap
		want     bool
	}{
		{"remote subnets changed", gatewayConfigMapNaming(ptr.To("node-a")), subnetsChanged, false},
		{"successor named itself", gatewayConfigMapNaming(ptr.To("node-a")), gatewayConfigMapNaming(ptr.To("node-b")), true},
		{"first named", gatewayConfigMapNaming(nil), gatewayConfigMapNaming(ptr.To("node-a")), true},
		{"name removed", gatewayConfigMapNaming(ptr.To("node-a")), gatewayConfigMapNaming(nil), true},
		{"whitespace only", gatewayConfigMapNaming(ptr.To("node-a")), gatewayConfigMapNaming(ptr.To("node-a\n")), false},
		{"absent and empty are the same", gatewayConfigMapNaming(nil), gatewayConfigMapNaming(ptr.To("")), false},
	} {
		if got := namedGatewayChange.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: namedGatewayChange = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !namedGatewayChange.Create(event.CreateEvent{Object: gatewayConfigMapNaming(nil)}) || !namedGatewayChange.Delete(event.DeleteEvent{Object: gatewayConfigMapNaming(ptr.To("node-a"))}) {
		t.Error("a created or deleted ConfigMap must be reconciled: it may name a gateway, or stop naming one")
	}
}

// TestGatewaySourcesInInterconnectMode: an ovnmaster told the cluster is an OVN-IC AZ reads no
// active gateway (so, by "no Lease configured" above, it writes no gateway port and removes
// one it made: the interconnection router takes that address); otherwise it reads the
// gateway's ConfigMap and Lease.
func TestGatewaySourcesInInterconnectMode(t *testing.T) {
	if cm, lease := (Options{Interconnect: true}).gatewaySources(); cm.Name != "" || lease.Name != "" {
		t.Errorf("interconnect mode reads %v and %v, want neither", cm, lease)
	}
	if cm, lease := (Options{}).gatewaySources(); cm != gatewayConfigMap || lease != gatewayLease {
		t.Errorf("gateway sources = %v, %v; want %v, %v", cm, lease, gatewayConfigMap, gatewayLease)
	}
}
