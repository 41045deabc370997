// Command octopus-echo is Octopus's echo server, the workload of the lab, the demo and the
// end-to-end tests (image ghcr.io/octopus-mcs/echo): it echoes TCP and UDP and answers HTTP
// with where it runs, so a request shows which cluster, node and pod answered it.
//
// Where it runs comes from the environment: CLUSTER_NAME (else OCTOPUS_LAB_CLUSTER, which the
// lab node agent sets), NODE_NAME, POD_NAME, POD_NAMESPACE and POD_IP, as a manifest sets them
// with the downward API; POD_NAME defaults to the host name.
package main

import (
	"context"
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
)

func main() {
	httpPort := flag.Int("http-port", 8080, "HTTP port: answers with cluster, node and pod")
	echoPort := flag.Int("echo-port", 9000, "TCP and UDP echo port")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *httpPort, *echoPort)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, httpPort, echoPort int) error {
	id := identity()
	tcp, err := net.Listen("tcp", ":"+strconv.Itoa(echoPort))
	if err != nil {
		return fmt.Errorf("listening for TCP echo: %w", err)
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
	go serveTCP(tcp)
	go serveUDP(udp)
	go func() {
		<-ctx.Done()
		_ = tcp.Close()
		_ = udp.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("octopus-echo %s: HTTP on :%d, TCP and UDP echo on :%d", id, httpPort, echoPort)
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

func serveTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
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
