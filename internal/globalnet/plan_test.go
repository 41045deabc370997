package globalnet

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
)

func endpoint(ip, pod string, ready bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)},
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod, UID: types.UID("uid-" + pod)}}
}

func TestTargets(t *testing.T) {
	svc := func(name, clusterIP string, typ corev1.ServiceType) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Type: typ}}
	}
	got := Targets([]Export{
		{Namespace: "shop", Name: "web", Service: svc("web", "10.96.0.10", corev1.ServiceTypeClusterIP)},
		{Namespace: "shop", Name: "gone"}, // exported, no Service: nothing
		{Namespace: "shop", Name: "ext", Service: svc("ext", "", corev1.ServiceTypeExternalName)},
		// IPv6 only: a global (IPv4) address would lead to no endpoint; nothing.
		{Namespace: "shop", Name: "v6", Service: svc("v6", "2001:db8:96::10", corev1.ServiceTypeClusterIP)},
		{Namespace: "shop", Name: "v6-headless", Service: func() *corev1.Service {
			s := svc("v6-headless", corev1.ClusterIPNone, corev1.ServiceTypeClusterIP)
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
			return s
		}(), Slices: []discoveryv1.EndpointSlice{{Endpoints: []discoveryv1.Endpoint{endpoint("2001:db8:1::5", "v6-0", true)}}}},
		{Namespace: "shop", Name: "db", Service: svc("db", corev1.ClusterIPNone, corev1.ServiceTypeClusterIP), Slices: []discoveryv1.EndpointSlice{
			{Endpoints: []discoveryv1.Endpoint{endpoint("10.1.0.2", "db-1", true), endpoint("10.1.0.3", "db-2", false)}},
			{Endpoints: []discoveryv1.Endpoint{endpoint("10.1.0.1", "db-0", true), endpoint("10.1.0.2", "db-1", true)}}, // db-1 in two slices
		}},
	})
	want := []Target{
		{Namespace: "shop", Kind: v1alpha1.GlobalIngressTargetPod, Name: "db-0", Service: "db", UID: "uid-db-0"},
		{Namespace: "shop", Kind: v1alpha1.GlobalIngressTargetPod, Name: "db-1", Service: "db", UID: "uid-db-1"},
		{Namespace: "shop", Kind: v1alpha1.GlobalIngressTargetService, Name: "web", Service: "web", UID: "uid-web"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Targets =\n%+v\nwant\n%+v", got, want)
	}
	long := Target{Kind: v1alpha1.GlobalIngressTargetPod, Name: strings.Repeat("p", 253)}
	if n := long.ObjectName(); len(n) != 253 || !strings.HasPrefix(n, "pod-ppp") {
		t.Errorf("a 253-character pod's record is %q (%d characters)", n, len(n))
	}
}

