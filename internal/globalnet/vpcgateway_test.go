package globalnet

import (
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
)

// testVpc is a Vpc created at minute (after egressEpoch) holding ip ("" for none).
func testVpc(name string, minute int, ip string) v1alpha1.Vpc {
	v := v1alpha1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(egressEpoch.Add(time.Duration(minute) * time.Minute))}}
	if ip != "" {
		v.Status.Gateway = &v1alpha1.VpcGatewayStatus{ExternalIP: ip}
	}
	return v
}

// ingressAt is a GlobalIngressIP created at minute holding ip.
func ingressAt(name string, minute int, ip string) v1alpha1.GlobalIngressIP {
	g := v1alpha1.GlobalIngressIP{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name,
		CreationTimestamp: metav1.NewTime(egressEpoch.Add(time.Duration(minute) * time.Minute))}}
	g.Status.IP = ip
	return g
}

// TestVpcExternalIPs: VPC gateways get addresses of the pool that no ingress record, egress
// range or other VPC holds; a held address is kept across passes (a restart, a failover);
// of two holding one address the older keeps it, whichever kind each is; a Vpc that no longer
// wants its address frees it once its status does, not before; a full pool leaves a Vpc out; and the answer does not depend
// on the order the objects are listed in (each worker computes it for its own Vpc).
func TestVpcExternalIPs(t *testing.T) {
	layout, err := globalip.NewLayout(netip.MustParsePrefix("242.1.0.0/28"), 0) // pool 242.1.0.8-14
	if err != nil {
		t.Fatal(err)
	}
	all := func(*v1alpha1.Vpc) bool { return true }
	inPool := func(a netip.Addr) bool { return layout.Pool.Contains(a) }
	for _, tc := range []struct {
		name    string
		vpcs    []v1alpha1.Vpc
		wants   func(*v1alpha1.Vpc) bool
		ingress []v1alpha1.GlobalIngressIP
		egress  []v1alpha1.GlobalEgressIP
		// want: the Vpc's exact address; "pool" any free one of the pool; absent: none.
		want map[string]string
		// taken are addresses no Vpc may get.
		taken []string
	}{
		{name: "a new Vpc gets a free address of the pool, none held by others",
			vpcs:    []v1alpha1.Vpc{testVpc("red", 10, "")},
			ingress: []v1alpha1.GlobalIngressIP{ingressAt("svc-a", 0, "242.1.0.8"), ingressAt("svc-b", 0, "242.1.0.9")},
			egress:  []v1alpha1.GlobalEgressIP{egressIP("lab", "three", 0, nil, "242.1.0.10", "242.1.0.11", "242.1.0.12")},
			want:    map[string]string{"red": "pool"}, taken: []string{"242.1.0.8", "242.1.0.9", "242.1.0.10", "242.1.0.11", "242.1.0.12"}},
		{name: "a held address is kept",
			vpcs: []v1alpha1.Vpc{testVpc("red", 10, "242.1.0.13"), testVpc("blue", 11, "242.1.0.8")},
			want: map[string]string{"red": "242.1.0.13", "blue": "242.1.0.8"}},
		{name: "an older ingress record keeps a shared address, the Vpc moves",
			vpcs:    []v1alpha1.Vpc{testVpc("red", 10, "242.1.0.9")},
			ingress: []v1alpha1.GlobalIngressIP{ingressAt("svc-a", 5, "242.1.0.9")},
			want:    map[string]string{"red": "pool"}, taken: []string{"242.1.0.9"}},
		{name: "an older Vpc keeps a shared address (the allocator moves the record)",
			vpcs:    []v1alpha1.Vpc{testVpc("red", 10, "242.1.0.9")},
			ingress: []v1alpha1.GlobalIngressIP{ingressAt("svc-a", 15, "242.1.0.9")},
			want:    map[string]string{"red": "242.1.0.9"}},
		{name: "an older egress range keeps a shared address",
			vpcs:   []v1alpha1.Vpc{testVpc("red", 10, "242.1.0.11")},
			egress: []v1alpha1.GlobalEgressIP{egressIP("lab", "two", 0, nil, "242.1.0.10", "242.1.0.11")},
			want:   map[string]string{"red": "pool"}, taken: []string{"242.1.0.10", "242.1.0.11"}},
		{name: "of two Vpcs on one address the older keeps it",
			vpcs: []v1alpha1.Vpc{testVpc("blue", 12, "242.1.0.9"), testVpc("red", 10, "242.1.0.9")},
			want: map[string]string{"red": "242.1.0.9", "blue": "pool"}}, // the duplicate check keeps blue off it
		// Six addresses of seven held by ingress records: red's only possible one is grey's.
		{name: "a Vpc that wants none gets none and holds its address while its status does",
			vpcs:  []v1alpha1.Vpc{testVpc("grey", 1, "242.1.0.9"), testVpc("red", 10, "")},
			wants: func(v *v1alpha1.Vpc) bool { return v.Name != "grey" },
			ingress: []v1alpha1.GlobalIngressIP{ingressAt("a", 0, "242.1.0.8"), ingressAt("b", 0, "242.1.0.10"), ingressAt("c", 0, "242.1.0.11"),
				ingressAt("d", 0, "242.1.0.12"), ingressAt("e", 0, "242.1.0.13"), ingressAt("f", 0, "242.1.0.14")},
			want: map[string]string{}, taken: []string{"242.1.0.9"}},
		{name: "once its status lets the address go, another Vpc gets it",
			vpcs:  []v1alpha1.Vpc{testVpc("grey", 1, ""), testVpc("red", 10, "")},
			wants: func(v *v1alpha1.Vpc) bool { return v.Name != "grey" },
			ingress: []v1alpha1.GlobalIngressIP{ingressAt("a", 0, "242.1.0.8"), ingressAt("b", 0, "242.1.0.10"), ingressAt("c", 0, "242.1.0.11"),
				ingressAt("d", 0, "242.1.0.12"), ingressAt("e", 0, "242.1.0.13"), ingressAt("f", 0, "242.1.0.14")},
			want: map[string]string{"red": "242.1.0.9"}},
		{name: "a full pool leaves a new Vpc out and a holder alone",
			vpcs: []v1alpha1.Vpc{testVpc("red", 0, "242.1.0.14"), testVpc("blue", 10, "")},
			egress: []v1alpha1.GlobalEgressIP{egressIP("lab", "six", 0, nil,
				"242.1.0.8", "242.1.0.9", "242.1.0.10", "242.1.0.11", "242.1.0.12", "242.1.0.13")},
			want: map[string]string{"red": "242.1.0.14"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wants := cmpWants(tc.wants, all)
			got := VpcExternalIPs(layout, tc.vpcs, wants, tc.ingress, tc.egress)
			if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(tc.want))) {
				t.Fatalf("VpcExternalIPs = %v, want addresses for %v", got, tc.want)
			}
			seen := map[netip.Addr]string{}
			for name, w := range tc.want {
				a := got[name]
				if (w == "pool" && !inPool(a)) || (w != "pool" && a.String() != w) {
					t.Errorf("Vpc %s got %s, want %s", name, a, w)
				}
				if slices.Contains(tc.taken, a.String()) {
					t.Errorf("Vpc %s got %s, which another holder keeps", name, a)
				}
				if other, dup := seen[a]; dup {
					t.Errorf("Vpcs %s and %s both got %s", name, other, a)
				}
				seen[a] = name
			}
			// The same objects listed in reverse give the same answer.
			again := VpcExternalIPs(layout, reversed(tc.vpcs), wants, reversed(tc.ingress), reversed(tc.egress))
			if !maps.Equal(got, again) {
				t.Errorf("listed in reverse: %v, first %v", again, got)
			}
		})
	}
}

