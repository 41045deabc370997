package servicediscovery

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// SetupImportCache exposes setupImport to the external tests, which check what its hub cache
// holds.
var SetupImportCache = setupImport

// ControllerMetric exposes controllerMetric to the external tests.
var ControllerMetric = controllerMetric

// controllerMetric returns the series of family whose label is value in controller-runtime's
// registry, the one the agent's controller serves; nil when there is none.
func controllerMetric(t *testing.T, family, label, value string) *dto.Metric {
	t.Helper()
	fams, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering the controller's metrics: %v", err)
	}
	for _, f := range fams {
		if f.GetName() != family {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m
				}
			}
		}
	}
	return nil
}

// ReconcileTotal is how many reconciles controller has finished in this process, whatever
// their result.
func ReconcileTotal(t *testing.T, controller string) float64 {
	t.Helper()
	fams, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering the controller's metrics: %v", err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