func TestNewPlan(t *testing.T) {
	layout, err := globalip.NewLayout(netip.MustParsePrefix("242.1.0.0/28"), 0) // pool 242.1.0.8-14
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	web := Target{Namespace: "shop", Kind: v1alpha1.GlobalIngressTargetService, Name: "web", Service: "web", UID: "uid-web"}
	api := Target{Namespace: "shop", Kind: v1alpha1.GlobalIngressTargetService, Name: "api", Service: "api", UID: "uid-api"}
	// record is what an earlier pass left for t: address ip, created at minute.
	record := func(tg Target, ip string, minute int) v1alpha1.GlobalIngressIP {
		g := *newObject(tg)
		g.CreationTimestamp = metav1.NewTime(now.Add(time.Duration(minute-60) * time.Minute))
		g.UID = types.UID("record-" + tg.Name)
		g.Status.IP = ip
		meta.SetStatusCondition(&g.Status.Conditions, metav1.Condition{Type: v1alpha1.GlobalIngressIPConditionAllocated, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonAllocated, LastTransitionTime: g.CreationTimestamp,
			Message: ip + " is " + string(tg.Kind) + " " + tg.Name + "'s address in the ingress pool 242.1.0.8-242.1.0.14 of global CIDR 242.1.0.0/28"})
		return g
	}
	names := func(gs []*v1alpha1.GlobalIngressIP) []string {
		var out []string
		for _, g := range gs {
			out = append(out, g.Name)
		}
		return out
	}

	t.Run("unchanged records are left alone", func(t *testing.T) {
		p := NewPlan(layout, []Target{api, web}, []v1alpha1.GlobalIngressIP{record(web, "242.1.0.9", 0), record(api, "242.1.0.12", 1)}, nil, nil, now)
		if len(p.Create)+len(p.Delete)+len(p.Status) != 0 {
			t.Fatalf("plan %+v", p)
		}
	})
	t.Run("a new target gets a record and an address", func(t *testing.T) {
		p := NewPlan(layout, []Target{api, web}, []v1alpha1.GlobalIngressIP{record(web, "242.1.0.9", 0)}, nil, nil, now)
		st := p.Status["shop/svc-api"]
		if !slices.Equal(names(p.Create), []string{"svc-api"}) || len(p.Status) != 1 || !layout.Pool.Contains(netip.MustParseAddr(st.IP)) || st.IP == "242.1.0.9" {
			t.Fatalf("plan %+v", p)
		}
		if c := p.Create[0]; c.OwnerReferences[0].UID != "uid-api" || c.Labels["multicluster.kubernetes.io/service-name"] != "api" {
			t.Fatalf("new record %+v", c.ObjectMeta)
		}
	})
	t.Run("of two records with one address the older keeps it", func(t *testing.T) {
		p := NewPlan(layout, []Target{api, web}, []v1alpha1.GlobalIngressIP{record(api, "242.1.0.9", 5), record(web, "242.1.0.9", 0)}, nil, nil, now)
		if _, changed := p.Status["shop/svc-web"]; changed || len(p.Status) != 1 || p.Status["shop/svc-api"].IP == "242.1.0.9" {
			t.Fatalf("plan %+v", p)
		}
	})
	t.Run("records of gone, changed or recreated targets are deleted", func(t *testing.T) {
		other := record(web, "242.1.0.10", 0)
		other.Name = "svc-api" // a record under api's name for another target
		recreated := record(web, "242.1.0.9", 0)
		recreated.OwnerReferences[0].UID = "uid-of-the-old-web"
		gone := record(Target{Namespace: "shop", Kind: v1alpha1.GlobalIngressTargetPod, Name: "db-0", Service: "db", UID: "uid-db-0"}, "242.1.0.11", 0)
		p := NewPlan(layout, []Target{api, web}, []v1alpha1.GlobalIngressIP{other, recreated, gone}, nil, nil, now)
		if got := names(p.Delete); !slices.Equal(got, []string{"svc-api", "svc-web", "pod-db-0"}) {
			t.Fatalf("deleted %v", got)
		}
		if got := names(p.Create); !slices.Equal(got, []string{"svc-api", "svc-web"}) {
			t.Fatalf("created %v", got)
		}
	})
	t.Run("exhaustion is a condition naming the pool, and clears the address", func(t *testing.T) {
		var targets []Target
		var records []v1alpha1.GlobalIngressIP
		for i, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
			tg := Target{Namespace: "shop", Kind: v1alpha1.GlobalIngressTargetService, Name: name, Service: name, UID: types.UID("uid-" + name)}
			targets = append(targets, tg)
			if i < 7 {
				records = append(records, record(tg, "", i)) // none has an address yet
			}
		}
		p := NewPlan(layout, targets, records, nil, nil, now)
		var exhausted []string
		for key, st := range p.Status {
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.GlobalIngressIPConditionAllocated)
			if c.Status == metav1.ConditionFalse {
				exhausted = append(exhausted, key)
				if c.Reason != v1alpha1.ReasonPoolExhausted || st.IP != "" || !strings.Contains(c.Message, "ingress pool 242.1.0.8-242.1.0.14 of global CIDR 242.1.0.0/28 (all 7 are in use)") {
					t.Errorf("%s: %+v", key, st)
				}
			}
		}
		// The 7 existing records are older than the new one: it is the one left without.
		if p.Exhausted != 1 || !slices.Equal(exhausted, []string{"shop/svc-h"}) {
			t.Fatalf("exhausted %v (%d)", exhausted, p.Exhausted)
		}
	})
}

