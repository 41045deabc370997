package testenv

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// InstallCRDs installs every CRD Octopus installs anywhere (crd.All: the hub's, the members'
// and the MCS API's) on the API server of cfg and waits until it serves their resources.
func InstallCRDs(t testing.TB, cfg *rest.Config) {
	t.Helper()
	crds, err := crd.All()
	if err != nil {
		t.Fatal(err)
	}
	c := Client(t, cfg)
	for _, obj := range crds {
		if err := kube.Apply(t.Context(), c, obj); err != nil {
			t.Fatal(err)
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := func() error {
		for _, obj := range crds {
			gv := schema.GroupVersion{Group: obj.Spec.Group, Version: obj.Spec.Versions[0].Name}.String()
			list, err := dc.ServerResourcesForGroupVersion(gv)
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == obj.Spec.Names.Plural }) {
				return fmt.Errorf("%s is not served yet", obj.Name)
			}
		}
		return nil
	}
	deadline := time.Now().Add(time.Minute)
	for err := served(); err != nil; err = served() {
		if time.Now().After(deadline) {
			t.Fatalf("installing the CRDs: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
