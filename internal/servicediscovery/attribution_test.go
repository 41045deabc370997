package servicediscovery

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// TestImportIgnoresForgedSourceCluster: a record or slice whose source-cluster label names
// another cluster than its writer (the ownership label) is not imported, so that a member
// cannot inject endpoints under another cluster's name; honest ones are.
func TestImportIgnoresForgedSourceCluster(t *testing.T) {
	const hubNS = "octopus-hub"
	key := types.NamespacedName{Namespace: "web", Name: "api"}
	labels := func(writer, source string) map[string]string {
		l := hubLabels(key, source)
		l[v1alpha1.ClusterLabel] = writer
		return l
	}
	record := func(name, writer, source string) *mcsv1beta1.ServiceImport {
		return &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: name, Labels: labels(writer, source)}}
	}
	slice := func(name, writer, source string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: name, Labels: labels(writer, source)}, AddressType: discoveryv1.AddressTypeIPv4}
	}
	hub := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(
		record("honest", "west", "west"), record("forged", "east", "west"),
		slice("honest", "west", "west"), slice("forged", "east", "west"), slice("unowned", "", "west"),
	).WithIndex(&mcsv1beta1.ServiceImport{}, hubServiceIndex, exportedServiceKey).
		WithIndex(&discoveryv1.EndpointSlice{}, hubServiceIndex, exportedServiceKey).Build()
	r := &ImportReconciler{Hub: hub, HubNamespace: hubNS}
	recs, sls, err := r.fromHub(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	names := func(objs []client.Object) []string {
		var out []string
		for _, o := range objs {
			out = append(out, o.GetName())
		}
		return out
	}
	var got []client.Object
	for i := range recs {
		got = append(got, &recs[i])
	}
	if n := names(got); len(n) != 1 || n[0] != "honest" {
		t.Errorf("records imported %v, want only the honest one", n)
	}
	got = nil
	for i := range sls {
		got = append(got, &sls[i])
	}
	if n := names(got); len(n) != 1 || n[0] != "honest" {
		t.Errorf("slices imported %v, want only the honest one", n)
	}
}
