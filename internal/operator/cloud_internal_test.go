package operator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// TestEndpoint reports a gateway node's tunnel endpoint as the gateway picks it.
func TestEndpoint(t *testing.T) {
	internal := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "198.51.100.2"}
	external := corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "192.0.2.7"}
	for name, tc := range map[string]struct {
		annotations map[string]string
		addresses   []corev1.NodeAddress
		want        string
	}{
		"annotation wins":              {annotations: map[string]string{v1alpha1.EndpointIPAnnotation: "203.0.113.5"}, addresses: []corev1.NodeAddress{internal, external}, want: "203.0.113.5"},
		"external before internal":     {addresses: []corev1.NodeAddress{internal, external}, want: "192.0.2.7"},
		"internal alone":               {addresses: []corev1.NodeAddress{internal}, want: "198.51.100.2"},
		"no address, nothing reported": {want: ""},
	} {
		t.Run(name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}, Status: corev1.NodeStatus{Addresses: tc.addresses}}
			if got := endpoint(n); got != tc.want {
				t.Errorf("endpoint = %q, want %q", got, tc.want)
			}
		})
	}
}
