package servicediscovery

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// Publication is what stands in for clusters the scale benchmark does not run, so it must be
// the export controller's own output: labelled for the import side and the hub's policy,
// addressed by the policy's rules, and refused for what cannot be exported.
func TestPublication(t *testing.T) {
	export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"}}
	meta := metav1.ObjectMeta{Namespace: "shop", Name: "cart"}
	ready := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: "cart-x", Labels: map[string]string{discoveryv1.LabelServiceName: "cart"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.7"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	for _, tc := range []struct {
		name      string
		spec      corev1.ServiceSpec
		wantType  mcsv1beta1.ServiceImportType
		wantAddrs []string
		wantErr   string
	}{
		{"ClusterIP: the ready pods, not the ClusterIP", corev1.ServiceSpec{ClusterIP: "10.96.0.9", Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
			mcsv1beta1.ClusterSetIP, []string{"10.1.0.7"}, ""},
		{"headless: the ready pods", corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone},
			mcsv1beta1.Headless, []string{"10.1.0.7"}, ""},
		{"ExternalName: refused", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example"},
			"", nil, "type ExternalName cannot be exported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, slices, err := Publication("octopus-hub", "east", export, &corev1.Service{ObjectMeta: meta, Spec: tc.spec}, []discoveryv1.EndpointSlice{ready})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rec.Namespace != "octopus-hub" || rec.Spec.Type != tc.wantType || rec.Labels[v1alpha1.ClusterLabel] != "east" ||
				rec.Labels[mcsv1beta1.LabelServiceName] != "cart" || rec.Labels[v1alpha1.ServiceNamespaceLabel] != "shop" {
				t.Errorf("record %s in %s: type %s, labels %v", rec.Name, rec.Namespace, rec.Spec.Type, rec.Labels)
			}
			if len(slices) != 1 {
				t.Fatalf("%d slices, want 1", len(slices))
			}
			s := slices[0]
			if s.Labels[mcsv1beta1.LabelSourceCluster] != "east" || s.Labels[discoveryv1.LabelManagedBy] != endpointSliceManager || !strings.HasPrefix(s.Name, rec.Name) {
				t.Errorf("slice %s: labels %v", s.Name, s.Labels)
			}
			var addrs []string
			for _, ep := range s.Endpoints {
				addrs = append(addrs, ep.Addresses...)
			}
			if strings.Join(addrs, ",") != strings.Join(tc.wantAddrs, ",") {
				t.Errorf("addresses %v, want %v", addrs, tc.wantAddrs)
			}
		})
	}
}
