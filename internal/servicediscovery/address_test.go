package servicediscovery

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

func TestImportType(t *testing.T) {
	for _, tc := range []struct {
		name      string
		spec      corev1.ServiceSpec
		want      mcsv1beta1.ServiceImportType
		exporting bool
	}{
		{"ClusterIP", corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.1"}, mcsv1beta1.ClusterSetIP, true},
		{"type unset", corev1.ServiceSpec{ClusterIP: "10.0.0.1"}, mcsv1beta1.ClusterSetIP, true},
		{"NodePort", corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.0.0.1"}, mcsv1beta1.ClusterSetIP, true},
		{"LoadBalancer", corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.0.0.1"}, mcsv1beta1.ClusterSetIP, true},
		{"headless", corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: corev1.ClusterIPNone}, mcsv1beta1.Headless, true},
		{"ExternalName", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ImportType(&corev1.Service{Spec: tc.spec})
			if got != tc.want || ok != tc.exporting {
				t.Errorf("ImportType = %q, %v; want %q, %v", got, ok, tc.want, tc.exporting)
			}
		})
	}
}

func TestRecordName(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, tc := range []struct {
		name, svc, ns, cluster string
		wantPrefix             string
	}{
		{"short names stay readable", "web", "shop", "east", "web-shop-east-"},
		{"long names are cut", long, long, "east", strings.Repeat("a", 52) + "-"},
		{"cut never leaves a double dash", strings.Repeat("a", 51) + "-b", "shop", "east", strings.Repeat("a", 51) + "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := recordName(types.NamespacedName{Namespace: tc.ns, Name: tc.svc}, tc.cluster)
			if !strings.HasPrefix(got, tc.wantPrefix) {
				t.Errorf("recordName = %q, want prefix %q", got, tc.wantPrefix)
			}
			if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
				t.Errorf("recordName = %q is not a DNS label: %v", got, errs)
			}
			if again := recordName(types.NamespacedName{Namespace: tc.ns, Name: tc.svc}, tc.cluster); again != got {
				t.Errorf("recordName is not deterministic: %q then %q", got, again)
			}
		})
	}
	// The readable parts of these collide; the names must not.
	a := recordName(types.NamespacedName{Namespace: "c", Name: "a-b"}, "east")
	b := recordName(types.NamespacedName{Namespace: "b-c", Name: "a"}, "east")
	if a == b {
		t.Errorf("services a-b/c and a/b-c share the record name %q", a)
	}
	if recordName(types.NamespacedName{Namespace: "shop", Name: "web"}, "east") == recordName(types.NamespacedName{Namespace: "shop", Name: "web"}, "west") {
		t.Error("two clusters' exports of one service share a record name")
	}
}

func port(name string, p int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To(name), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(p)}
}

func podEndpoint(ip, pod string, ready *bool, host string) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{
		Addresses:  []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: ready},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: pod},
		NodeName:   ptr.To("node-1"),
	}
	if host != "" {
		ep.Hostname = ptr.To(host)
	}
	return ep
}

