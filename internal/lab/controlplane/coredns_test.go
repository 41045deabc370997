package controlplane

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestCoreDNSVersions guards the CoreDNS cache path and pin: the Go constant, the build
// script and the wrapper module must name the same release.
func TestCoreDNSVersions(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	for _, tc := range []struct{ file, pattern string }{
		{coreDNSScript, `COREDNS_VERSION="(v[^"]+)"`},
		{"hack/coredns/go.mod", `github.com/coredns/coredns (v\S+)`},
	} {
		data, err := os.ReadFile(filepath.Join(root, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(tc.pattern).FindSubmatch(data)
		if m == nil {
			t.Errorf("no CoreDNS version in %s", tc.file)
			continue
		}
		if string(m[1]) != CoreDNSVersion {
			t.Errorf("%s pins CoreDNS %s, the Go constant says %s", tc.file, m[1], CoreDNSVersion)
		}
	}
	t.Setenv("OCTOPUS_CACHE", "/cache")
	if got, err := CoreDNSPath(); err != nil || got != "/cache/coredns-"+CoreDNSVersion+"/coredns" {
		t.Errorf("CoreDNSPath = %q, %v", got, err)
	}
}
