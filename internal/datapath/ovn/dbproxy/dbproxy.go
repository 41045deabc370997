// Package dbproxy carries a program's OVSDB connections from unix sockets to a database's TLS
// port, presenting a client certificate the program itself does not hold.
//
// Why: ovn-ic has one set of TLS options for its four connections, while its own cluster's NB
// and SB trust only the member's OVN CA and the hub's IC databases only the hub's IC CA, and no
// certificate is signed by both. So ovn-ic talks TLS itself to the IC databases (ssl:, the
// cluster's IC certificate) and reaches its own cluster's databases through this proxy, in the
// same pod, which holds the pod's certificate of the member's CA. A byte-for-byte proxy (not an
// OVSDB relay: OVN 23.03's clients refuse a relay server where they want a leader) keeps
// everything ovn-ic does, its SB lock included, between it and the real server.
package dbproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Route is one unix socket carried to one TLS endpoint.
type Route struct {
	// Socket is the unix socket's path the proxy listens on (replaced if it exists).
	Socket string
	// Remote is the database's "host:port".
	Remote string
}

// Host is the remote's host, the name its certificate is checked against.
func (r Route) Host() string {
	h, _, _ := net.SplitHostPort(r.Remote)
	return h
}

// ParseRoute reads "unix:PATH=ssl:HOST:PORT", the form of octopus-ovn db-proxy's --route.
func ParseRoute(s string) (Route, error) {
	l, r, ok := strings.Cut(s, "=")
	path, okL := strings.CutPrefix(l, "unix:")
	remote, okR := strings.CutPrefix(r, "ssl:")
	if !ok || !okL || !okR || path == "" || !strings.Contains(remote, ":") {
		return Route{}, fmt.Errorf("route %q: want unix:PATH=ssl:HOST:PORT", s)
	}
	return Route{Socket: path, Remote: remote}, nil
}

// dialTimeout bounds one TLS connection's set-up; the client retries on its own.
const dialTimeout = 10 * time.Second

// Serve listens on every route's socket and carries each connection accepted there to its
// remote over TLS with cfg(route) until ctx ends. A connection the remote refuses is closed,
// so the client sees it drop and reconnects as it does from any server.
func Serve(ctx context.Context, routes []Route, cfg func(Route) *tls.Config, log logr.Logger) error {
	if len(routes) == 0 {
		return errors.New("db-proxy: no route")
	}
	var listeners []net.Listener
	closeAll := func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}
	for _, r := range routes {
		_ = os.Remove(r.Socket)
		l, err := net.Listen("unix", r.Socket)
		if err != nil {
			closeAll()
			return fmt.Errorf("db-proxy: listening on %s: %w", r.Socket, err)
		}
		listeners = append(listeners, l)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(routes))
	for i, r := range routes {
		l := listeners[i]
		tc := cfg(r)
		wg.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("db-proxy: accepting on %s: %w", r.Socket, err)
					}
					return
				}
				wg.Go(func() { carry(ctx, c, r, tc, log) })
			}
		})
	}
	select {
	case <-ctx.Done():
	case err := <-errs:
		closeAll()
		wg.Wait()
		return err
	}
	closeAll()
	wg.Wait()
	return nil
}

// carry copies between the client's connection and a new TLS connection to r.Remote.
func carry(ctx context.Context, c net.Conn, r Route, cfg *tls.Config, log logr.Logger) {
	defer func() { _ = c.Close() }()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: dialTimeout}, Config: cfg}
	s, err := d.DialContext(ctx, "tcp", r.Remote)
	if err != nil {
		log.Info("Cannot reach the database; dropping the client's connection", "socket", r.Socket, "remote", r.Remote, "error", err.Error())
		return
	}
	defer func() { _ = s.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = c.Close(); _ = s.Close() })
	defer stop()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done // either side closing ends both
}