func TestDirectAddresses(t *testing.T) {
	ready := discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}
	svcPorts := []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)}, {Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}
	for _, tc := range []struct {
		name  string
		svc   corev1.ServiceSpec
		typ   mcsv1beta1.ServiceImportType
		local []discoveryv1.EndpointSlice
		want  []EndpointSet
	}{{
		name: "ClusterSetIP: the ready pods with their target ports under the service ports' names, no hostnames",
		svc:  corev1.ServiceSpec{ClusterIP: "10.200.0.10", ClusterIPs: []string{"10.200.0.10"}, Ports: svcPorts},
		typ:  mcsv1beta1.ClusterSetIP,
		// Not the ClusterIP: kube-proxy in the exporting cluster refuses a ClusterIP as an
		// endpoint, and elsewhere a second DNAT would hide the client's address.
		local: []discoveryv1.EndpointSlice{{
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{port("web", 8080), {Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To[int32](53)}},
			Endpoints: []discoveryv1.Endpoint{
				podEndpoint("10.100.0.5", "web-0", nil, "web-0"),
				podEndpoint("10.100.0.6", "web-1", ptr.To(false), ""),
			},
		}},
		want: []EndpointSet{{
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To[int32](53)}, port("web", 8080)},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.100.0.5"}, Conditions: ready}},
		}},
	}, {
		name: "ClusterSetIP dual stack: one set per family",
		svc:  corev1.ServiceSpec{ClusterIP: "10.200.0.10", ClusterIPs: []string{"10.200.0.10", "fd00::a"}, Ports: svcPorts[:1]},
		typ:  mcsv1beta1.ClusterSetIP,
		local: []discoveryv1.EndpointSlice{
			{AddressType: discoveryv1.AddressTypeIPv6, Ports: []discoveryv1.EndpointPort{port("web", 8080)}, Endpoints: []discoveryv1.Endpoint{podEndpoint("fd00:100::5", "web-0", nil, "")}},
			{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("web", 8080)}, Endpoints: []discoveryv1.Endpoint{podEndpoint("10.100.0.5", "web-0", nil, "")}},
		},
		want: []EndpointSet{
			{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("web", 8080)}, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.100.0.5"}, Conditions: ready}}},
			{AddressType: discoveryv1.AddressTypeIPv6, Ports: []discoveryv1.EndpointPort{port("web", 8080)}, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"fd00:100::5"}, Conditions: ready}}},
		},
	}, {
		name: "ClusterSetIP without ready pods: nothing",
		svc:  corev1.ServiceSpec{ClusterIP: "10.200.0.10", Ports: svcPorts},
		typ:  mcsv1beta1.ClusterSetIP,
		want: []EndpointSet{},
	}, {
		name: "headless: ready pods only, hostnames kept (none from the pod's name), sorted, duplicates dropped",
		svc:  corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone},
		typ:  mcsv1beta1.Headless,
		local: []discoveryv1.EndpointSlice{{
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("web", 8080)},
			Endpoints: []discoveryv1.Endpoint{
				podEndpoint("10.100.0.10", "web-1", ptr.To(true), "web-1"),
				podEndpoint("10.100.0.9", "web-0", nil, ""),
				podEndpoint("10.100.0.11", "web-2", ptr.To(false), "web-2"),
			},
		}, {
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("web", 8080)},
			Endpoints: []discoveryv1.Endpoint{podEndpoint("10.100.0.10", "web-1", ptr.To(true), "web-1")},
		}, {
			AddressType: discoveryv1.AddressTypeFQDN, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"example.com"}}},
		}},
		want: []EndpointSet{{
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("web", 8080)},
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{"10.100.0.9"}, Conditions: ready},
				{Addresses: []string{"10.100.0.10"}, Hostname: ptr.To("web-1"), Conditions: ready},
			},
		}},
	}, {
		name: "headless: slices with different ports stay apart",
		svc:  corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone},
		typ:  mcsv1beta1.Headless,
		local: []discoveryv1.EndpointSlice{
			{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("web", 8081)}, Endpoints: []discoveryv1.Endpoint{podEndpoint("10.100.0.2", "new", nil, "")}},
			{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("web", 8080)}, Endpoints: []discoveryv1.Endpoint{podEndpoint("10.100.0.1", "old.pod", nil, "")}},
		},
		want: []EndpointSet{
			{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("web", 8080)}, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.100.0.1"}, Conditions: ready}}},
			{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("web", 8081)}, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.100.0.2"}, Conditions: ready}}},
		},
	}, {
		name: "headless without ready pods: nothing",
		svc:  corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone},
		typ:  mcsv1beta1.Headless,
		local: []discoveryv1.EndpointSlice{{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{
			podEndpoint("10.100.0.1", "p", ptr.To(false), ""),
		}}},
		want: []EndpointSet{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DirectAddresses{}.Endpoints(t.Context(), &corev1.Service{Spec: tc.svc}, tc.typ, tc.local)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !equalJSON(t, got, tc.want) {
				t.Errorf("Endpoints =\n%s\nwant\n%s", toJSON(t, got), toJSON(t, tc.want))
			}
		})
	}
}

