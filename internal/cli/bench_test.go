package cli

import (
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/bench"
)

func TestBenchValidate(t *testing.T) {
	valid := func() benchOptions {
		return benchOptions{kind: bench.KindThroughput, duration: time.Second, repeat: 1, streams: 4, size: 64,
			workloadFlags: workloadFlags{kubeconfigs: []string{"a", "b"}, output: outputTable, timeout: time.Minute, readyTimeout: time.Second}}
	}
	// latency sets the kind its row measures; the valid options are throughput's.
	latency := func(modify func(*benchOptions)) func(*benchOptions) {
		return func(o *benchOptions) { o.kind = bench.KindLatency; modify(o) }
	}
	testValidate(t, valid, []validateCase[benchOptions]{
		{"throughput", func(*benchOptions) {}, ""},
		{"latency as json", latency(func(o *benchOptions) { o.output = outputJSON }), ""},
		{"one cluster", func(o *benchOptions) { o.kubeconfigs = o.kubeconfigs[:1] }, "pass --kubeconfig at least twice (got 1)"},
		{"same kubeconfig twice", func(o *benchOptions) { o.kubeconfigs = []string{"a", "a"} }, "--kubeconfig a is given twice"},
		{"bad namespace", latency(func(o *benchOptions) { o.namespace = "Not_A_Label" }), `--namespace "Not_A_Label"`},
		{"zero duration", latency(func(o *benchOptions) { o.duration = 0 }), "--duration 0s: want a positive duration"},
		{"no runs", latency(func(o *benchOptions) { o.repeat = 0 }), "--repeat 0: want a positive number"},
		{"no streams", func(o *benchOptions) { o.streams = 0 }, "--streams 0: want a positive number"},
		// latency has no --streams flag, so its zero value is not an error.
		{"latency ignores streams", latency(func(o *benchOptions) { o.streams = 0 }), ""},
		{"empty requests", latency(func(o *benchOptions) { o.size = 0 }), "--size 0: want a positive number"},
	})
}
