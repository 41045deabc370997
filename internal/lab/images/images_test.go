package images

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/octopus-mcs/octopus/internal/image"
)

// TestCatalog builds the lab's workload images from this machine's files: each has its
// programs and their loader, and the toolbox has every tool.
func TestCatalog(t *testing.T) {
	for _, p := range []string{"busybox", "socat", "ldd", "nc", "curl", "wget", "dig", "nslookup", "ping"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (hack/install-deps.sh): %v", p, err)
		}
	}
	// Any dynamic program stands in for CoreDNS, which hack/coredns.sh builds.
	coredns, err := exec.LookPath("socat")
	if err != nil {
		t.Fatal(err)
	}
	specs, err := Catalog(CatalogOptions{CoreDNSBinary: coredns})
	if err != nil {
		t.Fatal(err)
	}
	byRef := map[string]Spec{}
	for _, s := range specs {
		for _, r := range s.Refs {
			byRef[r] = s
		}
	}
	for ref, paths := range map[string][]string{
		PauseImage:    {"/bin/sleep", "/bin/busybox"},
		BusyboxImage:  {"/bin/sh", "/bin/busybox"},
		BusyboxLatest: {"/bin/sh"},
		SocatImage:    {"/usr/bin/socat", "/bin/sh"},
		ToolboxPinned: {"/bin/sh"},
		ToolboxImage:  {"/usr/bin/nc", "/usr/bin/curl", "/usr/bin/wget", "/usr/bin/dig", "/usr/bin/nslookup", "/usr/bin/ping", "/bin/sh"},
		CoreDNSImage:  {"/coredns"},
	} {
		s, ok := byRef[ref]
		if !ok {
			t.Errorf("no image %s", ref)
			continue
		}
		have := map[string]bool{}
		loader := false
		for _, f := range s.Files {
			have[f.Path] = true
			loader = loader || filepath.Base(filepath.Dir(f.Path)) == "lib64"
		}
		for _, p := range paths {
			if !have[p] {
				t.Errorf("%s lacks %s", ref, p)
			}
		}
		if !loader {
			t.Errorf("%s has no dynamic loader, so its dynamic programs cannot start", ref)
		}
	}
	if _, err := Build(byRef[ToolboxImage]); err != nil {
		t.Errorf("building the toolbox: %v", err)
	}

	// The project's images, tagged latest and with the version join deploys.
	bin := t.TempDir()
	for _, b := range slices.Concat(OctopusBinaries, image.OVNBinaries) {
		data, err := os.ReadFile(coredns)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, b), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	specs, err = Catalog(CatalogOptions{CoreDNSBinary: coredns, OctopusBinDir: bin, Version: "v9.9.9"})
	if err != nil {
		t.Fatal(err)
	}
	refs := Refs(specs)
	for _, want := range []string{OctopusRepo + ":latest", OctopusRepo + ":v9.9.9", EchoImage, "ghcr.io/octopus-mcs/echo:v9.9.9",
		OctopusDNSImage, "ghcr.io/octopus-mcs/octopus-dns:v9.9.9", OVNRepo + ":latest", OVNRepo + ":v9.9.9"} {
		if !slices.Contains(refs, want) {
			t.Errorf("the catalog has no %s: %v", want, refs)
		}
	}
}

// TestRegistry pushes a tarball's image under both its tags, tags it once more (Tag) and reads it back as a container
// runtime would through the mirror path HostsTOML configures.
func TestRegistry(t *testing.T) {
	spec := Spec{Refs: []string{"example.org/lab/tool:1", "example.org/lab/tool:latest"}, Files: []File{{Path: "/etc/tool.conf", Data: []byte("a=1\n")}}}
	path, err := Ensure(t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := StartRegistry(ln, t.TempDir())
	defer r.Close()
	if err := r.Push(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	hosts, err := RegistryHosts([]Spec{spec, {Refs: []string{"busybox", "registry.k8s.io/pause:3.10.2"}}})
	if diff := cmp.Diff([]string{"docker.io", "example.org", "registry.k8s.io"}, hosts); diff != "" || err != nil {
		t.Errorf("RegistryHosts (-want +got), %v:\n%s", err, diff)
	}
	img, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if err := r.Tag(context.Background(), "example.org/lab/tool:1", "2"); err != nil {
		t.Fatal(err)
	}
	if err := r.Tag(context.Background(), "example.org/lab/tool:9", "10"); err == nil {
		t.Error("tagging an image the registry does not hold succeeded")
	}
	for _, tag := range []string{"1", "latest", "2"} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+r.Addr+"/v2/example.org/lab/tool/manifests/"+tag, nil)
		req.Header.Set("Accept", "application/vnd.docker.distribution.manifest.v2+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != want.String() {
			t.Errorf("manifest %s: %s, digest %q; want 200 and %s", tag, resp.Status, resp.Header.Get("Docker-Content-Digest"), want)
		}
	}
	toml, err := HostsTOML("docker.io", "198.51.100.241:5000")
	if err != nil || !strings.Contains(toml, `server = "http://198.51.100.241:5000/v2/docker.io"`) || !strings.Contains(toml, "override_path = true") {
		t.Errorf("HostsTOML = %q, %v", toml, err)
	}
	if _, err := HostsTOML("bad\nhost", "x"); err == nil {
		t.Error("a bad host was accepted")
	}
}