func TestGlobalAddresses(t *testing.T) {
	ready := discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}
	record := func(kind v1alpha1.GlobalIngressTargetKind, name, service, ip string, allocated bool) *v1alpha1.GlobalIngressIP {
		g := &v1alpha1.GlobalIngressIP{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: strings.ToLower(string(kind)) + "-" + name, Labels: map[string]string{mcsv1beta1.LabelServiceName: service}},
			Spec:       v1alpha1.GlobalIngressIPSpec{Target: v1alpha1.GlobalIngressTarget{Kind: kind, Name: name}},
			Status:     v1alpha1.GlobalIngressIPStatus{IP: ip},
		}
		if kind == v1alpha1.GlobalIngressTargetPod {
			g.Spec.Target.ServiceName = service
		}
		st := metav1.ConditionFalse
		if allocated {
			st = metav1.ConditionTrue
		}
		g.Status.Conditions = []metav1.Condition{{Type: v1alpha1.GlobalIngressIPConditionAllocated, Status: st, Reason: "Test"}}
		return g
	}
	webSlices := []discoveryv1.EndpointSlice{{
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("http", 8080)},
		Endpoints: []discoveryv1.Endpoint{podEndpoint("10.100.0.5", "web-0", nil, ""), podEndpoint("10.100.0.6", "web-1", ptr.To(false), "")},
	}}
	dbSlices := []discoveryv1.EndpointSlice{{
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("pg", 5432)},
		Endpoints: []discoveryv1.Endpoint{
			podEndpoint("10.100.0.9", "db-0", nil, "db-0"),
			podEndpoint("10.100.0.10", "db-1", nil, "db-1"),
			podEndpoint("10.100.0.11", "db-2", nil, "db-2"),
		},
	}}
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: corev1.ServiceSpec{
		ClusterIP: "10.200.0.10", Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
	}}
	db := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}
	for _, tc := range []struct {
		name    string
		records []client.Object
		svc     *corev1.Service
		typ     mcsv1beta1.ServiceImportType
		local   []discoveryv1.EndpointSlice
		want    []EndpointSet
	}{{
		name:    "ClusterSetIP: the global IP with the service's own ports",
		records: []client.Object{record(v1alpha1.GlobalIngressTargetService, "web", "web", "242.1.0.20", true)},
		svc:     web, typ: mcsv1beta1.ClusterSetIP, local: webSlices,
		want: []EndpointSet{{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("http", 80)},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"242.1.0.20"}, Conditions: ready}}}},
	}, {
		name:    "ClusterSetIP before its address is allocated: nothing",
		records: []client.Object{record(v1alpha1.GlobalIngressTargetService, "web", "web", "", false)},
		svc:     web, typ: mcsv1beta1.ClusterSetIP, local: webSlices,
	}, {
		name:    "ClusterSetIP without a ready pod: nothing, though allocated",
		records: []client.Object{record(v1alpha1.GlobalIngressTargetService, "web", "web", "242.1.0.20", true)},
		svc:     web, typ: mcsv1beta1.ClusterSetIP, local: webSlices[:0],
	}, {
		name: "headless: each pod with an address by it, keeping hostnames and target ports",
		records: []client.Object{
			record(v1alpha1.GlobalIngressTargetPod, "db-0", "db", "242.1.0.31", true),
			record(v1alpha1.GlobalIngressTargetPod, "db-1", "db", "242.1.0.30", true),
			record(v1alpha1.GlobalIngressTargetPod, "db-2", "db", "", false), // pool exhausted: left out
			record(v1alpha1.GlobalIngressTargetService, "web", "web", "242.1.0.20", true),
		},
		svc: db, typ: mcsv1beta1.Headless, local: dbSlices,
		want: []EndpointSet{{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("pg", 5432)},
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{"242.1.0.30"}, Hostname: ptr.To("db-1"), Conditions: ready},
				{Addresses: []string{"242.1.0.31"}, Hostname: ptr.To("db-0"), Conditions: ready},
			}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(tc.records...).Build()
			got, err := GlobalAddresses{Member: c}.Endpoints(t.Context(), tc.svc, tc.typ, tc.local)
			if err != nil {
				t.Fatal(err)
			}
			if (len(got) != 0 || len(tc.want) != 0) && !equalJSON(t, got, tc.want) {
				t.Errorf("Endpoints =\n%s\nwant\n%s", toJSON(t, got), toJSON(t, tc.want))
			}
		})
	}
}

