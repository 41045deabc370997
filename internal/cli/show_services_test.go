package cli

import (
	"strings"
	"testing"
)

// TestRenderServicesGlobalIPs: an export of a globalnet cluster shows its global addresses, a
// headless one per pod, one without an address the reason; a direct export shows none.
func TestRenderServicesGlobalIPs(t *testing.T) {
	rows := []serviceStatus{
		{Namespace: "shop", Name: "web", Clusters: []string{}, Export: &localExport{State: "Exported",
			GlobalIPs: []globalIP{{Kind: "Service", Name: "web", IP: "242.2.0.16"}}}},
		{Namespace: "shop", Name: "db", Clusters: []string{}, Export: &localExport{State: "Exported",
			GlobalIPs: []globalIP{{Kind: "Pod", Name: "db-0", IP: "242.2.0.20"}, {Kind: "Pod", Name: "db-1", Reason: "PoolExhausted"}}}},
		{Namespace: "shop", Name: "direct", Clusters: []string{}, Export: &localExport{State: "Exported"}},
	}
	var b strings.Builder
	if err := renderServices(&b, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	for i, want := range []string{"GLOBAL IPS", "242.2.0.16", "db-0=242.2.0.20,db-1=PoolExhausted", "-"} {
		if !strings.HasSuffix(strings.TrimSpace(lines[i]), want) {
			t.Errorf("line %d %q does not end in %q", i, lines[i], want)
		}
	}
}
