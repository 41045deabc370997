package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMemberConfigRaisesRateLimits: the ovnmaster's and the NRI plugin's client is not left at
// client-go's 5 QPS, which delays every address of a burst of pods; a kubeconfig that does not
// load fails with a message that says how to give one.
func TestMemberConfigRaisesRateLimits(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://192.0.2.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := memberConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if c.QPS != kubeAPIQPS || c.Burst != kubeAPIBurst {
		t.Errorf("QPS %v, burst %d; want %v, %d", c.QPS, c.Burst, kubeAPIQPS, kubeAPIBurst)
	}
	if _, err := memberConfig(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("a missing kubeconfig: %v; want an error naming --kubeconfig", err)
	}
}
