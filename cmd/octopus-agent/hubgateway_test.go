package main

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
)

// TestHubGatewayPodArgs: the arguments the hub chart's gateway pod runs with (render.HubGateway,
// $(HOST_IP) expanded as the kubelet would) are flags of `octopus-agent gateway` that make it the
// hub's gateway with both addresses given, so that it never reads a Node, which its
// ServiceAccount may not (config/rbac/denied_test.go).
func TestHubGatewayPodArgs(t *testing.T) {
	objs, err := render.HubGateway(render.HubGatewayOptions{Namespace: "hub-ns", Image: "octopus:test", Backend: v1alpha1.BackendVXLAN,
		ListenPort: 4600, MetricsPort: 9473, HealthCheckIP: "10.100.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	var container []string
	for _, obj := range objs {
		if ds, ok := obj.(*appsv1.DaemonSet); ok {
			c := ds.Spec.Template.Spec.Containers[0]
			container = slices.Concat(c.Command, c.Args)
		}
	}
	if len(container) < 2 || container[0] != "octopus-agent" || container[1] != "gateway" {
		t.Fatalf("the pod runs %q, want octopus-agent gateway", container)
	}
	var args []string
	for _, a := range container[2:] {
		args = append(args, strings.ReplaceAll(a, "$(HOST_IP)", "192.0.2.50"))
	}
	cmd := newGatewayCommand()
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("the pod's arguments are not the gateway's flags: %v", err)
	}
	for flag, want := range map[string]string{
		"hub": "true", "hub-namespace": "hub-ns", "backend": "vxlan", "listen-port": "4600",
		"endpoint-ip": "192.0.2.50", "health-check-ip": "10.100.0.1",
	} {
		if got := cmd.Flags().Lookup(flag).Value.String(); got != want {
			t.Errorf("--%s %q, want %q", flag, got, want)
		}
	}
}
