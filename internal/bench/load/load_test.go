package load

import (
	"context"
	"net"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestSummarize(t *testing.T) {
	tests := []struct {
		name    string
		samples []time.Duration
		elapsed time.Duration
		want    LatencyResult
	}{
		{"none", nil, time.Second, LatencyResult{}},
		{"unsorted input", []time.Duration{ms(3), ms(1), ms(2), ms(10)}, 2 * time.Second,
			LatencyResult{Requests: 4, P50: ms(2), P99: ms(10), Max: ms(10), RequestsPerSecond: 2}},
		{"no elapsed time gives no rate", []time.Duration{ms(1)}, 0, LatencyResult{Requests: 1, P50: ms(1), P99: ms(1), Max: ms(1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summarize(tt.samples, tt.elapsed); got != tt.want {
				t.Fatalf("Summarize = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestOverLoopback runs both measurements against the servers on loopback: real sockets,
// results in the units the CLI reads.
func TestOverLoopback(t *testing.T) {
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	go ServeDiscard(sink)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go ServeEcho(echo)
	ctx := context.Background()

	tp, err := Throughput(ctx, ThroughputOptions{Target: sink.Addr().String(), Streams: 3, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if tp.Streams != 3 || tp.Bytes <= 0 || tp.BitsPerSecond <= 0 || tp.Seconds < 0.3 || tp.Seconds > 2 {
		t.Fatalf("throughput over loopback: %+v", tp)
	}
	lat, err := Latency(ctx, LatencyOptions{Target: echo.Addr().String(), Duration: 200 * time.Millisecond, Size: 100})
	if err != nil {
		t.Fatal(err)
	}
	if lat.Requests < 10 || lat.P50 <= 0 || lat.P99 < lat.P50 || lat.Max < lat.P99 || lat.RequestsPerSecond <= 0 {
		t.Fatalf("latency over loopback: %+v", lat)
	}

	// Nothing listening: the error names the target.
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := closed.Addr().String()
	closed.Close()
	if _, err := Throughput(ctx, ThroughputOptions{Target: addr, Duration: time.Second}); err == nil {
		t.Fatal("throughput to a closed port: no error")
	}
	if _, err := Latency(ctx, LatencyOptions{Target: addr, Duration: time.Second}); err == nil {
		t.Fatal("latency to a closed port: no error")
	}
}
