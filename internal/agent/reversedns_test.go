package agent

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/dnsconfig"
	"github.com/octopus-mcs/octopus/internal/kube"
)

func cluster(id string, addressing v1alpha1.Addressing, pod, global, secondary string) *v1alpha1.Cluster {
	return &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: "octopus-hub"},
		Spec: v1alpha1.ClusterSpec{
			ClusterID: id, PodCIDRs: []string{pod}, ServiceCIDRs: []string{"10.96.0.0/16"},
			Addressing: addressing, GlobalCIDR: global, SecondaryCIDR: secondary,
		},
	}
}

func TestReverseZones(t *testing.T) {
	for _, tc := range []struct {
		name     string
		clusters []*v1alpha1.Cluster
		want     []string
	}{{
		name:     "direct: the other clusters' pod CIDRs, not our own",
		clusters: []*v1alpha1.Cluster{cluster("east", "", "10.1.0.0/16", "", ""), cluster("west", "", "10.2.0.0/16", "", ""), cluster("north", v1alpha1.AddressingDirect, "10.3.0.0/16", "", "")},
		want:     []string{"2.10.in-addr.arpa", "3.10.in-addr.arpa"},
	}, {
		name:     "globalnet and secondary: the ranges their endpoints are imported with",
		clusters: []*v1alpha1.Cluster{cluster("east", "", "10.1.0.0/16", "", ""), cluster("west", v1alpha1.AddressingGlobalnet, "10.1.0.0/16", "242.2.0.0/16", ""), cluster("north", v1alpha1.AddressingSecondary, "10.1.0.0/16", "", "10.113.0.0/16")},
		want:     []string{"113.10.in-addr.arpa", "2.242.in-addr.arpa"},
	}, {
		name:     "a remote range overlapping our own stays with our DNS",
		clusters: []*v1alpha1.Cluster{cluster("east", "", "10.1.0.0/16", "", ""), cluster("west", "", "10.1.0.0/16", "", ""), cluster("north", "", "10.96.0.0/20", "", "")},
		want:     nil,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var cls []v1alpha1.Cluster
			for _, c := range tc.clusters {
				cls = append(cls, *c)
			}
			if got := reverseZones("east", cls); !slices.Equal(got, tc.want) {
				t.Errorf("reverseZones = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSyncReverseZones checks that the zones forwarded to octopus-dns follow the clusters on
// the hub as they join and leave, and that nothing is added to a Corefile without Octopus's
// block (after leave).
func TestSyncReverseZones(t *testing.T) {
	ctx := t.Context()
	corefile := ".:53 {\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n"
	patched, err := dnsconfig.Patch(corefile, []netip.AddrPort{netip.MustParseAddrPort("10.96.0.20:53")})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns"}, Data: map[string]string{"Corefile": patched}}
	member := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(cm).Build()
	hub := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(
		cluster("east", "", "10.1.0.0/16", "", ""), cluster("west", "", "10.2.0.0/16", "", "")).Build()
	forwarded := func() []string {
		t.Helper()
		got := &corev1.ConfigMap{}
		if err := member.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
			t.Fatal(err)
		}
		return dnsconfig.ReverseZones(got.Data["Corefile"])
	}
	step := func(what string, wantChanged bool, want ...string) {
		t.Helper()
		_, changed, err := syncReverseZones(ctx, hub, member, "octopus-hub", "east")
		if err != nil || changed != wantChanged {
			t.Fatalf("%s: syncReverseZones changed %v, %v; want changed %v", what, changed, err, wantChanged)
		}
		if got := forwarded(); !slices.Equal(got, want) {
			t.Fatalf("%s: forwarded reverse zones %v, want %v", what, got, want)
		}
	}
	step("west joined", true, "2.10.in-addr.arpa")
	step("nothing new", false, "2.10.in-addr.arpa")
	if err := hub.Create(ctx, cluster("north", "", "10.3.0.0/16", "", "")); err != nil {
		t.Fatal(err)
	}
	step("north joined", true, "2.10.in-addr.arpa", "3.10.in-addr.arpa")
	if err := hub.Delete(ctx, cluster("west", "", "", "", "")); err != nil {
		t.Fatal(err)
	}
	step("west left", true, "3.10.in-addr.arpa")

	// leave removed the block: the agent, still running, must not bring it back.
	if err := member.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["Corefile"], _ = dnsconfig.Unpatch(cm.Data["Corefile"])
	if err := member.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	step("after leave", false)
	if got := &(corev1.ConfigMap{}); member.Get(ctx, client.ObjectKeyFromObject(cm), got) != nil || got.Data["Corefile"] != corefile || strings.Contains(got.Data["Corefile"], "octopus") {
		t.Errorf("the Corefile after leave is not the user's byte for byte:\n%s", got.Data["Corefile"])
	}
}
