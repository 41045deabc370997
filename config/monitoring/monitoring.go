// Package monitoring embeds the Prometheus alerting rules and the Grafana dashboard that ship
// with Octopus, so that installers (the Helm chart, `octopus` itself) take exactly the files
// that monitoring_test.go checked against the metrics the components register. The
// components, their ports and their metrics are described in docs/architecture.md §6j.
package monitoring

import _ "embed"

// Alerts is a Prometheus rule file (alerts.yaml): peer down, handshake stale, import lag,
// heartbeat lost, reconcile errors rising, route and DNS failures.
//
//go:embed alerts.yaml
var Alerts []byte

// Dashboard is a Grafana dashboard (dashboard.json) of the same metrics, with a Prometheus
// data source variable.
//
//go:embed dashboard.json
var Dashboard []byte
