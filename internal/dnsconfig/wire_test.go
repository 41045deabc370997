package dnsconfig_test

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/dnsconfig"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestWireOnRealConfigMaps patches the coredns ConfigMap of a real API server for Corefiles of
// different shapes: Wire forwards clusterset.local to the octopus-dns Service's ClusterIP
// and reports the reload plugin, Unwire restores the original byte for byte, an unparsable
// Corefile is refused and left alone, and a cluster without CoreDNS gets only the Service.
func TestWireOnRealConfigMaps(t *testing.T) {
	env := testenv.ControlPlanes(t, "member")
	c, err := client.New(env.Cluster("member").RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}

	// Forward leaves the Service to its installer: without one, it fails naming it.
	if _, err := dnsconfig.Forward(ctx, c); err == nil || !strings.Contains(err.Error(), dnsconfig.ServiceName) {
		t.Fatalf("Forward without the Service: %v, want an error naming %s", err, dnsconfig.ServiceName)
	}

	// No CoreDNS at all: the Service is made, nothing else.
	res, err := dnsconfig.Wire(ctx, c)
	if err != nil {
		t.Fatalf("Wire without CoreDNS: %v", err)
	}
	svc := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: dnsconfig.ServiceName}, svc); err != nil {
		t.Fatal(err)
	}
	if res.CoreDNS || res.Target != netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 53) {
		t.Errorf("Wire without CoreDNS = %+v; want CoreDNS=false and the Service's ClusterIP %s", res, svc.Spec.ClusterIP)
	}
	// With the Service there, Forward finds its address and does not write it.
	if fwd, err := dnsconfig.Forward(ctx, c); err != nil || fwd.Target != res.Target {
		t.Errorf("Forward = %+v, %v; want the target %s", fwd, err, res.Target)
	}
	after := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), after); err != nil || after.ResourceVersion != svc.ResourceVersion {
		t.Errorf("Forward wrote the Service (resourceVersion %s → %s, %v)", svc.ResourceVersion, after.ResourceVersion, err)
	}

	for _, tc := range []struct {
		name   string
		reload bool
	}{{"kubeadm", true}, {"stubdomains", false}, {"custom", true}} {
		t.Run(tc.name, func(t *testing.T) {
			original := readCorefile(t, tc.name)
			cm := putCoreDNS(t, c, original)
			res, err := dnsconfig.Wire(ctx, c)
			if err != nil {
				t.Fatalf("Wire: %v", err)
			}
			if !res.CoreDNS || res.Reload != tc.reload {
				t.Errorf("Wire = %+v, want CoreDNS and Reload=%v", res, tc.reload)
			}
			got := getCorefile(t, c)
			if !strings.HasPrefix(got, original) || !strings.Contains(got, "forward . "+res.Target.String()) {
				t.Errorf("patched Corefile:\n%s", got)
			}
			rv := getResourceVersion(t, c)
			if _, err := dnsconfig.Wire(ctx, c); err != nil {
				t.Fatalf("second Wire: %v", err)
			}
			if again := getResourceVersion(t, c); again != rv {
				t.Errorf("a second Wire rewrote the ConfigMap (resourceVersion %s → %s)", rv, again)
			}
			// The agent adds the other clusters' reverse zones to the block, and a later Wire
			// (join run again) keeps them; leave still restores the original below.
			zones := []string{"1.10.in-addr.arpa", "2.10.in-addr.arpa"}
			if changed, err := dnsconfig.ForwardReverse(ctx, c, zones); err != nil || !changed {
				t.Fatalf("ForwardReverse = %v, %v", changed, err)
			}
			if _, err := dnsconfig.Wire(ctx, c); err != nil {
				t.Fatalf("Wire after ForwardReverse: %v", err)
			}
			if got := dnsconfig.ReverseZones(getCorefile(t, c)); !slices.Equal(got, zones) {
				t.Errorf("reverse zones after ForwardReverse and Wire = %v, want %v", got, zones)
			}
			if changed, err := dnsconfig.ForwardReverse(ctx, c, zones); err != nil || changed {
				t.Errorf("ForwardReverse again = %v, %v; want no change", changed, err)
			}
			if removed, err := dnsconfig.Unwire(ctx, c); err != nil || !removed {
				t.Fatalf("Unwire = %v, %v", removed, err)
			}
			if got := getCorefile(t, c); got != original {
				t.Errorf("after Unwire the Corefile is\n%q\nwant the original\n%q", got, original)
			}
			if removed, err := dnsconfig.Unwire(ctx, c); err != nil || removed {
				t.Errorf("second Unwire = %v, %v; want nothing to remove", removed, err)
			}
			// After leave, the agent's reverse zones must not bring the block back.
			if changed, err := dnsconfig.ForwardReverse(ctx, c, zones); err != nil || changed || getCorefile(t, c) != original {
				t.Errorf("ForwardReverse after Unwire = %v, %v; want the original Corefile untouched", changed, err)
			}
			if err := c.Delete(ctx, cm); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("invalid", func(t *testing.T) {
		original := readCorefile(t, "invalid")
		putCoreDNS(t, c, original)
		if err := dnsconfig.Check(ctx, c); !errors.Is(err, dnsconfig.ErrUnparsable) || !strings.Contains(err.Error(), "kube-system/coredns") {
			t.Errorf("Check = %v, want ErrUnparsable naming the ConfigMap", err)
		}
		if _, err := dnsconfig.Wire(ctx, c); !errors.Is(err, dnsconfig.ErrUnparsable) {
			t.Errorf("Wire = %v, want ErrUnparsable", err)
		}
		if got := getCorefile(t, c); got != original {
			t.Errorf("a refused Corefile was changed:\n%s", got)
		}
	})
}

func readCorefile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var coreDNSKey = client.ObjectKey{Namespace: "kube-system", Name: "coredns"}

func putCoreDNS(t *testing.T, c client.Client, corefile string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: coreDNSKey.Namespace, Name: coreDNSKey.Name},
		Data:       map[string]string{"Corefile": corefile},
	}
	if err := c.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

func getConfigMap(t *testing.T, c client.Client) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := c.Get(t.Context(), coreDNSKey, cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

func getCorefile(t *testing.T, c client.Client) string { return getConfigMap(t, c).Data["Corefile"] }

func getResourceVersion(t *testing.T, c client.Client) string {
	return getConfigMap(t, c).ResourceVersion
}
