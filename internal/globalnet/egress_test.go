package globalnet

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/nat"
	"github.com/octopus-mcs/octopus/internal/datapath/nat/nattest"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
)

var egressEpoch = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// egressIP is a GlobalEgressIP of namespace ns created at minute, allocated ips (none: not
// allocated), selecting the pods with labels sel (nil: the whole namespace).
func egressIP(ns, name string, minute int, sel map[string]string, ips ...string) v1alpha1.GlobalEgressIP {
	g := v1alpha1.GlobalEgressIP{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		CreationTimestamp: metav1.NewTime(egressEpoch.Add(time.Duration(minute) * time.Minute))}}
	if sel != nil {
		g.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: sel}
	}
	g.Spec.NumberOfIPs = int32(max(len(ips), 1)) //nolint:gosec // a handful
	if len(ips) > 0 {
		g.Status.AllocatedIPs = ips
		meta.SetStatusCondition(&g.Status.Conditions, metav1.Condition{Type: v1alpha1.GlobalEgressIPConditionAllocated,
			Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAllocated})
	}
	return g
}

func testPod(ns, name, ip string, labels map[string]string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
}

// TestPodEgress checks the precedence pod selector > namespace > cluster, and which objects
// and pods count.
func TestPodEgress(t *testing.T) {
	shop := egressIP("shop", "shop", 0, nil, "242.1.0.20", "242.1.0.21")
	newerShop := egressIP("shop", "a-newer-shop", 5, nil, "242.1.0.22")
	db := egressIP("shop", "db", 10, map[string]string{"app": "db"}, "242.1.0.30")
	olderDB := egressIP("shop", "z-older-db", 1, map[string]string{"tier": "data"}, "242.1.0.31")
	pending := egressIP("shop", "pending", 0, map[string]string{"app": "web"}) // not allocated: never used
	lab := egressIP("lab", "lab", 0, map[string]string{"app": "probe"}, "242.1.0.40")

	hostNet := testPod("shop", "node-exporter", "192.168.0.2", nil)
	hostNet.Spec.HostNetwork = true
	done := testPod("shop", "job", "10.244.1.9", nil)
	done.Status.Phase = corev1.PodSucceeded
	v6 := testPod("shop", "v6", "fd00::5", nil)

	tests := []struct {
		name   string
		egress []v1alpha1.GlobalEgressIP
		pods   []corev1.Pod
		want   []string // pod → range
	}{
		{"no GlobalEgressIP: the cluster's range for everyone", nil,
			[]corev1.Pod{testPod("shop", "web", "10.244.1.2", nil)}, nil},
		{"the namespace's range for its pods, not other namespaces'", []v1alpha1.GlobalEgressIP{shop},
			[]corev1.Pod{testPod("shop", "web", "10.244.1.2", nil), testPod("other", "web", "10.244.1.3", nil)},
			[]string{"10.244.1.2 242.1.0.20-242.1.0.21"}},
		{"a pod selector beats the namespace", []v1alpha1.GlobalEgressIP{shop, db},
			[]corev1.Pod{testPod("shop", "web", "10.244.1.2", map[string]string{"app": "web"}), testPod("shop", "db-0", "10.244.1.4", map[string]string{"app": "db"})},
			[]string{"10.244.1.2 242.1.0.20-242.1.0.21", "10.244.1.4 242.1.0.30-242.1.0.30"}},
		{"of two selectors or two namespace ranges the oldest wins", []v1alpha1.GlobalEgressIP{db, olderDB, newerShop, shop},
			[]corev1.Pod{testPod("shop", "db-0", "10.244.1.4", map[string]string{"app": "db", "tier": "data"}), testPod("shop", "web", "10.244.1.2", nil)},
			[]string{"10.244.1.4 242.1.0.31-242.1.0.31", "10.244.1.2 242.1.0.20-242.1.0.21"}},
		{"a selector alone leaves the namespace's other pods on the cluster's range", []v1alpha1.GlobalEgressIP{lab},
			[]corev1.Pod{testPod("lab", "probe", "10.244.1.5", map[string]string{"app": "probe"}), testPod("lab", "other", "10.244.1.6", nil)},
			[]string{"10.244.1.5 242.1.0.40-242.1.0.40"}},
		{"an unallocated range selects nobody: the namespace's applies", []v1alpha1.GlobalEgressIP{pending, shop},
			[]corev1.Pod{testPod("shop", "web", "10.244.1.2", map[string]string{"app": "web"})},
			[]string{"10.244.1.2 242.1.0.20-242.1.0.21"}},
		{"host-network, finished and IPv6-only pods get nothing", []v1alpha1.GlobalEgressIP{shop},
			[]corev1.Pod{hostNet, done, v6}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, e := range PodEgress(tt.egress, tt.pods) {
				got = append(got, e.Pod.String()+" "+e.Range.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("PodEgress = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestPodEgressRuleset applies, through the fake nftables, the NAT state of a cluster whose
// namespace shop has a range, whose db pods have one of their own by selector, and whose
// other namespace has none, and compares the whole ruleset with testdata/egress.golden: the
// precedence shows as which range each pod's element maps to (no element: the cluster's range).
func TestPodEgressRuleset(t *testing.T) {
	layout, err := globalip.NewLayout(netip.MustParsePrefix("242.1.0.0/24"), 0)
	if err != nil {
		t.Fatal(err)
	}
	s := NATState(layout, []netip.Prefix{netip.MustParsePrefix("242.2.0.0/16")}, nil, nil)
	s.PodEgress = PodEgress(
		[]v1alpha1.GlobalEgressIP{egressIP("shop", "shop", 0, nil, "242.1.0.20", "242.1.0.21"), egressIP("shop", "db", 1, map[string]string{"app": "db"}, "242.1.0.30")},
		[]corev1.Pod{testPod("shop", "web", "10.244.1.2", nil), testPod("shop", "db-0", "10.244.1.4", map[string]string{"app": "db"}), testPod("other", "web", "10.244.1.3", nil)},
	)
	fake := knftables.NewFake(knftables.InetFamily, owner.GlobalnetNFTTable)
	if err := nat.NewWith(fake, nat.Options{}).Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	got := nattest.Dump(fake)
	nattest.Golden(t, "egress.golden", got)
	for _, line := range []string{"10.244.1.2 : 242.1.0.20-242.1.0.21", "10.244.1.4 : 242.1.0.30-242.1.0.30"} {
		if !strings.Contains(got, line) {
			t.Errorf("no element %q in the ruleset", line)
		}
	}
	if strings.Contains(got, "10.244.1.3") {
		t.Error("the pod of a namespace without a GlobalEgressIP has an element: it must use the cluster's range")
	}
}
