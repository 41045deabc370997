package nriplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/go-logr/logr/testr"
	"k8s.io/client-go/rest"

	"github.com/octopus-mcs/octopus/internal/testenv"
)

// fakeAPIServer serves the one pod the tests' sandboxes are for, with its address.
func fakeAPIServer(t *testing.T) *httptest.Server {
	t.Helper()
	p := pod(withAddress("10.112.0.5"))
	p.APIVersion, p.Kind = "v1", "Pod"
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/default/pods/web" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// containerd is NRI's runtime side as containerd embeds it, serving socket through a proxy:
// stopping the runtime closes no plugin's connection (containerd's exit does), closing the
// proxy does.
type containerd struct {
	*adaptation.Adaptation
	proxy net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

// stop is containerd going away: the plugin's connection ends.
func (c *containerd) stop() {
	_ = c.proxy.Close()
	c.mu.Lock()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.mu.Unlock()
	c.Stop()
}

func startContainerd(t *testing.T, socket string) *containerd {
	t.Helper()
	dir := t.TempDir()
	inner := filepath.Join(dir, "nri.sock")
	r, err := adaptation.New("containerd", "test",
		func(ctx context.Context, synchronize adaptation.SyncCB) error {
			_, err := synchronize(ctx, nil, nil)
			return err
		},
		func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
			return nil, nil
		},
		adaptation.WithSocketPath(inner),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	c := &containerd{Adaptation: r}
	if c.proxy, err = net.Listen("unix", socket); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			conn, err := c.proxy.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", inner)
			if err != nil {
				_ = conn.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, conn, up)
			c.mu.Unlock()
			go func() { _, _ = io.Copy(up, conn); _ = up.Close() }()
			go func() { _, _ = io.Copy(conn, up); _ = conn.Close() }()
		}
	}()
	return c
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// get returns the status and body of url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// waitFor waits until url answers status with a body containing substr.
func waitFor(t *testing.T, url string, status int, substr string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "GET "+url, func() error {
		if code, body := get(t, url); code != status || !strings.Contains(body, substr) {
			return fmt.Errorf("%d %q, want %d with %q", code, body, status, substr)
		}
		return nil
	})
}

// TestRunIsReadyWhileRegistered: Run's /readyz answers 503 while nothing serves the NRI socket
// and while the runtime is gone, and 200 once the runtime (NRI's own runtime side, the one
// containerd embeds) has registered and synchronized the plugin, after a restart of the
// runtime too; /healthz answers 200 throughout. While registered, a sandbox the runtime starts
// is observed in the hook's histogram, which /metrics serves.
func TestRunIsReadyWhileRegistered(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "nri.sock")
	health, metrics := listen(t), listen(t)
	healthz, readyz := "http://"+health.Addr().String()+"/healthz", "http://"+health.Addr().String()+"/readyz"
	ifaces := &fakeInterfaces{inPlace: map[string]bool{}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Config: testConfig, Kube: &rest.Config{Host: fakeAPIServer(t).URL}, Socket: socket, Log: testr.New(t),
			HealthListener: health, MetricsListener: metrics, Interfaces: ifaces,
		})
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	}()

	waitFor(t, readyz, http.StatusServiceUnavailable, socket)
	if code, _ := get(t, healthz); code != http.StatusOK {
		t.Fatalf("/healthz = %d without containerd, want 200: the process serves", code)
	}

	r := startContainerd(t, socket)
	waitFor(t, readyz, http.StatusOK, "ok")

	before := processMetrics.count(t, outcomeAttached)
	if err := r.RunPodSandbox(ctx, &adaptation.RunPodSandboxRequest{Pod: sandbox("default", nil, true)}); err != nil {
		t.Fatalf("RunPodSandbox through the runtime: %v", err)
	}
	if got := processMetrics.count(t, outcomeAttached) - before; got != 1 {
		t.Fatalf("the runtime's RunPodSandbox was observed %d times, want once", got)
	}
	if _, body := get(t, "http://"+metrics.Addr().String()+"/metrics"); !strings.Contains(body, `octopus_nri_run_pod_sandbox_seconds_bucket{outcome="attached",le="0.1"}`) ||
		!strings.Contains(body, `octopus_nri_run_pod_sandbox_step_seconds_count{outcome="attached",step="attach"}`) {
		t.Fatalf("/metrics lacks the hook's histograms:\n%s", body)
	}

	r.stop()
	waitFor(t, readyz, http.StatusServiceUnavailable, "not registered")
	if code, _ := get(t, healthz); code != http.StatusOK {
		t.Fatalf("/healthz = %d while containerd is away, want 200", code)
	}

	r = startContainerd(t, socket)
	defer r.stop()
	waitFor(t, readyz, http.StatusOK, "ok")
}
