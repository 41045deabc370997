package render

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

func TestHubGatewayGolden(t *testing.T) {
	objs, err := HubGateway(HubGatewayOptions{
		Image: "ghcr.io/octopus-mcs/octopus:v0.0.0-test", PullPolicy: corev1.PullIfNotPresent, Backend: v1alpha1.BackendWireGuard,
		ListenPort: 4500, MetricsPort: 9473, HealthCheckIP: "10.100.0.1",
		NodeSelector: map[string]string{"node-restriction.kubernetes.io/octopus-gateway": "true"},
		Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Config:       map[string]string{"OCTOPUS_LEASE_DURATION": "6s"},
	})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "hub-gateway.yaml", objs)
}

// TestHubGatewayRequires: the members need each of these to reach the hub's gateway, and none
// has a default that works in every hub cluster.
func TestHubGatewayRequires(t *testing.T) {
	full := HubGatewayOptions{Image: "i", Backend: v1alpha1.BackendVXLAN, ListenPort: 1, MetricsPort: 2, HealthCheckIP: "10.0.0.1"}
	for name, unset := range map[string]func(*HubGatewayOptions){
		"image":           func(o *HubGatewayOptions) { o.Image = "" },
		"backend":         func(o *HubGatewayOptions) { o.Backend = "" },
		"listen port":     func(o *HubGatewayOptions) { o.ListenPort = 0 },
		"metrics port":    func(o *HubGatewayOptions) { o.MetricsPort = 0 },
		"health-check IP": func(o *HubGatewayOptions) { o.HealthCheckIP = "" },
	} {
		t.Run(name, func(t *testing.T) {
			o := full
			unset(&o)
			if _, err := HubGateway(o); err == nil {
				t.Errorf("HubGateway without the %s: no error", name)
			}
		})
	}
	if _, err := HubGateway(full); err != nil {
		t.Errorf("HubGateway with every required option: %v", err)
	}
}
