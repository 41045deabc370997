package servicediscovery_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestDualStackImport exports from a dual-stack cluster into a dual-stack and an IPv4-only one,
// on real API servers: the dual-stack importer's derived Service gets a ClusterIP of each family
// and its ServiceImport offers both (spec.ips, ipFamilies), with the endpoints of both
// families; the IPv4-only importer gets an IPv4 virtual IP and no error. A service whose
// exporter publishes IPv4 endpoints only is offered over IPv4 alone even where the derived
// Service has an IPv6 ClusterIP, so that DNS never answers AAAA with an address that balances
// over nothing; once IPv6 endpoints come, the IPv6 address is offered too.
func TestDualStackImport(t *testing.T) {
	// hub and east dual-stack, west dual-stack, north IPv4 only.
	names := []string{"hub", "east", "west", "north"}
	dual := map[string]bool{"hub": true, "east": true, "west": true}
	opts := testenv.Options(t)
	clusters := make([]controlplane.ClusterOptions, len(names))
	for i, n := range names {
		svc, pod := testenv.CIDRs(i)
		clusters[i] = controlplane.ClusterOptions{Name: n, ServiceCIDR: svc, PodCIDR: pod}
		if dual[n] {
			clusters[i].SecondaryServiceCIDR = testenv.ServiceCIDR6(i)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	env, err := controlplane.Start(ctx, opts, clusters...)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping control planes: %v", err)
		}
	})
	eastPod6 := netip.MustParsePrefix("2001:db8:101::/56")
	f := newFabricOn(t, env, agent.ControllerOptions{}, nil,
		map[string][]string{"east": {env.Cluster("east").PodCIDR.String(), eastPod6.String()}}, "east", "west", "north")

	east := f.members["east"]
	web := types.NamespacedName{Namespace: "shop", Name: "web"}
	api := types.NamespacedName{Namespace: "shop", Name: "api"}
	for _, m := range []string{"east", "west", "north"} {
		create(t, f.members[m], namespace("shop"))
	}
	port := corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}
	for _, key := range []types.NamespacedName{web, api} {
		svc := clusterIPService(key.Namespace, key.Name, port)
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
		create(t, east, svc, export(key.Namespace, key.Name))
	}
	web4 := f.serve(t, "east", web)
	web6 := serve6(t, f, "east", web, eastPod6)
	api4 := f.serve(t, "east", api)

	both := []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	v4 := []corev1.IPFamily{corev1.IPv4Protocol}
	waitOffered(t, f, "west", web, both, 2, []string{web4, web6})
	waitOffered(t, f, "north", web, v4, 1, []string{web4, web6})
	waitOffered(t, f, "west", api, v4, 2, []string{api4})

	// IPv6 endpoints for api: its IPv6 ClusterIP is offered from then on.
	api6 := serve6(t, f, "east", api, eastPod6)
	waitOffered(t, f, "west", api, both, 2, []string{api4, api6})
}

// waitOffered waits until member's import of key offers exactly the derived Service's
// ClusterIPs of families (in the Service's order) while the derived Service has clusterIPs
// addresses, and holds the endpoints endpoints.
func waitOffered(t *testing.T, f *fabric, member string, key types.NamespacedName, families []corev1.IPFamily, clusterIPs int, endpoints []string) {
	t.Helper()
	want := slices.Sorted(slices.Values(endpoints))
	eventually(t, fmt.Sprintf("the %v import of %s in %s", families, key, member), func(ctx context.Context) string {
		got, err := getImported(ctx, f.members[member], key)
		if err != nil {
			return err.Error()
		}
		if got.si == nil || len(got.derived) != 1 {
			return fmt.Sprintf("import %v, %d derived Services", got.si != nil, len(got.derived))
		}
		d := got.derived[0]
		if d.Spec.IPFamilyPolicy == nil || *d.Spec.IPFamilyPolicy != corev1.IPFamilyPolicyPreferDualStack || len(d.Spec.ClusterIPs) != clusterIPs {
			return fmt.Sprintf("derived Service policy %v clusterIPs %v, want PreferDualStack with %d", ptr.Deref(d.Spec.IPFamilyPolicy, ""), d.Spec.ClusterIPs, clusterIPs)
		}
		var wantIPs []string
		for i, ip := range d.Spec.ClusterIPs {
			if slices.Contains(families, d.Spec.IPFamilies[i]) {
				wantIPs = append(wantIPs, ip)
			}
		}
		if !slices.Equal(got.si.Spec.IPs, wantIPs) || !slices.Equal(got.si.Spec.IPFamilies, families) {
			return fmt.Sprintf("ServiceImport ips %v ipFamilies %v, want %v %v (derived %v %v)", got.si.Spec.IPs, got.si.Spec.IPFamilies, wantIPs, families, d.Spec.ClusterIPs, d.Spec.IPFamilies)
		}
		var addrs []string
		for _, s := range got.slices {
			for _, ep := range s.Endpoints {
				addrs = append(addrs, ep.Addresses...)
			}
		}
		sort.Strings(addrs)
		if !slices.Equal(addrs, want) {
			return fmt.Sprintf("endpoints %v, want %v", addrs, want)
		}
		return ""
	})
}

// serve6 is serve's IPv6 twin: one ready endpoint of key in member, an address of pod6 picked
// by the service's name, in an IPv6 slice.
func serve6(t *testing.T, f *fabric, member string, key types.NamespacedName, pod6 netip.Prefix) string {
	t.Helper()
	svc := &corev1.Service{}
	if err := f.members[member].Get(t.Context(), key, svc); err != nil {
		t.Fatal(err)
	}
	b := pod6.Addr().As16()
	b[14], b[15] = byte(len(key.Name)), 2
	addr := netip.AddrFrom16(b).String()
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name + "-pods6", Labels: map[string]string{
			discoveryv1.LabelServiceName: key.Name, discoveryv1.LabelManagedBy: "test.octopus.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv6,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	for _, p := range svc.Spec.Ports {
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(protocolOr(p.Protocol)), Port: ptr.To(p.Port)})
	}
	create(t, f.members[member], slice)
	return addr
}
