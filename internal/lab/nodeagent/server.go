package nodeagent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// Stream timeouts of exec sessions, the kubelet's defaults.
const (
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
)

// KubeletServing configures the agent's kubelet API: the endpoints the API server proxies
// `kubectl exec` and `kubectl logs` to, served on every node's InternalIP.
type KubeletServing struct {
	// Port is the kubelet port (Node status.daemonEndpoints.kubeletEndpoint).
	Port uint16
	// CertPEM and KeyPEM are the serving certificate, valid for every node's InternalIP.
	CertPEM, KeyPEM []byte
	// ClientCAPEM verifies client certificates.
	ClientCAPEM []byte
	// ClientUser is the only user (certificate CommonName) served: the API server's
	// --kubelet-client-certificate. Nobody else needs a lab kubelet.
	ClientUser string
}

func (k *KubeletServing) tlsConfig() (*tls.Config, error) {
	cert, err := tls.X509KeyPair(k.CertPEM, k.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("kubelet serving certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(k.ClientCAPEM) {
		return nil, errors.New("kubelet client CA: no certificate in PEM")
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
		// Exec upgrades the connection (SPDY), which HTTP/2 cannot carry.
		NextProtos: []string{"http/1.1"},
	}, nil
}

// serveKubelet starts an HTTPS server per node on its InternalIP, inside its namespace. The
// servers stop when ctx ends; the returned function waits for that.
func (a *Agent) serveKubelet(ctx context.Context) (wait func(), err error) {
	k := a.opts.Kubelet
	cfg, err := k.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("node agent of %s: %w", a.opts.Cluster, err)
	}
	var servers []*http.Server
	done := make(chan struct{})
	closeAll := func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}
	for _, n := range a.opts.Nodes {
		l, err := a.opts.Network.Listen(n.Netns, netip.AddrPortFrom(n.LANAddr, k.Port))
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("node agent of %s: serving the kubelet API of node %s: %w", a.opts.Cluster, n.Name, err)
		}
		srv := &http.Server{
			Handler:           a.kubeletHandler(n.Name, k.ClientUser),
			ReadHeaderTimeout: 10 * time.Second,
			BaseContext:       func(net.Listener) context.Context { return ctx },
		}
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(tls.NewListener(l, cfg)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.opts.Log.Error(err, "Kubelet API server stopped", "cluster", a.opts.Cluster, "node", n.Name)
			}
		}()
	}
	go func() {
		<-ctx.Done()
		// Close, not Shutdown: hijacked exec sessions are not waited for by Shutdown, and
		// followed logs would hold it up; their contexts end with ctx anyway.
		closeAll()
		close(done)
	}()
	return func() { <-done }, nil
}

// kubeletHandler serves the kubelet endpoints the lab supports for the pods of one node.
func (a *Agent) kubeletHandler(node, user string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/exec/{ns}/{pod}/{container}", func(w http.ResponseWriter, r *http.Request) {
		a.serveExec(w, r, node)
	})
	mux.HandleFunc("/exec/{ns}/{pod}/{uid}/{container}", func(w http.ResponseWriter, r *http.Request) {
		a.serveExec(w, r, node)
	})
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", func(w http.ResponseWriter, r *http.Request) {
		a.serveLogs(w, r, node)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The TLS handshake verified the chain; authorization is by name.
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != user {
			http.Error(w, "forbidden: only the API server's kubelet client may use the lab kubelet API", http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// lookup finds a running container of a pod on node.
func (a *Agent) lookup(r *http.Request, node string) (*pod, *container, int, error) {
	key := r.PathValue("ns") + "/" + r.PathValue("pod")
	a.mu.Lock()
	p := a.pods[key]
	a.mu.Unlock()
	if p == nil || p.node.Name != node {
		return nil, nil, http.StatusNotFound, fmt.Errorf("pod %s not found on node %s", key, node)
	}
	if uid := r.PathValue("uid"); uid != "" && uid != string(p.uid) {
		return nil, nil, http.StatusNotFound, fmt.Errorf("pod %s with UID %s not found on node %s", key, uid, node)
	}
	name := r.PathValue("container")
	for _, c := range p.containers {
		if c.spec.name == name {
			return p, c, 0, nil
		}
	}
	return nil, nil, http.StatusNotFound, fmt.Errorf("container %s not found in pod %s", name, key)
}

func (a *Agent) serveExec(w http.ResponseWriter, r *http.Request, node string) {
	p, c, code, err := a.lookup(r, node)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	if running, _ := c.running(); !running {
		http.Error(w, fmt.Sprintf("container %s of pod %s is not running", c.spec.name, p.key), http.StatusBadRequest)
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := r.URL.Query()["command"]
	if len(cmd) == 0 {
		http.Error(w, "no command given", http.StatusBadRequest)
		return
	}
	a.opts.Log.V(1).Info("Exec", "cluster", a.opts.Cluster, "pod", p.key, "container", c.spec.name, "command", cmd, "tty", opts.TTY)
	remotecommand.ServeExec(w, r, execAdapter{p: p, c: c}, p.key, string(p.uid), c.spec.name, cmd, opts,
		streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// execAdapter is the streaming library's Executor for one resolved container.
type execAdapter struct {
	p *pod
	c *container
}

var _ remotecommand.Executor = execAdapter{}

func (e execAdapter) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, in io.Reader, out, errw io.WriteCloser,
	tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	sio := execIO{tty: tty, resize: resize}
	// Typed nils must not become non-nil interfaces: a stream not asked for is nil.
	if in != nil {
		sio.in = in
	}
	if out != nil {
		sio.out = out
	}
	if errw != nil {
		sio.err = errw
	}
	return e.p.exec(ctx, e.c, cmd, sio)
}

func (a *Agent) serveLogs(w http.ResponseWriter, r *http.Request, node string) {
	p, c, code, err := a.lookup(r, node)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	q := r.URL.Query()
	o := logOptions{tailLines: -1, follow: q.Get("follow") == "true", timestamps: q.Get("timestamps") == "true"}
	if v := q.Get("tailLines"); v != "" {
		if o.tailLines, err = strconv.ParseInt(v, 10, 64); err != nil || o.tailLines < 0 {
			http.Error(w, "tailLines: want a non-negative integer", http.StatusBadRequest)
			return
		}
	}
	if v := q.Get("limitBytes"); v != "" {
		if o.limitBytes, err = strconv.ParseInt(v, 10, 64); err != nil || o.limitBytes <= 0 {
			http.Error(w, "limitBytes: want a positive integer", http.StatusBadRequest)
			return
		}
	}
	if v := q.Get("sinceSeconds"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil || s <= 0 {
			http.Error(w, "sinceSeconds: want a positive integer", http.StatusBadRequest)
			return
		}
		o.since = time.Now().Add(-time.Duration(s) * time.Second)
	}
	if v := q.Get("sinceTime"); v != "" {
		if o.since, err = time.Parse(time.RFC3339, v); err != nil {
			http.Error(w, "sinceTime: want an RFC 3339 time", http.StatusBadRequest)
			return
		}
	}
	path, live, err := c.logFor(q.Get("previous") == "true")
	if err != nil {
		http.Error(w, fmt.Sprintf("pod %s: %v", p.key, err), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	if err := writeLogs(r.Context(), w, path, o, live, flush); err != nil && r.Context().Err() == nil {
		a.opts.Log.Error(err, "Serving container log failed", "pod", p.key, "container", c.spec.name)
		if !strings.Contains(err.Error(), "broken pipe") {
			fmt.Fprintf(w, "\nlab node agent: %v\n", err)
		}
	}
}
