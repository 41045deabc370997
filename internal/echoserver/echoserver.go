// Package echoserver is the server of octopus-echo (cmd/octopus-echo), the workload of the lab,
// the demo, `octopus verify`, `octopus bench` and the end-to-end tests: it echoes TCP and UDP,
// discards TCP for the throughput benchmark, and answers HTTP with where it runs, so a request
// shows which cluster, node and pod answered it. It lives here rather than in the command so
// that the command only parses flags (internal/archtest/cmds.go).
package echoserver

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/octopus-mcs/octopus/internal/bench/load"
)

// Ports are the server's ports.
type Ports struct {
	// HTTP answers every request with the server's Identity.
	HTTP int
	// Echo echoes TCP and UDP.
	Echo int
	// Discard reads and drops TCP: the server side of `octopus bench throughput`.
	Discard int
}

// Run serves until ctx ends, then closes its listeners and shuts the HTTP server down.
func Run(ctx context.Context, ports Ports) error {
	id := Identity()
	tcp, err := net.Listen("tcp", ":"+strconv.Itoa(ports.Echo))
	if err != nil {
		return fmt.Errorf("listening for TCP echo: %w", err)
	}
	discard, err := net.Listen("tcp", ":"+strconv.Itoa(ports.Discard))
	if err != nil {
		return fmt.Errorf("listening for TCP discard: %w", err)
	}
	udp, err := net.ListenPacket("udp", ":"+strconv.Itoa(ports.Echo))
	if err != nil {
		return fmt.Errorf("listening for UDP echo: %w", err)
	}
	srv := &http.Server{
		Addr:              ":" + strconv.Itoa(ports.HTTP),
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
	log.Printf("octopus-echo %s: HTTP on :%d, TCP and UDP echo on :%d, TCP discard on :%d", id, ports.HTTP, ports.Echo, ports.Discard)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving HTTP: %w", err)
	}
	return nil
}

// Identity is the line the HTTP answer starts with, from the environment a manifest sets with
// the downward API: CLUSTER_NAME (else OCTOPUS_LAB_CLUSTER, which the lab's NRI plugin sets on
// its nodes), NODE_NAME, POD_NAME (default the host name), POD_NAMESPACE and POD_IP.
func Identity() string {
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
