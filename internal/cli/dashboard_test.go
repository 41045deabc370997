package cli

import (
	"testing"
	"time"
)

func TestDashboardValidate(t *testing.T) {
	valid := func() dashboardOptions {
		return dashboardOptions{kubeconfigs: []string{"a"}, listen: "127.0.0.1:8080", refresh: time.Second}
	}
	testValidate(t, valid, []validateCase[dashboardOptions]{
		{"valid", func(*dashboardOptions) {}, ""},
		{"hub only", func(o *dashboardOptions) { o.kubeconfigs, o.hubKubeconfig = nil, "hub" }, ""},
		{"nothing", func(o *dashboardOptions) { o.kubeconfigs = nil }, "nothing to show"},
		{"twice", func(o *dashboardOptions) { o.kubeconfigs = []string{"a", "a"} }, "--kubeconfig a is given twice"},
		{"all interfaces", func(o *dashboardOptions) { o.listen = "0.0.0.0:8080" }, "pass --allow-remote"},
		{"all interfaces, allowed", func(o *dashboardOptions) { o.listen, o.allowRemote = "0.0.0.0:8080", true }, ""},
		{"no port", func(o *dashboardOptions) { o.listen = "127.0.0.1" }, "want HOST:PORT"},
		{"zero refresh", func(o *dashboardOptions) { o.refresh = 0 }, "--refresh 0s"},
	})
}