// TestNewPlanCountsVpcGateways: the ingress allocator never hands out an address a VPC
// gateway holds, and moves a younger record off one.
func TestNewPlanCountsVpcGateways(t *testing.T) {
	layout, err := globalip.NewLayout(netip.MustParsePrefix("242.1.0.0/29"), 5) // pool 242.1.0.5-6
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(egressEpoch.Add(time.Hour))
	web := Target{Namespace: "shop", Kind: v1alpha1.GlobalIngressTargetService, Name: "web", Service: "web", UID: "uid-web"}
	for _, tc := range []struct {
		name string
		vpc  v1alpha1.Vpc
		// record: web's record created at minute 20 holding this address ("" for none).
		record string
		want   string
	}{
		{name: "a new target gets the address no Vpc holds", vpc: testVpc("red", 10, "242.1.0.5"), want: "242.1.0.6"},
		{name: "a younger record on a Vpc's address moves", vpc: testVpc("red", 10, "242.1.0.6"), record: "242.1.0.6", want: "242.1.0.5"},
		{name: "an older record keeps its address", vpc: testVpc("red", 30, "242.1.0.6"), record: "242.1.0.6", want: "242.1.0.6"},
		{name: "a Vpc without an address holds nothing", vpc: testVpc("red", 10, ""), record: "242.1.0.6", want: "242.1.0.6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var existing []v1alpha1.GlobalIngressIP
			if tc.record != "" {
				g := *newObject(web)
				g.UID = "record-web"
				g.OwnerReferences[0].UID = web.UID
				g.CreationTimestamp = metav1.NewTime(egressEpoch.Add(20 * time.Minute))
				g.Status.IP = tc.record
				existing = append(existing, g)
			}
			p := NewPlan(layout, []Target{web}, existing, nil, []v1alpha1.Vpc{tc.vpc}, now)
			st, ok := p.Status["shop/svc-web"]
			got := tc.record
			if ok {
				got = st.IP
			}
			if got != tc.want {
				t.Errorf("web's address %q, want %q (plan %+v)", got, tc.want, p)
			}
		})
	}
}

func cmpWants(f, def func(*v1alpha1.Vpc) bool) func(*v1alpha1.Vpc) bool {
	if f != nil {
		return f
	}
	return def
}

func reversed[T any](s []T) []T {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}
