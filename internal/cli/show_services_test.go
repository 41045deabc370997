package cli

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// TestRenderServicesGlobalIPs: an export of a globalnet cluster shows its global addresses, a
// headless one per pod, one without an address the reason; a direct export shows none.
func TestRenderServicesGlobalIPs(t *testing.T) {
	rows := []serviceStatus{
		{Namespace: "shop", Name: "web", Clusters: []string{}, Export: &localExport{State: "Exported",
			GlobalIPs: []globalIP{{Kind: "Service", Name: "web", IP: "242.2.0.16"}}}},
		{Namespace: "shop", Name: "db", Clusters: []string{}, Export: &localExport{State: "Exported",
			GlobalIPs: []globalIP{{Kind: "Pod", Name: "db-0", IP: "242.2.0.20"}, {Kind: "Pod", Name: "db-1", Reason: "PoolExhausted"}}}},
		{Namespace: "shop", Name: "direct", Clusters: []string{}, Export: &localExport{State: "Exported"}},
	}
	var b strings.Builder
	if err := renderServices(&b, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	for i, want := range []string{"GLOBAL IPS", "242.2.0.16", "db-0=242.2.0.20,db-1=PoolExhausted", "-"} {
		if !strings.HasSuffix(strings.TrimSpace(lines[i]), want) {
			t.Errorf("line %d %q does not end in %q", i, lines[i], want)
		}
	}
}

// TestShowServicesSecondary: an import of a cluster on the secondary network says so (its
// endpoints are net1 addresses and a ClusterSetIP import has no virtual IP); others do not.
func TestShowServicesSecondary(t *testing.T) {
	imp := func(name string, secondary bool) *mcsv1beta1.ServiceImport {
		si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP}}
		if secondary {
			si.Annotations = map[string]string{v1alpha1.AddressingAnnotation: string(v1alpha1.AddressingSecondary)}
		}
		return si
	}
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(imp("net", true), imp("vip", false)).Build()
	rows, err := collectServices(t.Context(), c, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || !rows[0].Secondary || rows[1].Secondary {
		t.Fatalf("rows = %+v, want shop/net secondary and shop/vip not", rows)
	}
	var b strings.Builder
	if err := renderServices(&b, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if !strings.Contains(lines[1], "ClusterSetIP/net1") || strings.Contains(lines[2], "net1") {
		t.Errorf("rendered:\n%s", b.String())
	}
}
