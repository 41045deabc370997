package kube

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestWaitForServerOnReads checks, on real loopback sockets, that a GET to a server that is
// not listening yet waits for it and gets its answer, while a POST fails at once and a GET
// whose context ends fails then, naming the refused dial.
func TestWaitForServerOnReads(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // refused until the server below starts
	hc, err := rest.HTTPClientFor(WaitForServerOnReads(&rest.Config{Host: "http://" + addr}))
	if err != nil {
		t.Fatal(err)
	}

	post, err := http.NewRequest(http.MethodPost, "http://"+addr+"/", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(post)
	if err == nil {
		resp.Body.Close()
	}
	if !isDialError(err) {
		t.Fatalf("POST to a closed port: %v, want a dial error at once", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	get, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	resp, err = hc.Do(get)
	if err == nil {
		resp.Body.Close()
	}
	if err == nil || time.Since(sent) < 250*time.Millisecond || !isDialError(err) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("GET to a closed port with a 300ms deadline: %v after %s, want an error at the deadline that names the refused dial", err, time.Since(sent))
	}

	type result struct {
		body string
		err  error
	}
	done := make(chan result, 1)
	begin := time.Now()
	go func() {
		resp, err := hc.Get("http://" + addr + "/")
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- result{string(b), err}
	}()
	time.Sleep(500 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("GET returned before the server listened: %+v", r)
	default:
	}
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on %s again: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "back") })}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	select {
	case r := <-done:
		if r.err != nil || r.body != "back" {
			t.Fatalf("GET once the server listened: %q, %v", r.body, r.err)
		}
		t.Logf("GET answered %.2fs after it was sent, once the server listened", time.Since(begin).Seconds())
	case <-time.After(10 * time.Second):
		t.Fatal("GET did not complete within 10s of the server listening")
	}
}
