package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

//go:embed static
var static embed.FS

// DefaultRefresh is how often the page polls, and the least time between two collections.
const DefaultRefresh = 2 * time.Second

// collectTimeout bounds one collection, so that an API server that does not answer costs
// a page one late refresh and not a hang.
const collectTimeout = 10 * time.Second

// Server serves the page and its view.
type Server struct {
	// Collect reads a snapshot. Required.
	Collect func(ctx context.Context) Snapshot
	// Refresh is the least time between two collections: the views of requests in between
	// are served from the last one, so that several open pages cost the API servers no more
	// than one. Optional, DefaultRefresh.
	Refresh time.Duration
	// AllowRemote serves requests addressed to any host name. Without it only requests for
	// a loopback address or localhost are answered: the page and its JSON describe the cluster
	// set, and a web page elsewhere could otherwise read them through DNS rebinding (a name
	// of the attacker's that resolves to 127.0.0.1).
	AllowRemote bool

	mu    sync.Mutex
	view  View
	taken time.Time
}

// Handler returns the HTTP handler: the page at /, its assets, and the view at /api/view.
func (s *Server) Handler() http.Handler {
	assets, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(assets))
	mux.HandleFunc("GET /api/view", s.serveView)
	return s.guard(mux)
}

// guard refuses foreign host names and sets headers that keep the page self-contained.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.AllowRemote && !isLocalHost(r.Host) {
			http.Error(w, fmt.Sprintf("host %q is not a loopback address: the dashboard answers only http://127.0.0.1 or http://localhost (see --allow-remote)", r.Host), http.StatusMisdirectedRequest)
			return
		}
		h := w.Header()
		// Everything the page needs is embedded: nothing may load from, or be sent to,
		// anywhere else.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

func (s *Server) serveView(w http.ResponseWriter, r *http.Request) {
	v := s.current(r.Context())
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil && !errors.Is(err, context.Canceled) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// current returns the last view, collecting a new one when it is older than Refresh.
// Concurrent requests wait for the one collection.
func (s *Server) current(ctx context.Context) View {
	refresh := s.Refresh
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken.IsZero() || time.Since(s.taken) >= refresh {
		// The view is shared by every page: a page that goes away must not cut the
		// collection short for the others.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), collectTimeout)
		defer cancel()
		s.view = BuildView(s.Collect(ctx))
		s.taken = time.Now()
	}
	return s.view
}

// isLocalHost reports whether a request's Host names this machine's loopback.
func isLocalHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && addr.IsLoopback()
}

// CheckListen refuses a listen address that is not loopback unless allowRemote: the
// dashboard has no authentication, and whoever reaches it reads the cluster set's topology
// with the user's credentials.
func CheckListen(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT, e.g. 127.0.0.1:8080: %w", addr, err)
	}
	if allowRemote {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("--listen %q is not a loopback address: the dashboard has no authentication and shows the cluster set read with your credentials to anyone who reaches it; pass --allow-remote to serve it anyway", addr)
	}
	return nil
}
