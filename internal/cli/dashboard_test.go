package cli

import (
	"strings"
	"testing"
	"time"
)

func TestDashboardValidate(t *testing.T) {
	valid := func() dashboardOptions {
		return dashboardOptions{kubeconfigs: []string{"a"}, listen: "127.0.0.1:8080", refresh: time.Second}
	}
	tests := []struct {
		name    string
		modify  func(*dashboardOptions)
		wantErr string
	}{
		{"valid", func(*dashboardOptions) {}, ""},
		{"hub only", func(o *dashboardOptions) { o.kubeconfigs, o.hubKubeconfig = nil, "hub" }, ""},
		{"nothing", func(o *dashboardOptions) { o.kubeconfigs = nil }, "nothing to show"},
		{"twice", func(o *dashboardOptions) { o.kubeconfigs = []string{"a", "a"} }, "--kubeconfig a is given twice"},
		{"all interfaces", func(o *dashboardOptions) { o.listen = "0.0.0.0:8080" }, "pass --allow-remote"},
		{"all interfaces, allowed", func(o *dashboardOptions) { o.listen, o.allowRemote = "0.0.0.0:8080", true }, ""},
		{"no port", func(o *dashboardOptions) { o.listen = "127.0.0.1" }, "want HOST:PORT"},
		{"zero refresh", func(o *dashboardOptions) { o.refresh = 0 }, "--refresh 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := valid()
			tt.modify(&o)
			err := o.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
