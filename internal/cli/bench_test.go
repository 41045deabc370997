package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/bench"
)

func TestBenchValidate(t *testing.T) {
	valid := func(kind bench.Kind) benchOptions {
		return benchOptions{kind: kind, duration: time.Second, repeat: 1, streams: 4, size: 64,
			workloadFlags: workloadFlags{kubeconfigs: []string{"a", "b"}, output: outputTable, timeout: time.Minute, readyTimeout: time.Second}}
	}
	tests := []struct {
		name    string
		kind    bench.Kind
		modify  func(*benchOptions)
		wantErr string
	}{
		{"throughput", bench.KindThroughput, func(*benchOptions) {}, ""},
		{"latency as json", bench.KindLatency, func(o *benchOptions) { o.output = outputJSON }, ""},
		{"one cluster", bench.KindThroughput, func(o *benchOptions) { o.kubeconfigs = o.kubeconfigs[:1] }, "pass --kubeconfig at least twice (got 1)"},
		{"same kubeconfig twice", bench.KindThroughput, func(o *benchOptions) { o.kubeconfigs = []string{"a", "a"} }, "--kubeconfig a is given twice"},
		{"bad namespace", bench.KindLatency, func(o *benchOptions) { o.namespace = "Not_A_Label" }, `--namespace "Not_A_Label"`},
		{"zero duration", bench.KindLatency, func(o *benchOptions) { o.duration = 0 }, "--duration 0s: want a positive duration"},
		{"no runs", bench.KindLatency, func(o *benchOptions) { o.repeat = 0 }, "--repeat 0: want a positive number"},
		{"no streams", bench.KindThroughput, func(o *benchOptions) { o.streams = 0 }, "--streams 0: want a positive number"},
		// latency has no --streams flag, so its zero value is not an error.
		{"latency ignores streams", bench.KindLatency, func(o *benchOptions) { o.streams = 0 }, ""},
		{"empty requests", bench.KindLatency, func(o *benchOptions) { o.size = 0 }, "--size 0: want a positive number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := valid(tt.kind)
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
