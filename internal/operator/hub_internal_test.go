package operator

import (
	"strings"
	"testing"
)

func TestHubNamespaceGranted(t *testing.T) {
	tests := []struct {
		granted, ns string
		want        []string // in the refusal; none if allowed
	}{
		{"", "anything", nil},
		{"octopus-hub", "octopus-hub", nil},
		{NoHubNamespace, "octopus-hub", []string{"grants it no hub namespace", "--set hub.enabled=true,hub.namespace=octopus-hub"}},
		{"octopus-hub", "fleet", []string{`hubConfig.namespace "fleet"`, `rights in namespace "octopus-hub" only`, "--set hub.namespace=fleet"}},
	}
	for _, tt := range tests {
		got := (&Reconciler{HubNamespace: tt.granted}).hubNamespaceGranted(tt.ns)
		if (got == "") != (tt.want == nil) {
			t.Errorf("granted %q, hubConfig.namespace %q: %q, want allowed %v", tt.granted, tt.ns, got, tt.want == nil)
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("granted %q, hubConfig.namespace %q: %q, want it to contain %q", tt.granted, tt.ns, got, w)
			}
		}
	}
}
