// Command octopus-echo is Octopus's echo server, the workload of the lab, the demo and the
// end-to-end tests (image ghcr.io/octopus-mcs/echo): it echoes TCP and UDP and answers HTTP
// with where it runs, so a request shows which cluster, node and pod answered it.
//
// Where it runs comes from the environment: CLUSTER_NAME (else OCTOPUS_LAB_CLUSTER, which the
// lab's NRI plugin sets on its nodes), NODE_NAME, POD_NAME, POD_NAMESPACE and POD_IP, as a manifest sets them
// with the downward API; POD_NAME defaults to the host name.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/octopus-mcs/octopus/internal/bench/load"
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
		err = run(ctx, *httpPort, *echoPort, *discardPort)
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

func run(ctx context.Context, httpPort, echoPort, discardPort int) error {
	id := identity()
	tcp, err := net.Listen("tcp", ":"+strconv.Itoa(echoPort))
	if err != nil {
		return fmt.Errorf("listening for TCP echo: %w", err)
	}
	discard, err := net.Listen("tcp", ":"+strconv.Itoa(discardPort))
	if err != nil {
		return fmt.Errorf("listening for TCP discard: %w", err)
	}
	udp, err := net.ListenPacket("udp", ":"+strconv.Itoa(echoPort))
	if err != nil {
		return fmt.Errorf("listening for UDP echo: %w", err)
	}
	srv := &http.Server{
		Addr:              ":" + strconv.Itoa(httpPort),
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprintf(w, "%s client=%s path=%s\n", id, r.RemoteAddr, r.URL.Path)
		}),
	}
	go load.ServeEcho(tcp)
	go load.ServeDiscard(discard)
	go serveUDP(udp)
	go func() {
		<-ctx.Done()
		_ = tcp.Close()
		_ = discard.Close()
		_ = udp.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("octopus-echo %s: HTTP on :%d, TCP and UDP echo on :%d, TCP discard on :%d", id, httpPort, echoPort, discardPort)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving HTTP: %w", err)
	}
	return nil
}

// identity is the line the HTTP answer starts with.
func identity() string {
	cluster := os.Getenv("CLUSTER_NAME")
	if cluster == "" {
		cluster = os.Getenv("OCTOPUS_LAB_CLUSTER")
	}
	pod := os.Getenv("POD_NAME")
	if pod == "" {
		pod, _ = os.Hostname()
	}
	return fmt.Sprintf("cluster=%s node=%s pod=%s namespace=%s ip=%s",
		cluster, os.Getenv("NODE_NAME"), pod, os.Getenv("POD_NAMESPACE"), os.Getenv("POD_IP"))
}

func serveUDP(c net.PacketConn) {
	buf := make([]byte, 64<<10)
	for {
		n, addr, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = c.WriteTo(buf[:n], addr)
	}
}
