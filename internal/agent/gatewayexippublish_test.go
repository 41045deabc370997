package agent

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func addressedVpc(name, ip string) v1alpha1.Vpc {
	v := v1alpha1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.VpcSpec{Subnets: []v1alpha1.VpcSubnet{{Name: "a", CIDR: "10.0.1.0/24"}}}}
	if ip != "" {
		v.Status.Gateway = &v1alpha1.VpcGatewayStatus{ExternalIP: ip}
	}
	return v
}

// TestPublishedGatewayExIPs: one GatewayExIp per live Vpc with an external address, named
// <cluster>.<vpc>, labelled with the cluster and the gateway, carrying the address and the
// cluster's global CIDR; none for a Vpc without an address, with one outside the global CIDR or
// being deleted, none at all without a global CIDR.
func TestPublishedGatewayExIPs(t *testing.T) {
	deleting := addressedVpc("grey", "242.1.0.11")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	vpcs := []v1alpha1.Vpc{addressedVpc("red", "242.1.0.9"), addressedVpc("blue", ""), addressedVpc("green", "not-an-ip"), addressedVpc("brown", "10.1.0.9"), deleting}
	for _, tc := range []struct {
		name, global string
		want         []string
	}{
		{"with a global CIDR", "242.1.0.0/16", []string{"octopus-hub/a.red=a,red,242.1.0.9,242.1.0.0/16"}},
		{"without one", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := publishedGatewayExIPs("octopus-hub", "a", tc.global, vpcs)
			var lines []string
			for _, name := range slices.Sorted(maps.Keys(got)) {
				g := got[name]
				lines = append(lines, fmt.Sprintf("%s/%s=%s,%s,%s,%s", g.Namespace, g.Name, g.Labels[v1alpha1.ClusterLabel], g.Labels[gatewayExIPGatewayLabel], g.Spec.ExternalIP, g.Spec.GlobalnetCIDR))
			}
			if !slices.Equal(lines, tc.want) {
				t.Errorf("published %q, want %q", lines, tc.want)
			}
		})
	}
}

// TestGatewayExIPPublish runs cluster a's publisher and cluster b's syncer against a real hub
// and two real members: a Vpc of a given an external address appears on the hub as a.red
// (labelled a) and in b as red-a, within 10 s; a change of address follows to both; one deleted
// on the hub by hand is put back; a Vpc without an address publishes nothing; the address
// removed, or the Vpc deleted, takes the hub's object and b's copy.
func TestGatewayExIPPublish(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "a", "b")
	hubCfg, aCfg, bCfg := env.Cluster("hub").RESTConfig(), env.Cluster("a").RESTConfig(), env.Cluster("b").RESTConfig()
	testenv.InstallCRDs(t, hubCfg)
	testenv.InstallCRDs(t, aCfg)
	testenv.InstallCRDs(t, bCfg)
	hub, a, b := testenv.Client(t, hubCfg), testenv.Client(t, aCfg), testenv.Client(t, bCfg)
	ctx := t.Context()
	for c, ns := range map[client.Client]string{hub: "octopus-hub", a: v1alpha1.SystemNamespace, b: v1alpha1.SystemNamespace} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, cl := range []*v1alpha1.Cluster{cluster("a", "", "10.1.0.0/16", "242.1.0.0/16", ""), cluster("b", "", "10.2.0.0/16", "242.2.0.0/16", "")} {
		if err := hub.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	aMgr, _ := startAgentManager(t, aCfg)
	if err := SetupGatewayExIPPublish(aMgr, hubCfg, "octopus-hub", "a", "242.1.0.0/16"); err != nil {
		t.Fatal(err)
	}
	bMgr, bCopies := startAgentManager(t, bCfg)
	if err := SetupGatewayExIPSync(bMgr, bCopies, hubCfg, "octopus-hub", "b"); err != nil {
		t.Fatal(err)
	}

	// published waits for the hub's a.<vpc> and b's copy <vpc>-a to carry ip ("": both gone).
	published := func(vpc, ip string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("Vpc %s of a published with %q on the hub and in b", vpc, ip), func() error {
			for _, where := range []struct {
				c   client.Client
				key client.ObjectKey
			}{
				{hub, client.ObjectKey{Namespace: "octopus-hub", Name: v1alpha1.GatewayExIpHubName("a", vpc)}},
				{b, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayExIpName(vpc, "a")}},
			} {
				g := &v1alpha1.GatewayExIp{}
				err := where.c.Get(ctx, where.key, g)
				switch {
				case ip == "" && apierrors.IsNotFound(err):
					continue
				case ip == "":
					return fmt.Errorf("%s still there (%w)", where.key, err)
				case err != nil:
					return err
				case g.Spec.ExternalIP != ip || g.Spec.GlobalnetCIDR != "242.1.0.0/16" || g.Labels[v1alpha1.ClusterLabel] != "a" || g.Labels[gatewayExIPGatewayLabel] != vpc:
					return fmt.Errorf("%s: %+v, labels %v", where.key, g.Spec, g.Labels)
				}
			}
			return nil
		})
	}
	setAddress := func(vpc, ip string) {
		t.Helper()
		v := &v1alpha1.Vpc{}
		if err := a.Get(ctx, client.ObjectKey{Name: vpc}, v); err != nil {
			t.Fatal(err)
		}
		v.Status.Gateway = nil
		if ip != "" {
			v.Status.Gateway = &v1alpha1.VpcGatewayStatus{ExternalIP: ip}
		}
		if err := a.Status().Update(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"red", "blue"} {
		v := addressedVpc(name, "")
		if err := a.Create(ctx, &v); err != nil {
			t.Fatal(err)
		}
	}
	setAddress("red", "242.1.0.9")
	published("red", "242.1.0.9")
	setAddress("red", "242.1.0.10")
	published("red", "242.1.0.10")
	if err := hub.Delete(ctx, &v1alpha1.GatewayExIp{ObjectMeta: metav1.ObjectMeta{Namespace: "octopus-hub", Name: "a.red"}}); err != nil {
		t.Fatal(err)
	}
	published("red", "242.1.0.10")
	list := &v1alpha1.GatewayExIpList{}
	if err := hub.List(ctx, list, client.InNamespace("octopus-hub")); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range list.Items {
		names = append(names, g.Name)
	}
	if strings.Join(names, " ") != "a.red" {
		t.Errorf("the hub holds %v, want a.red alone (blue has no address)", names)
	}

	setAddress("red", "")
	published("red", "")
	setAddress("red", "242.1.0.9")
	published("red", "242.1.0.9")
	if err := a.Delete(ctx, &v1alpha1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "red"}}); err != nil {
		t.Fatal(err)
	}
	published("red", "")
}

// TestGatewayExIPPublishRefusesABadGlobalCIDR: a global CIDR that is none is an error at
// setup, naming it, not a publisher that silently publishes nothing.
func TestGatewayExIPPublishRefusesABadGlobalCIDR(t *testing.T) {
	err := SetupGatewayExIPPublish(nil, &rest.Config{Host: "https://hub.example"}, "octopus-hub", "a", "242.1.0.0")
	if err == nil || !strings.Contains(err.Error(), `"242.1.0.0"`) || !strings.Contains(err.Error(), "spec.globalCIDR") {
		t.Fatalf("SetupGatewayExIPPublish with a global CIDR that is none = %v, want an error naming it", err)
	}
}
