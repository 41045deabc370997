package hubaccess

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

func jwt(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(claims)) + ".sig"
}

func TestTokenTimes(t *testing.T) {
	tests := []struct {
		name            string
		token           string
		issued, expires int64
		err             string
	}{
		{"bound token", jwt(`{"iat":1000,"exp":87400,"sub":"system:serviceaccount:octopus-hub:cluster-east"}`), 1000, 87400, ""},
		{"legacy token without expiry", jwt(`{"sub":"system:serviceaccount:octopus-hub:octopus-join"}`), 0, 0, ""},
		{"not a JWT", "opaque", 0, 0, "not a JWT"},
		{"claims not base64url", "a.!!.c", 0, 0, "decoding"},
		{"claims not JSON", "a." + base64.RawURLEncoding.EncodeToString([]byte("{")) + ".c", 0, 0, "decoding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			issued, expires, err := TokenTimes(tt.token)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if issued.Unix() != tt.issued || (tt.expires == 0) != expires.IsZero() || (tt.expires != 0 && expires.Unix() != tt.expires) {
				t.Errorf("TokenTimes = %s, %s; want %d, %d", issued, expires, tt.issued, tt.expires)
			}
		})
	}
}

// TestLiveSendsCurrentToken: a client built once from Live sends whatever token Live holds at
// the time of each request.
func TestLiveSendsCurrentToken(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37"}`))
	}))
	defer srv.Close()
	live := NewLive(Credential{ClusterID: "east", Server: srv.URL, Namespace: "octopus-hub", Token: "first"})
	cfg := live.RESTConfig()
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	get := func() {
		if _, err := dc.ServerVersion(); err != nil {
			t.Fatal(err)
		}
	}
	get()
	live.setToken("second")
	get()
	if len(got) != 2 || got[0] != "Bearer first" || got[1] != "Bearer second" {
		t.Errorf("Authorization headers %q, want the token held at each request", got)
	}
}