// secondaryPod is pod name of namespace shop with the network-status annotation value status
// ("" for none).
func secondaryPod(name, status string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}
	if status != "" {
		pod.Annotations = map[string]string{podnet.NetworkStatusAnnotation: status}
	}
	return pod
}

// networkStatus is the annotation the ovnmaster writes for a pod with secondary address ip,
// after an entry of another network (Multus's), which must not be taken for ours.
func networkStatus(t *testing.T, ip string) string {
	t.Helper()
	v, err := podnet.Set(`[{"name":"cbr0","interface":"eth0","ips":["10.100.0.99"],"default":true}]`,
		ptr.To(podnet.Entry(netip.MustParseAddr(ip), "0a:58:00:00:00:00")))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSecondaryAddresses(t *testing.T) {
	ready := discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: corev1.ServiceSpec{
		ClusterIP: "10.200.0.10", Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}, {Name: "metrics", Port: 9090}},
	}}
	db := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}
	twoPorts := []discoveryv1.EndpointPort{port("http", 8080), port("metrics", 9090)}
	webSlices := []discoveryv1.EndpointSlice{{
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("metrics", 9090), port("http", 8080)},
		Endpoints: []discoveryv1.Endpoint{
			podEndpoint("10.100.0.5", "web-0", nil, ""),
			podEndpoint("10.100.0.6", "web-1", ptr.To(true), ""),
			podEndpoint("10.100.0.7", "web-2", ptr.To(false), ""), // not ready: never offered
			podEndpoint("10.100.0.8", "web-3", nil, ""),
			// A hand-made endpoint of no pod has no secondary address.
			{Addresses: []string{"10.100.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
		},
	}}
	dbSlices := []discoveryv1.EndpointSlice{{
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("pg", 5432)},
		Endpoints: []discoveryv1.Endpoint{podEndpoint("10.100.0.10", "db-0", nil, "db-0"), podEndpoint("10.100.0.11", "db-1", nil, "")},
	}, {
		// The same pods in an IPv6 slice (dual-stack primary network): the secondary network is
		// IPv4, so nothing of it is offered.
		AddressType: discoveryv1.AddressTypeIPv6, Ports: []discoveryv1.EndpointPort{port("pg", 5432)},
		Endpoints: []discoveryv1.Endpoint{podEndpoint("fd00::10", "db-0", nil, "db-0")},
	}}
	for _, tc := range []struct {
		name  string
		pods  []client.Object
		svc   *corev1.Service
		typ   mcsv1beta1.ServiceImportType
		local []discoveryv1.EndpointSlice
		want  []EndpointSet
	}{{
		name: "ClusterSetIP: ready pods by their secondary addresses, sorted, with every target port, no hostnames",
		pods: []client.Object{
			secondaryPod("web-0", networkStatus(t, "10.112.0.20")),
			secondaryPod("web-1", networkStatus(t, "10.112.0.3")),
			secondaryPod("web-2", networkStatus(t, "10.112.0.4")),
			secondaryPod("web-3", networkStatus(t, "10.112.0.100")),
		},
		svc: web, typ: mcsv1beta1.ClusterSetIP, local: webSlices,
		want: []EndpointSet{{AddressType: discoveryv1.AddressTypeIPv4, Ports: twoPorts, Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.112.0.3"}, Conditions: ready},
			{Addresses: []string{"10.112.0.20"}, Conditions: ready},
			{Addresses: []string{"10.112.0.100"}, Conditions: ready},
		}}},
	}, {
		name: "pods without a usable secondary address are not offered",
		pods: []client.Object{
			secondaryPod("web-0", networkStatus(t, "10.112.0.20")),
			secondaryPod("web-1", ""), // no annotation: the ovnmaster has not served it yet
			secondaryPod("web-3", `[{"name":"octopus.io/secondary","ips":["not-an-ip"]}]`),
			// web-2 is ready in no slice; web-4 does not exist.
		},
		svc: web, typ: mcsv1beta1.ClusterSetIP, local: append(slices.Clone(webSlices), discoveryv1.EndpointSlice{
			AddressType: discoveryv1.AddressTypeIPv4, Ports: twoPorts,
			Endpoints: []discoveryv1.Endpoint{podEndpoint("10.100.0.12", "web-4", nil, "")},
		}),
		want: []EndpointSet{{AddressType: discoveryv1.AddressTypeIPv4, Ports: twoPorts, Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.112.0.20"}, Conditions: ready},
		}}},
	}, {
		name: "a garbled annotation or one without our entry offers nothing",
		pods: []client.Object{
			secondaryPod("web-0", `{"name":"octopus.io/secondary"}`),
			secondaryPod("web-1", `[{"name":"cbr0","ips":["10.100.0.6"]}]`),
			secondaryPod("web-3", `[{"name":"octopus.io/secondary"}]`),
		},
		svc: web, typ: mcsv1beta1.ClusterSetIP, local: webSlices,
	}, {
		name: "headless: hostnames kept (none from pod names), IPv6 slices left empty",
		pods: []client.Object{
			secondaryPod("db-0", networkStatus(t, "10.112.0.31")),
			secondaryPod("db-1", networkStatus(t, "10.112.0.30")),
		},
		svc: db, typ: mcsv1beta1.Headless, local: dbSlices,
		want: []EndpointSet{{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("pg", 5432)}, Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.112.0.30"}, Conditions: ready},
			{Addresses: []string{"10.112.0.31"}, Hostname: ptr.To("db-0"), Conditions: ready},
		}}},
	}, {
		name: "no ready endpoint: nothing",
		pods: []client.Object{secondaryPod("web-2", networkStatus(t, "10.112.0.4"))},
		svc:  web, typ: mcsv1beta1.ClusterSetIP, local: []discoveryv1.EndpointSlice{{
			AddressType: discoveryv1.AddressTypeIPv4, Ports: twoPorts,
			Endpoints: []discoveryv1.Endpoint{podEndpoint("10.100.0.7", "web-2", ptr.To(false), "")},
		}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(tc.pods...).Build()
			p := SecondaryAddresses{Member: c}
			got, err := p.Endpoints(t.Context(), tc.svc, tc.typ, tc.local)
			if err != nil {
				t.Fatal(err)
			}
			if (len(got) != 0 || len(tc.want) != 0) && !equalJSON(t, got, tc.want) {
				t.Errorf("Endpoints =\n%s\nwant\n%s", toJSON(t, got), toJSON(t, tc.want))
			}
			// Deterministic: the same input, the same sets (the exporter compares them with the hub's).
			again, err := p.Endpoints(t.Context(), tc.svc, tc.typ, tc.local)
			if err != nil || !equalJSON(t, got, again) {
				t.Errorf("a second call gave\n%s (%v)", toJSON(t, again), err)
			}
		})
	}

	t.Run("a failed read fails the reconcile", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithInterceptorFuncs(interceptor.Funcs{
			Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
				return errors.New("cache gone")
			},
		}).Build()
		_, err := SecondaryAddresses{Member: c}.Endpoints(t.Context(), web, mcsv1beta1.ClusterSetIP, webSlices)
		if err == nil || !strings.Contains(err.Error(), "shop/web-0") {
			t.Errorf("Endpoints error = %v, want one naming the pod", err)
		}
	})
}

