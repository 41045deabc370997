package monitoring

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/yaml"

	"k8s.io/client-go/util/workqueue"

	"github.com/octopus-mcs/octopus/internal/gateway"
	"github.com/octopus-mcs/octopus/internal/heartbeat"
	"github.com/octopus-mcs/octopus/internal/routeagent"
	"github.com/octopus-mcs/octopus/internal/servicediscovery"
	"github.com/octopus-mcs/octopus/internal/testenv"
	"github.com/octopus-mcs/octopus/pkg/crossdns"
)

// promtool returns the pinned promtool (hack/tools/promtool): $PROMTOOL, else bin/promtool as
// `make tools` builds it, else built there now.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	root := testenv.RepoRoot(t)
	bin := filepath.Join(root, "bin", "promtool")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	t.Logf("building promtool into %s (make tools does it once)", bin)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/prometheus/prometheus/cmd/promtool")
	cmd.Dir = filepath.Join(root, "hack", "tools", "promtool")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building promtool (run `make tools`): %v\n%s", err, out)
	}
	return bin
}

// TestRulesWithPromtool checks alerts.yaml with Prometheus's own rule loader and runs its unit
// tests (alerts_test.yaml): each alert fires on the series it is about, after its `for`, with
// its annotations rendered, and not on healthy series.
func TestRulesWithPromtool(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "alerts.yaml"},
		{"test", "rules", "alerts_test.yaml"},
	} {
		out, err := exec.CommandContext(t.Context(), bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		}
	}
}

// fqName reads the metric name out of a descriptor: client_golang has no accessor for it, only
// String(), whose format (`Desc{fqName: "…", …}`) this test pins; a change fails the test.
var fqName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

// describedNames returns the names of the metrics cs describe.
func describedNames(t *testing.T, cs []prometheus.Collector) []string {
	t.Helper()
	var names []string
	for _, c := range cs {
		ch := make(chan *prometheus.Desc)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the metric name in %s", d)
			}
			names = append(names, m[1])
		}
	}
	return names
}

// controllerRuntimeNames returns the names controller-runtime's registry gathers once a
// controller reconciled (with an error) and so has every per-controller series: the registry
// the agent's controller, the route agent and octopus-ovn master serve.
func controllerRuntimeNames(t *testing.T) []string {
	t.Helper()
	reconciled := make(chan struct{})
	c, err := controller.NewUnmanaged("monitoring-test", controller.Options{
		SkipNameValidation: ptr.To(true),
		Reconciler: reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			defer close(reconciled)
			return reconcile.Result{}, errors.New("failing on purpose")
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Watch(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(reconcile.Request{})
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	select {
	case <-reconciled:
	case <-time.After(30 * time.Second):
		t.Fatal("the test controller did not reconcile")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	fams, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
	}
	return names
}

// registered is every metric name the components register, from their real registries.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	var cs []prometheus.Collector
	for _, m := range [][]prometheus.Collector{gateway.Metrics(), routeagent.Metrics(), servicediscovery.Metrics(), heartbeat.Metrics(), crossdns.Metrics()} {
		cs = append(cs, m...)
	}
	out := map[string]bool{}
	for _, n := range append(describedNames(t, cs), controllerRuntimeNames(t)...) {
		out[n] = true
	}
	return out
}

// metricRef finds the metric names in a PromQL expression: ours and the libraries' are all
// prefixed, so a prefix match finds every one without a PromQL parser in this module (promtool
// check rules above parses the rules with the real one).
var metricRef = regexp.MustCompile(`\b(?:octopus|controller_runtime|coredns|workqueue|rest_client)_[a-zA-Z0-9_:]*`)

// exprs returns the alerts' expressions and the dashboard's queries, each with where it is.
func exprs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(Alerts, &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out["alert "+r.Alert+r.Record] = r.Expr
		}
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(Dashboard, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			out["dashboard panel "+p.Title+" query "+string(rune('A'+i))] = tg.Expr
		}
	}
	return out
}

// TestMetricsExist checks that every metric an alert or a dashboard query uses is one the
// components register: a renamed or removed metric fails here rather than silently leaving an
// alert that can never fire.
func TestMetricsExist(t *testing.T) {
	have := registered(t)
	uses := exprs(t)
	if len(uses) < 10 {
		t.Fatalf("found only %d expressions in alerts.yaml and dashboard.json", len(uses))
	}
	for where, expr := range uses {
		names := metricRef.FindAllString(expr, -1)
		if len(names) == 0 {
			t.Errorf("%s uses no metric: %s", where, expr)
		}
		for _, n := range names {
			// A histogram is registered by its name and queried by its series'.
			base := n
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(n, suffix); ok && have[b] {
					base = b
				}
			}
			if !have[base] {
				t.Errorf("%s uses %s, which no component registers", where, n)
			}
		}
	}
	// The check is not vacuous: each component's metrics are among those found.
	for _, n := range []string{"octopus_gateway_connection_state", "octopus_servicediscovery_propagation_seconds",
		"controller_runtime_reconcile_errors_total", "controller_runtime_reconcile_time_seconds", "coredns_crossdns_queries_total",
		"octopus_routeagent_apply_failures_total", "octopus_heartbeat_last_success_timestamp_seconds"} {
		if !have[n] {
			t.Errorf("%s is not among the registered metrics %v", n, slices.Sorted(maps.Keys(have)))
		}
	}
}
