package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatewayHealthMaxLoss checks the range --health-max-loss accepts, the same as the Fabric's
// joinConfig.healthCheck.maxPacketLoss, so a value the API refuses cannot reach a gateway from
// the command line or the chart either.
func TestGatewayHealthMaxLoss(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "member.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		maxLoss int
		wantErr bool
	}{{0, true}, {1, false}, {3, false}, {60, false}, {61, true}} {
		o := gatewayOptions{kubeconfig: kubeconfig, nodeName: "gw", metricsAddr: "0", healthMaxLoss: tc.maxLoss}
		_, err := o.complete()
		if gotErr := err != nil && strings.Contains(err.Error(), "--health-max-loss"); gotErr != tc.wantErr || (err != nil && !gotErr) {
			t.Errorf("--health-max-loss %d: error %v, want error %v", tc.maxLoss, err, tc.wantErr)
		}
	}
}
