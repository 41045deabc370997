package cluster

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/ipam"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestOverlapPerFamily checks the direct-addressing overlap rule on dual-stack and IPv6-only
// registrations: a collision in either family refuses the join, naming that family's CIDRs,
// and ranges of different families never collide.
func TestOverlapPerFamily(t *testing.T) {
	registered := func(id string, addressing v1alpha1.Addressing, pods, services []string) v1alpha1.Cluster {
		return v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: id},
			Spec: v1alpha1.ClusterSpec{ClusterID: id, Addressing: addressing, PodCIDRs: pods, ServiceCIDRs: services}}
	}
	clusters := []v1alpha1.Cluster{
		registered("west", v1alpha1.AddressingDirect, []string{"10.1.0.0/16", "2001:db8:1::/56"}, []string{"10.96.0.0/16", "2001:db8:96::/112"}),
		registered("v6only", "", []string{"2001:db8:6::/56"}, []string{"2001:db8:97::/112"}),
		registered("nat", v1alpha1.AddressingGlobalnet, []string{"10.9.0.0/16", "2001:db8:9::/56"}, []string{"10.99.0.0/16"}),
	}
	ps := func(ss ...string) []netip.Prefix {
		out := make([]netip.Prefix, len(ss))
		for i, s := range ss {
			out[i] = netip.MustParsePrefix(s)
		}
		return out
	}
	for _, tt := range []struct {
		name           string
		pods, services []netip.Prefix
		wantErr        string // "" when the join may go ahead
	}{
		{"dual-stack apart in both families", ps("10.2.0.0/16", "2001:db8:2::/56"), ps("10.97.0.0/16", "2001:db8:98::/112"), ""},
		{"IPv4 apart, IPv6 pod CIDR inside west's", ps("10.2.0.0/16", "2001:db8:1:80::/57"), ps("10.97.0.0/16"),
			`pod CIDR 2001:db8:1:80::/57 overlaps pod CIDR 2001:db8:1::/56 of cluster "west"`},
		{"IPv6 service CIDR on an IPv6-only cluster's", ps("10.2.0.0/16"), ps("10.97.0.0/16", "2001:db8:97::/112"),
			`service CIDR 2001:db8:97::/112 overlaps service CIDR 2001:db8:97::/112 of cluster "v6only"`},
		{"IPv6 pod CIDR around west's IPv6 service CIDR", ps("2001:db8::/40"), ps("2001:db8:100::/112"),
			`pod CIDR 2001:db8::/40 overlaps pod CIDR 2001:db8:1::/56 of cluster "west"`},
		{"IPv4 collision still found beside a distinct IPv6", ps("10.1.128.0/17", "2001:db8:2::/56"), ps("10.97.0.0/16"),
			`pod CIDR 10.1.128.0/17 overlaps pod CIDR 10.1.0.0/16 of cluster "west"`},
		{"IPv4-only newcomer beside IPv6 ranges", ps("10.2.0.0/16"), ps("10.97.0.0/16"), ""},
		{"globalnet cluster's IPv6 may be overlapped", ps("2001:db8:9::/56"), ps("10.97.0.0/16"), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := overlapWith(clusters, "east", tt.pods, tt.services)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v\nwant it to contain %q", err, tt.wantErr)
			}
		})
	}
}

// TestDiscoverBothFamilies runs discovery on a dual-stack API server: the service ranges come
// from its ServiceCIDR object, which holds both families, and the pod ranges from a
// kube-controller-manager's dual-stack --cluster-cidr, so that join registers both without
// flags.
func TestDiscoverBothFamilies(t *testing.T) {
	env := testenv.DualStackControlPlanes(t, "east")
	cp := env.Cluster("east")
	c := newClient(t, cp.RESTConfig())

	services, err := DiscoverServiceCIDRs(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{cp.ServiceCIDR.String(), cp.SecondaryServiceCIDR.String()}; !slices.Equal(services, want) {
		t.Errorf("service CIDRs = %v, want %v", services, want)
	}

	wantPods := []string{"10.100.0.0/16", "2001:db8:100::/56"}
	kcm := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kube-controller-manager-east"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-controller-manager", Image: "registry.k8s.io/kube-controller-manager",
			Command: []string{"kube-controller-manager", "--allocate-node-cidrs=true", "--cluster-cidr=" + strings.Join(wantPods, ",")}}}},
	}
	// The pod is only an object to read (nothing schedules it), but admission wants its
	// ServiceAccount, which kube-controller-manager may not have made yet.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "default"}}
	if err := c.Create(t.Context(), sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := c.Create(t.Context(), kcm); err != nil {
		t.Fatal(err)
	}
	pods, err := DiscoverPodCIDRs(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pods, wantPods) {
		t.Errorf("pod CIDRs = %v, want %v", pods, wantPods)
	}
}

// TestClaimBlockIPv6 claims blocks of an IPv6 pool on a real API server: the claim is a
// ConfigMap whose name is derived from the block (colons are not allowed in names), two
// clusters get distinct blocks, a re-run keeps its block, and a block of an IPv4 pool with the
// same name shape does not collide with it.
func TestClaimBlockIPv6(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub")
	c := newClient(t, env.Cluster("hub").RESTConfig())
	ns := metav1.NamespaceDefault
	pool6, err := ipam.ParsePool("2001:db8:100::/40", 56)
	if err != nil {
		t.Fatal(err)
	}
	pool4, err := ipam.ParsePool("242.0.0.0/8", 16)
	if err != nil {
		t.Fatal(err)
	}
	east, err := claimBlock(t.Context(), c, ns, "east", PoolGlobalnet+"-v6", pool6)
	if err != nil {
		t.Fatal(err)
	}
	west, err := claimBlock(t.Context(), c, ns, "west", PoolGlobalnet+"-v6", pool6)
	if err != nil {
		t.Fatal(err)
	}
	if east.Overlaps(west) || east.Bits() != 56 || !pool6.CIDR.Contains(east.Addr()) || !pool6.CIDR.Contains(west.Addr()) {
		t.Fatalf("blocks %s and %s: want two distinct /56 of %s", east, west, pool6.CIDR)
	}
	again, err := claimBlock(t.Context(), c, ns, "east", PoolGlobalnet+"-v6", pool6)
	if err != nil || again != east {
		t.Fatalf("re-claim for east = %s, %v; want its block %s", again, err, east)
	}
	v4, err := claimBlock(t.Context(), c, ns, "east", PoolGlobalnet, pool4)
	if err != nil || !v4.Addr().Is4() {
		t.Fatalf("IPv4 claim beside the IPv6 one = %s, %v", v4, err)
	}
	cms := &corev1.ConfigMapList{}
	if err := c.List(t.Context(), cms, client.InNamespace(ns), client.HasLabels{claimPoolLabel}); err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) != 3 {
		t.Fatalf("%d claims, want 3", len(cms.Items))
	}
}
