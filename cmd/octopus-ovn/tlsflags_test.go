package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/octopus-mcs/octopus/internal/pki"
)

// TestTLSFlags: ssl needs the three files and checks the endpoint's host; the files without
// ssl are refused rather than ignored.
func TestTLSFlags(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("t", 0)
	if err != nil {
		t.Fatal(err)
	}
	c, k, err := ca.Issue(pki.Leaf{CommonName: "ovnmaster", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"tls.crt": c, "tls.key": k, "ca.crt": pki.CertPEM(ca.Cert)}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	all := tlsFlags{db: "nb", privateKey: filepath.Join(dir, "tls.key"), cert: filepath.Join(dir, "tls.crt"), ca: filepath.Join(dir, "ca.crt")}
	for _, tc := range []struct {
		name     string
		f        tlsFlags
		endpoint string
		want     string // "" ok
		tls      bool
	}{
		{"ssl with files", all, "ssl:octopus-ovn-central.octopus-system.svc:6641", "", true},
		{"ssl without files", tlsFlags{db: "nb"}, "ssl:h:6641", "give --nb-private-key", false},
		{"ssl missing the CA", tlsFlags{db: "nb", privateKey: all.privateKey, cert: all.cert}, "ssl:h:6641", "give --nb-private-key", false},
		{"tcp with files", all, "tcp:h:6641", "apply only to --nb=ssl", false},
		{"unix", tlsFlags{db: "nb"}, "unix:/x", "", false},
		{"unreadable certificate", tlsFlags{db: "nb", privateKey: all.privateKey, cert: "/nonexistent", ca: all.ca}, "ssl:h:6641", "--nb-certificate", false},
	} {
		cfg, err := tc.f.clientConfig(tc.endpoint)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if (cfg != nil) != tc.tls {
			t.Errorf("%s: TLS config %v, want %v", tc.name, cfg != nil, tc.tls)
		} else if cfg != nil && cfg.ServerName != "octopus-ovn-central.octopus-system.svc" {
			t.Errorf("%s: server name %q", tc.name, cfg.ServerName)
		}
	}
}
