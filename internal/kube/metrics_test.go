package kube

import "testing"

// TestMetricsBindAddress: "" is off ("0"), not controller-runtime's ":8080", where the
// ovnmaster's and the icmaster's tests once collided; anything else is kept.
func TestMetricsBindAddress(t *testing.T) {
	for in, want := range map[string]string{"": "0", "0": "0", ":9476": ":9476", "127.0.0.1:0": "127.0.0.1:0"} {
		if got := MetricsBindAddress(in); got != want {
			t.Errorf("MetricsBindAddress(%q) = %q, want %q", in, got, want)
		}
	}
}
