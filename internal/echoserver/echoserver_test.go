package echoserver

import "testing"

// TestIdentity: the HTTP answer names the cluster, falling back to the lab's variable, and the
// pod, so a request through a tunnel shows who answered it.
func TestIdentity(t *testing.T) {
	t.Setenv("CLUSTER_NAME", "")
	t.Setenv("OCTOPUS_LAB_CLUSTER", "east")
	t.Setenv("NODE_NAME", "east-worker")
	t.Setenv("POD_NAME", "echo-1")
	t.Setenv("POD_NAMESPACE", "demo")
	t.Setenv("POD_IP", "10.100.1.5")
	if got, want := Identity(), "cluster=east node=east-worker pod=echo-1 namespace=demo ip=10.100.1.5"; got != want {
		t.Errorf("Identity() = %q, want %q", got, want)
	}
	t.Setenv("CLUSTER_NAME", "west")
	if got, want := Identity(), "cluster=west node=east-worker pod=echo-1 namespace=demo ip=10.100.1.5"; got != want {
		t.Errorf("Identity() with CLUSTER_NAME = %q, want %q", got, want)
	}
}