func TestDesiredState(t *testing.T) {
	created := metav1.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	export := &mcsv1beta1.ServiceExport{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", CreationTimestamp: created},
		Spec:       mcsv1beta1.ServiceExportSpec{ExportedLabels: map[string]string{"tier": "front", "app": "web"}},
	}
	svc := &corev1.Service{Spec: corev1.ServiceSpec{
		ClusterIP: "10.200.0.10", Ports: []corev1.ServicePort{{Name: "web", Port: 80}},
		SessionAffinity:       corev1.ServiceAffinityClientIP,
		SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}},
	}}
	many := EndpointSet{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{port("web", 80)}}
	for i := range 2500 {
		many.Endpoints = append(many.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.100." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250)}})
	}
	pub, err := desiredState("octopus-hub", "east", export, svc, mcsv1beta1.ClusterSetIP, []EndpointSet{many})
	if err != nil {
		t.Fatal(err)
	}
	rec := pub.record
	if rec.Namespace != "octopus-hub" || rec.Spec.Type != mcsv1beta1.ClusterSetIP || len(rec.Spec.Ports) != 1 || rec.Spec.Ports[0].Protocol != corev1.ProtocolTCP ||
		rec.Spec.SessionAffinity != corev1.ServiceAffinityClientIP || *rec.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds != 60 || len(rec.Spec.IPs) != 0 {
		t.Errorf("record spec = %+v", rec.Spec)
	}
	wantLabels := map[string]string{v1alpha1.ClusterLabel: "east", v1alpha1.ServiceNamespaceLabel: "shop", mcsv1beta1.LabelServiceName: "web", mcsv1beta1.LabelSourceCluster: "east"}
	if !equalJSON(t, rec.Labels, wantLabels) {
		t.Errorf("record labels = %v, want %v", rec.Labels, wantLabels)
	}
	if got := rec.Annotations[v1alpha1.ExportCreatedAnnotation]; got != "2026-05-01T12:00:00Z" {
		t.Errorf("export-created = %q", got)
	}
	if got := rec.Annotations[v1alpha1.ExportedLabelsAnnotation]; got != `{"app":"web","tier":"front"}` {
		t.Errorf("exported labels = %q", got)
	}
	if _, ok := rec.Annotations[v1alpha1.ExportedAnnotationsAnnotation]; ok {
		t.Error("empty exportedAnnotations published")
	}
	if len(pub.slices) != 3 {
		t.Fatalf("2500 endpoints in %d slices, want 3", len(pub.slices))
	}
	names := map[string]bool{}
	total := 0
	for _, s := range pub.slices {
		names[s.Name] = true
		total += len(s.Endpoints)
		if len(s.Endpoints) > maxEndpointsPerSlice || s.Labels[mcsv1beta1.LabelSourceCluster] != "east" || s.Labels[mcsv1beta1.LabelServiceName] != "web" ||
			s.Labels[v1alpha1.ClusterLabel] != "east" || s.Labels[discoveryv1.LabelManagedBy] != endpointSliceManager || !strings.HasPrefix(s.Name, rec.Name+"-ipv4-") {
			t.Errorf("slice %s: %d endpoints, labels %v", s.Name, len(s.Endpoints), s.Labels)
		}
	}
	if len(names) != 3 || total != 2500 {
		t.Errorf("slices %v hold %d endpoints", names, total)
	}
}