func TestNATState(t *testing.T) {
	layout, err := globalip.NewLayout(netip.MustParsePrefix("242.1.0.0/16"), 0)
	if err != nil {
		t.Fatal(err)
	}
	allocated := func(tg Target, ip string, ok bool) v1alpha1.GlobalIngressIP {
		g := *newObject(tg)
		g.Status.IP = ip
		st := metav1.ConditionTrue
		if !ok {
			st = metav1.ConditionFalse
		}
		g.Status.Conditions = []metav1.Condition{{Type: v1alpha1.GlobalIngressIPConditionAllocated, Status: st}}
		return g
	}
	port := func(name string, proto corev1.Protocol, p int32) discoveryv1.EndpointPort {
		return discoveryv1.EndpointPort{Name: ptr.To(name), Protocol: ptr.To(proto), Port: ptr.To(p)}
	}
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
		{Name: "http", Port: 80}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
	}}}
	exports := map[types.NamespacedName]Export{
		{Namespace: "shop", Name: "web"}: {Service: web, Slices: []discoveryv1.EndpointSlice{
			// Pods of two versions listen on different ports: kube-proxy pairs by port name.
			{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("http", corev1.ProtocolTCP, 8080), port("dns", corev1.ProtocolUDP, 5353)},
				Endpoints: []discoveryv1.Endpoint{endpoint("10.1.0.1", "web-a", true), endpoint("10.1.0.2", "web-b", false)}},
			{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("http", corev1.ProtocolTCP, 9090)},
				Endpoints: []discoveryv1.Endpoint{endpoint("10.1.0.3", "web-c", true)}},
			{AddressType: discoveryv1.AddressTypeIPv6, Ports: []discoveryv1.EndpointPort{port("http", corev1.ProtocolTCP, 8080)},
				Endpoints: []discoveryv1.Endpoint{endpoint("fd00::1", "web-a", true)}},
		}},
		{Namespace: "shop", Name: "db"}: {Service: &corev1.Service{}, Slices: []discoveryv1.EndpointSlice{
			{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{endpoint("10.1.1.1", "db-0", true), endpoint("10.1.1.2", "db-1", false)}},
		}},
	}
	pod := func(name string) Target {
		return Target{Namespace: "shop", Kind: v1alpha1.GlobalIngressTargetPod, Name: name, Service: "db"}
	}
	records := []v1alpha1.GlobalIngressIP{
		allocated(Target{Namespace: "shop", Kind: v1alpha1.GlobalIngressTargetService, Name: "web", Service: "web"}, "242.1.0.20", true),
		allocated(pod("db-0"), "242.1.0.21", true),
		allocated(pod("db-1"), "242.1.0.22", true),  // not ready any more: nothing
		allocated(pod("db-2"), "", false),           // exhausted: nothing
		allocated(pod("db-3"), "242.1.0.23", false), // not (or no longer) allocated: nothing
		allocated(Target{Namespace: "shop", Kind: v1alpha1.GlobalIngressTargetService, Name: "gone", Service: "gone"}, "242.1.0.24", true),
	}
	s := NATState(layout, nil, records, exports)
	want := `[{shop/web 242.1.0.20 [{tcp 80 [10.1.0.1:8080 10.1.0.3:9090]} {udp 53 [10.1.0.1:5353]}]}] [{shop/db-0 242.1.0.21 10.1.1.1}]`
	if got := fmt.Sprint(s.Services, " ", s.Pods); got != want {
		t.Fatalf("NATState:\n%s\nwant\n%s", got, want)
	}
}

