package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCheckListen(t *testing.T) {
	tests := []struct {
		addr        string
		allowRemote bool
		wantErr     string
	}{
		{addr: "127.0.0.1:8080"},
		{addr: "127.0.0.2:0"},
		{addr: "[::1]:8080"},
		{addr: "localhost:8080"},
		{addr: "0.0.0.0:8080", wantErr: "not a loopback address"},
		{addr: ":8080", wantErr: "not a loopback address"},
		{addr: "[::]:8080", wantErr: "not a loopback address"},
		{addr: "192.168.1.10:8080", wantErr: "pass --allow-remote"},
		{addr: "example.com:8080", wantErr: "not a loopback address"},
		{addr: "0.0.0.0:8080", allowRemote: true},
		{addr: "8080", wantErr: "want HOST:PORT"},
	}
	for _, tt := range tests {
		err := CheckListen(tt.addr, tt.allowRemote)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("CheckListen(%q, %v): %v", tt.addr, tt.allowRemote, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("CheckListen(%q, %v) = %v, want an error with %q", tt.addr, tt.allowRemote, err, tt.wantErr)
		}
	}
}

func TestHandler(t *testing.T) {
	var collections atomic.Int32
	s := &Server{Refresh: time.Hour, Collect: func(context.Context) Snapshot {
		collections.Add(1)
		return healthy()
	}}
	h := s.Handler()
	get := func(host, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}

	for _, tt := range []struct {
		host, path string
		code       int
		body       string
	}{
		{"127.0.0.1:8080", "/", http.StatusOK, `<script src="app.js"`},
		{"localhost:8080", "/app.js", http.StatusOK, "api/view"},
		{"[::1]:8080", "/style.css", http.StatusOK, "--connected"},
		{"127.0.0.1:8080", "/api/view", http.StatusOK, `"from":"east","to":"west","state":"Connected"`},
		// A rebound name pointing at 127.0.0.1 must not read the view.
		{"attacker.example:8080", "/api/view", http.StatusMisdirectedRequest, "not a loopback address"},
		{"attacker.example", "/", http.StatusMisdirectedRequest, "--allow-remote"},
		{"127.0.0.1:8080", "/nothing", http.StatusNotFound, ""},
	} {
		rec := get(tt.host, tt.path)
		if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.body) {
			t.Errorf("GET %s (Host %s): %d %.300q, want %d with %q", tt.path, tt.host, rec.Code, rec.Body.String(), tt.code, tt.body)
		}
		if rec.Code == http.StatusOK && !strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tt.path, rec.Header().Get("Content-Security-Policy"))
		}
	}

	rec := get("127.0.0.1", "/api/view")
	var v View
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || len(v.Clusters) != 2 {
		t.Fatalf("view %+v: %v", v, err)
	}
	if n := collections.Load(); n != 1 {
		t.Errorf("%d collections within one refresh interval, want 1", n)
	}

	s.AllowRemote = true
	if rec := get("dashboard.example:8080", "/api/view"); rec.Code != http.StatusOK {
		t.Errorf("with AllowRemote: %d", rec.Code)
	}
}