func TestGlobalAddressesFamilies(t *testing.T) {
	for _, tc := range []struct {
		name       string
		families   []corev1.IPFamily
		clusterIP  string
		hasIPv4    bool
		unsupports bool
	}{
		{"IPv4", []corev1.IPFamily{corev1.IPv4Protocol}, "10.96.0.10", true, false},
		{"dual-stack, IPv6 primary", []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}, "2001:db8::10", true, false},
		{"IPv6 only", []corev1.IPFamily{corev1.IPv6Protocol}, "2001:db8::10", false, true},
		{"headless IPv6 only", []corev1.IPFamily{corev1.IPv6Protocol}, corev1.ClusterIPNone, false, true},
		{"not defaulted, IPv6 ClusterIP", nil, "2001:db8::10", false, true},
		{"not defaulted, IPv4 ClusterIP", nil, "10.96.0.10", true, false},
		{"not defaulted, headless", nil, corev1.ClusterIPNone, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &corev1.Service{Spec: corev1.ServiceSpec{IPFamilies: tc.families, ClusterIP: tc.clusterIP}}
			if got := HasIPv4(svc); got != tc.hasIPv4 {
				t.Errorf("HasIPv4 = %v, want %v", got, tc.hasIPv4)
			}
			msg := GlobalAddresses{}.unsupportedFamilies(svc)
			if (msg != "") != tc.unsupports || tc.unsupports && !strings.Contains(msg, "ipFamilyPolicy PreferDualStack") {
				t.Errorf("unsupportedFamilies = %q, want a refusal naming the fix: %v", msg, tc.unsupports)
			}
		})
	}
	// The other policies offer every family.
	for _, p := range []AddressPolicy{DirectAddresses{}, SecondaryAddresses{}} {
		if _, ok := p.(familyLimited); ok {
			t.Errorf("%T refuses some families", p)
		}
	}
}
