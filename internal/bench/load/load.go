// Package load is the load generator and its server side, the part of `octopus bench` that
// runs inside pods (`octopus-echo bench ...`, cmd/octopus-echo): TCP throughput over several
// streams into a discard server, and request/response latency against an echo server over one
// connection. It uses only the standard library (and internal/bench/stats, which does too),
// so the echo image needs nothing else, and its results are JSON the CLI reads back from the
// client pod.
package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/octopus-mcs/octopus/internal/bench/stats"
)

// dialTimeout bounds connecting: a path that drops SYNs fails in seconds, not after the
// kernel's two minutes of retries.
const dialTimeout = 5 * time.Second

// ServeDiscard accepts connections on l and reads and drops everything they send (the
// discard service of RFC 863): the server side of Throughput. It returns when l is closed.
func ServeDiscard(l net.Listener) {
	serve(l, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
}

// ServeEcho accepts connections on l and sends back everything they send: the server side
// of Latency (and octopus-echo's TCP echo port). It returns when l is closed.
func ServeEcho(l net.Listener) {
	serve(l, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

// serve handles each connection l accepts in a goroutine of its own, closing it after.
func serve(l net.Listener, handle func(net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

// ThroughputOptions configure Throughput.
type ThroughputOptions struct {
	// Target is the discard server, host:port. Required.
	Target string
	// Streams is the number of parallel TCP connections. Optional, default 4.
	Streams int
	// Duration is how long each stream sends. Required.
	Duration time.Duration
	// BufferSize is the size of each write. Optional, default 128 KiB (iperf3's default).
	BufferSize int
}

// ThroughputResult is what Throughput measured.
type ThroughputResult struct {
	Target  string `json:"target"`
	Streams int    `json:"streams"`
	// Bytes is what all streams wrote and the kernel accepted, summed.
	Bytes int64 `json:"bytes"`
	// Seconds is the measured interval: from the first connection up to the last stream
	// stopping sending.
	Seconds float64 `json:"seconds"`
	// BitsPerSecond is Bytes*8/Seconds.
	BitsPerSecond float64 `json:"bitsPerSecond"`
}

// Throughput opens Streams connections to Target and writes to all of them for Duration.
// It counts bytes the kernel accepted: in a steady state that is what the path carries,
// while the socket buffers of the last moment are small against Duration of traffic.
func Throughput(ctx context.Context, o ThroughputOptions) (ThroughputResult, error) {
	if o.Streams <= 0 {
		o.Streams = 4
	}
	if o.BufferSize <= 0 {
		o.BufferSize = 128 << 10
	}
	if o.Duration <= 0 {
		return ThroughputResult{}, fmt.Errorf("throughput to %s: duration %s: want a positive duration", o.Target, o.Duration)
	}
	d := net.Dialer{Timeout: dialTimeout}
	conns := make([]net.Conn, 0, o.Streams)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := range o.Streams {
		c, err := d.DialContext(ctx, "tcp", o.Target)
		if err != nil {
			return ThroughputResult{}, fmt.Errorf("throughput stream %d to %s: %w", i+1, o.Target, err)
		}
		conns = append(conns, c)
	}
	start := time.Now()
	deadline := start.Add(o.Duration)
	var total atomic.Int64
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			buf := make([]byte, o.BufferSize)
			// The write deadline ends the stream mid-write if need be, so a stream stops on
			// time even when the path is stalled.
			_ = c.SetWriteDeadline(deadline)
			for ctx.Err() == nil {
				n, err := c.Write(buf)
				total.Add(int64(n))
				if err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						errs[i] = fmt.Errorf("throughput stream %d to %s: %w", i+1, o.Target, err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return ThroughputResult{}, err
	}
	r := ThroughputResult{Target: o.Target, Streams: len(conns), Bytes: total.Load(), Seconds: elapsed.Seconds()}
	r.BitsPerSecond = stats.Rate(r.Bytes*8, elapsed)
	return r, nil
}

// LatencyOptions configure Latency.
type LatencyOptions struct {
	// Target is the echo server, host:port. Required.
	Target string
	// Duration is how long to send requests. Required.
	Duration time.Duration
	// Size is each request's size; the echo server sends it back as the response.
	// Optional, default 64 bytes.
	Size int
}

// LatencyResult is what Latency measured.
type LatencyResult struct {
	Target   string `json:"target"`
	Requests int    `json:"requests"`
	// P50, P99 and Max are the request/response times' percentiles, nanoseconds.
	P50 time.Duration `json:"p50"`
	P99 time.Duration `json:"p99"`
	Max time.Duration `json:"max"`
	// RequestsPerSecond is Requests over the measured interval: one request at a time, so
	// it is about 1/mean latency.
	RequestsPerSecond float64 `json:"requestsPerSecond"`
}

// Latency sends Size-byte requests over one TCP connection to Target, one at a time, each
// after the previous response fully came back, for Duration, and reports the percentiles of
// the per-request times. The connection is set up first and not counted.
func Latency(ctx context.Context, o LatencyOptions) (LatencyResult, error) {
	if o.Size <= 0 {
		o.Size = 64
	}
	if o.Duration <= 0 {
		return LatencyResult{}, fmt.Errorf("latency to %s: duration %s: want a positive duration", o.Target, o.Duration)
	}
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, "tcp", o.Target)
	if err != nil {
		return LatencyResult{}, fmt.Errorf("latency to %s: %w", o.Target, err)
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		// Small requests must leave at once, not wait for Nagle's algorithm.
		_ = tc.SetNoDelay(true)
	}
	req := make([]byte, o.Size)
	resp := make([]byte, o.Size)
	var samples []time.Duration
	start := time.Now()
	deadline := start.Add(o.Duration)
	// A response that never comes (a path dropping packets for good) must not hang the
	// measurement past its end by more than a little.
	_ = c.SetDeadline(deadline.Add(5 * time.Second))
	for time.Now().Before(deadline) && ctx.Err() == nil {
		t0 := time.Now()
		if _, err := c.Write(req); err != nil {
			return LatencyResult{}, fmt.Errorf("latency to %s: request %d: %w", o.Target, len(samples)+1, err)
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			return LatencyResult{}, fmt.Errorf("latency to %s: response %d: %w", o.Target, len(samples)+1, err)
		}
		samples = append(samples, time.Since(t0))
	}
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return LatencyResult{}, err
	}
	r := Summarize(samples, elapsed)
	r.Target = o.Target
	return r, nil
}

// Summarize computes a LatencyResult from per-request times measured over elapsed.
func Summarize(samples []time.Duration, elapsed time.Duration) LatencyResult {
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	r := LatencyResult{Requests: len(sorted), P50: stats.Percentile(sorted, 50), P99: stats.Percentile(sorted, 99)}
	if len(sorted) > 0 {
		r.Max = sorted[len(sorted)-1]
	}
	r.RequestsPerSecond = stats.Rate(int64(len(sorted)), elapsed)
	return r
}
