package kube

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// AddPingProbes gives a manager that serves health probes (bindAddress neither "" nor "0")
// liveness and readiness checks that only say the process serves: a hub or an OVN database
// being down must not make Kubernetes restart the component, which reports such states in
// its conditions instead.
func AddPingProbes(mgr manager.Manager, bindAddress string) error {
	if bindAddress == "" || bindAddress == "0" {
		return nil
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	return nil
}

// MetricsBindAddress is addr for controller-runtime's metrics server with "" meaning off, as
// it does for the health probes: controller-runtime takes "" for ":8080", where two
// components' tests running at once (or two processes on a node) collide.
func MetricsBindAddress(addr string) string {
	if addr == "" {
		return "0"
	}
	return addr
}
