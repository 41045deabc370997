// Package metricsserver serves Prometheus metrics at /metrics for the components that do not
// run a controller-runtime manager (whose own metrics server the agent's controller uses): the
// gateway and the route agent; and, with ServeHTTP, their other plain HTTP endpoints (the route
// agent's probes). HealthHandler and Listeners are the node daemons' probe and metrics
// endpoints. The ports are documented in docs/architecture.md §6j.
package metricsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// Registry is what Serve serves: a registry, which also receives the handler's own metrics
// (promhttp_metric_handler_errors_total).
type Registry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// Serve serves reg's metrics at /metrics on l until ctx is done, then closes l. A failure to
// serve is logged, not returned: the component goes on without its metrics. wait returns once
// the server has stopped.
func Serve(ctx context.Context, l net.Listener, reg Registry, log logr.Logger) (wait func()) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", Handler(reg))
	return ServeHTTP(ctx, l, mux, "metrics", log)
}

// Handler serves reg's metrics, for a component that serves them beside other endpoints.
func Handler(reg Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// ServeHTTP serves h on l until ctx is done, then closes l; what names the endpoint in the
// logs. A failure to serve is logged, not returned. wait returns once the server has stopped.
// The components' other plain HTTP endpoints (the route agent's probes) use it too.
func ServeHTTP(ctx context.Context, l net.Listener, h http.Handler, what string, log logr.Logger) (wait func()) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		log.Info("Serving "+what, "address", l.Addr().String())
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "Serving "+what+" stopped; going on without it", "address", l.Addr().String())
		}
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	return func() { <-done }
}

// Listen listens on addr, the value of a --metrics-bind-address flag; "0" or "" turn the
// metrics off (nil, nil). Listening at startup makes a taken port fail the start instead of
// going unnoticed.
func Listen(addr string) (net.Listener, error) {
	if addr == "0" || addr == "" {
		return nil, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for metrics: %w (pick another address with --metrics-bind-address, or \"0\" to turn metrics off)", err)
	}
	return l, nil
}

// HealthHandler answers the kubelet's probes: /healthz with 200 while the process serves, and
// /readyz with 200 while ready returns nil, 503 with its error otherwise.
func HealthHandler(ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Listeners are a node daemon's two endpoints: Prometheus metrics and the kubelet's probes.
// Either may be nil (turned off).
type Listeners struct {
	Metrics, Health net.Listener
}

// ListenBoth listens on the values of a daemon's --metrics-bind-address and
// --health-probe-bind-address flags ("0" or "" turn either off), before anything else starts,
// so that a taken port fails the start instead of going unnoticed. On an error nothing is left
// listening.
func ListenBoth(metricsAddr, healthAddr string) (Listeners, error) {
	metrics, err := Listen(metricsAddr)
	if err != nil {
		return Listeners{}, err
	}
	ls := Listeners{Metrics: metrics}
	if healthAddr != "0" && healthAddr != "" {
		if ls.Health, err = net.Listen("tcp", healthAddr); err != nil {
			ls.Close()
			return Listeners{}, fmt.Errorf("listening for health probes: %w (pick another address with --health-probe-bind-address, or \"0\" to turn the probes off)", err)
		}
	}
	return ls, nil
}

// Close closes the listeners, for a daemon that fails before it serves them.
func (ls Listeners) Close() {
	for _, l := range []net.Listener{ls.Metrics, ls.Health} {
		if l != nil {
			_ = l.Close()
		}
	}
}

// ServeBoth serves reg's metrics and the health handler on the listeners that are set until
// ctx is done or the returned stop is called; stop waits until both servers have stopped.
func (ls Listeners) ServeBoth(ctx context.Context, reg Registry, health http.Handler, log logr.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var waits []func()
	if ls.Health != nil {
		// A failure to serve is logged: the kubelet's probes then fail and restart the daemon.
		waits = append(waits, ServeHTTP(ctx, ls.Health, health, "health probes (/healthz, /readyz)", log))
	}
	if ls.Metrics != nil {
		waits = append(waits, Serve(ctx, ls.Metrics, reg, log))
	}
	return func() {
		cancel()
		for _, wait := range waits {
			wait()
		}
	}
}

// Prefixed gathers from Gatherer only the metric families whose names start with one of
// Prefixes: how a component serves a shared registry's controller metrics beside its own
// registry without serving the Go and process collectors twice (which fails the scrape).
type Prefixed struct {
	prometheus.Gatherer
	Prefixes []string
}

// Gather implements prometheus.Gatherer.
func (p Prefixed) Gather() ([]*dto.MetricFamily, error) {
	fams, err := p.Gatherer.Gather()
	kept := fams[:0]
	for _, f := range fams {
		for _, prefix := range p.Prefixes {
			if strings.HasPrefix(f.GetName(), prefix) {
				kept = append(kept, f)
				break
			}
		}
	}
	return kept, err
}
