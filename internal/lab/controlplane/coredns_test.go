package controlplane

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestPinnedVersions guards the cache paths and pins of the binaries built by scripts of their
// own: each Go constant, build script and wrapper module must name the same release.
func TestPinnedVersions(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	for _, tc := range []struct {
		what, version string
		pins          []struct{ file, pattern string }
	}{
		{"CoreDNS", CoreDNSVersion, []struct{ file, pattern string }{
			{coreDNSScript, `COREDNS_VERSION="(v[^"]+)"`},
			{"hack/coredns/go.mod", `github.com/coredns/coredns (v\S+)`},
		}},
		{"containerd", ContainerdVersion, []struct{ file, pattern string }{
			{containerdScript, `CONTAINERD_VERSION="(v[^"]+)"`},
			{"hack/k8s/containerd/go.mod", `github.com/containerd/containerd/v2 (v\S+)`},
		}},
		{"flannel", FlannelVersion, []struct{ file, pattern string }{
			{flannelScript, `FLANNEL_VERSION="(v[^"]+)"`},
			{"hack/k8s/flannel/go.mod", `github.com/flannel-io/flannel (v\S+)`},
		}},
	} {
		for _, pin := range tc.pins {
			data, err := os.ReadFile(filepath.Join(root, pin.file))
			if err != nil {
				t.Fatal(err)
			}
			m := regexp.MustCompile(pin.pattern).FindSubmatch(data)
			if m == nil {
				t.Errorf("no %s version in %s", tc.what, pin.file)
				continue
			}
			if string(m[1]) != tc.version {
				t.Errorf("%s pins %s %s, the Go constant says %s", pin.file, tc.what, m[1], tc.version)
			}
		}
	}
	t.Setenv("OCTOPUS_CACHE", "/cache")
	if got, err := CoreDNSPath(); err != nil || got != "/cache/coredns-"+CoreDNSVersion+"/coredns" {
		t.Errorf("CoreDNSPath = %q, %v", got, err)
	}
	if got, err := ContainerdBinDir(); err != nil || got != "/cache/containerd-"+ContainerdVersion+"/bin" {
		t.Errorf("ContainerdBinDir = %q, %v", got, err)
	}
	if got, err := FlannelBinDir(); err != nil || got != "/cache/flannel-"+FlannelVersion+"/bin" {
		t.Errorf("FlannelBinDir = %q, %v", got, err)
	}
}