// TestNewPlanEgress: GlobalEgressIPs get ranges of the pool that ingress addresses use too,
// without overlapping them; an allocated range stays; a range that finds no room is an
// Allocated=False condition naming the pool.
func TestNewPlanEgress(t *testing.T) {
	layout, err := globalip.NewLayout(netip.MustParsePrefix("242.1.0.0/28"), 0) // pool 242.1.0.8-14
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(egressEpoch)
	web := Target{Namespace: "shop", Kind: v1alpha1.GlobalIngressTargetService, Name: "web", Service: "web", UID: "uid-web"}
	webRecord := *newObject(web)
	webRecord.UID = "record-web"
	webRecord.Status.IP = "242.1.0.10"
	// The status a pass of its own writes, so that only egress changes show below.
	webRecord.Status = NewPlan(layout, []Target{web}, []v1alpha1.GlobalIngressIP{webRecord}, nil, nil, now).Status["shop/svc-web"]

	t.Run("new ranges avoid ingress addresses and each other", func(t *testing.T) {
		three := egressIP("shop", "shop", 0, nil)
		three.Spec.NumberOfIPs = 3
		p := NewPlan(layout, []Target{web}, []v1alpha1.GlobalIngressIP{webRecord}, []v1alpha1.GlobalEgressIP{three, egressIP("lab", "lab", 1, map[string]string{"app": "probe"})}, nil, now)
		used := map[string]string{"242.1.0.10": "shop/svc-web"}
		for key, want := range map[string]int{"shop/shop": 3, "lab/lab": 1} {
			st := p.EgressStatus[key]
			if _, ok := egressRange(st.AllocatedIPs); !ok || len(st.AllocatedIPs) != want || !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.GlobalEgressIPConditionAllocated) {
				t.Fatalf("%s: status %+v, want %d consecutive addresses, allocated", key, st, want)
			}
			for _, ip := range st.AllocatedIPs {
				if !layout.Pool.Contains(netip.MustParseAddr(ip)) || used[ip] != "" {
					t.Errorf("%s got %s: outside the pool %s or also %s's", key, ip, layout.Pool, used[ip])
				}
				used[ip] = key
			}
		}
		if p.EgressExhausted != 0 || len(p.Status) != 0 {
			t.Fatalf("plan %+v", p)
		}
	})
	t.Run("an allocated range is kept and its status not rewritten", func(t *testing.T) {
		g := egressIP("shop", "shop", 0, nil, "242.1.0.12", "242.1.0.13")
		p := NewPlan(layout, []Target{web}, []v1alpha1.GlobalIngressIP{webRecord}, []v1alpha1.GlobalEgressIP{g}, nil, now)
		p2 := NewPlan(layout, []Target{web}, []v1alpha1.GlobalIngressIP{webRecord}, []v1alpha1.GlobalEgressIP{withStatus(g, p.EgressStatus["shop/shop"])}, nil, now)
		if got := p.EgressStatus["shop/shop"].AllocatedIPs; !slices.Equal(got, []string{"242.1.0.12", "242.1.0.13"}) {
			t.Fatalf("allocated %v, want the range it held", got)
		}
		if len(p2.EgressStatus) != 0 {
			t.Fatalf("second pass rewrites %+v", p2.EgressStatus)
		}
	})
	t.Run("no room is a condition naming the pool, and the ingress addresses keep theirs", func(t *testing.T) {
		big := egressIP("shop", "big", 0, nil)
		big.Spec.NumberOfIPs = 7 // the pool has 7 addresses, one of them web's
		p := NewPlan(layout, []Target{web}, []v1alpha1.GlobalIngressIP{webRecord}, []v1alpha1.GlobalEgressIP{big}, nil, now)
		st := p.EgressStatus["shop/big"]
		c := meta.FindStatusCondition(st.Conditions, v1alpha1.GlobalEgressIPConditionAllocated)
		if p.EgressExhausted != 1 || len(st.AllocatedIPs) != 0 || c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonPoolExhausted ||
			!strings.Contains(c.Message, "No 7 consecutive free addresses in the pool 242.1.0.8-242.1.0.14 of global CIDR 242.1.0.0/28") ||
			!strings.Contains(c.Message, "cluster's egress range 242.1.0.0-242.1.0.7") {
			t.Fatalf("status %+v", st)
		}
		if len(p.Status) != 0 || len(p.Delete) != 0 {
			t.Fatalf("the web record changed: %+v", p)
		}
	})
}

func withStatus(g v1alpha1.GlobalEgressIP, st v1alpha1.GlobalEgressIPStatus) v1alpha1.GlobalEgressIP {
	g.Status = st
	return g
}

// TestNewPlanEgressInvalidSelector: a podSelector the schema let through but that does not
// parse gets no range and a condition that says why.
func TestNewPlanEgressInvalidSelector(t *testing.T) {
	layout, err := globalip.NewLayout(netip.MustParsePrefix("242.1.0.0/28"), 0)
	if err != nil {
		t.Fatal(err)
	}
	g := egressIP("shop", "bad", 0, map[string]string{"app": "not a label value"}, "242.1.0.9")
	p := NewPlan(layout, nil, nil, []v1alpha1.GlobalEgressIP{g}, nil, metav1.NewTime(egressEpoch))
	st := p.EgressStatus["shop/bad"]
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.GlobalEgressIPConditionAllocated)
	if len(st.AllocatedIPs) != 0 || c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonInvalidPodSelector || !strings.Contains(c.Message, "podSelector") {
		t.Fatalf("status %+v", st)
	}
}
