// Command octopus-echo is Octopus's echo server, the workload of the lab, the demo and the
// end-to-end tests (image ghcr.io/octopus-mcs/echo): it echoes TCP and UDP and answers HTTP
// with where it runs, so a request shows which cluster, node and pod answered it (the server
// is internal/echoserver). `octopus-echo bench` is the load generator of `octopus bench`
// (internal/bench/load).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/octopus-mcs/octopus/internal/bench/load"
	"github.com/octopus-mcs/octopus/internal/echoserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if len(os.Args) > 1 && os.Args[1] == "bench" {
		err = runBench(ctx, os.Args[2:], os.Stdout)
	} else {
		httpPort := flag.Int("http-port", 8080, "HTTP port: answers with cluster, node and pod")
		echoPort := flag.Int("echo-port", 9000, "TCP and UDP echo port")
		discardPort := flag.Int("discard-port", 9001, "TCP discard port (the server side of `octopus bench throughput`)")
		flag.Parse()
		err = echoserver.Run(ctx, echoserver.Ports{HTTP: *httpPort, Echo: *echoPort, Discard: *discardPort})
	}
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

// runBench is `octopus-echo bench throughput|latency --target host:port [...]`: one
// measurement, its result as one JSON object on out.
func runBench(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || (args[0] != "throughput" && args[0] != "latency") {
		return errors.New("usage: octopus-echo bench throughput|latency --target host:port [--duration d] [--streams n] [--size bytes]")
	}
	fs := flag.NewFlagSet("bench "+args[0], flag.ContinueOnError)
	target := fs.String("target", "", "server, host:port: the discard port for throughput, the echo port for latency")
	duration := fs.Duration("duration", 10*time.Second, "how long to measure")
	streams := fs.Int("streams", 4, "throughput: parallel TCP connections")
	size := fs.Int("size", 64, "latency: request (and response) size in bytes")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *target == "" {
		return errors.New("bench " + args[0] + ": --target is required")
	}
	var result any
	var err error
	if args[0] == "throughput" {
		result, err = load.Throughput(ctx, load.ThroughputOptions{Target: *target, Streams: *streams, Duration: *duration})
	} else {
		result, err = load.Latency(ctx, load.LatencyOptions{Target: *target, Duration: *duration, Size: *size})
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(result)
}
