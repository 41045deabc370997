package images

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// entry is what a test checks of one tar entry.
type entry struct {
	Name     string
	Type     byte
	Mode     int64
	Linkname string
	Content  string
}

// layerEntries reads the single layer of img.
func layerEntries(t *testing.T, img v1.Image) []entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var entries []entry
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		}
		if err != nil {
			t.Fatal(err)
		}
		if !hdr.ModTime.Equal(time.Unix(0, 0)) || hdr.Uid != 0 || hdr.Gid != 0 {
			t.Errorf("%s: time %s, owner %d:%d; want epoch and root", hdr.Name, hdr.ModTime, hdr.Uid, hdr.Gid)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, entry{Name: hdr.Name, Type: hdr.Typeflag, Mode: hdr.Mode, Linkname: hdr.Linkname, Content: string(b)})
	}
}

func testSpec(t *testing.T) (Spec, string) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho hi\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	return Spec{
		Refs: []string{"example.org/lab/tool:1", "example.org/lab/tool:latest"},
		Files: []File{
			{Path: "/usr/bin/tool", Source: src},
			{Path: "/etc/tool.conf", Data: []byte("a=1\n")},
			{Path: "/bin/t", Link: "/usr/bin/tool"},
			{Path: "/etc/tool.conf", Data: []byte("a=2\n"), Mode: 0o600}, // the later entry wins
		},
		Entrypoint: []string{"/usr/bin/tool"},
		Cmd:        []string{"--flag"},
		Env:        []string{"PATH=/usr/bin"},
		WorkingDir: "/",
	}, src
}

func TestBuild(t *testing.T) {
	spec, _ := testSpec(t)
	img, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []entry{
		{Name: "bin/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "bin/t", Type: tar.TypeSymlink, Mode: 0o777, Linkname: "/usr/bin/tool"},
		{Name: "etc/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "etc/tool.conf", Type: tar.TypeReg, Mode: 0o600, Content: "a=2\n"},
		{Name: "usr/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "usr/bin/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "usr/bin/tool", Type: tar.TypeReg, Mode: 0o750, Content: "#!/bin/sh\necho hi\n"},
	}
	if diff := cmp.Diff(want, layerEntries(t, img)); diff != "" {
		t.Errorf("layer (-want +got):\n%s", diff)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/usr/bin/tool"}, cfg.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint: %s", diff)
	}
	if diff := cmp.Diff([]string{"--flag"}, cfg.Config.Cmd); diff != "" {
		t.Errorf("cmd: %s", diff)
	}
	if cfg.OS != "linux" || cfg.Architecture == "" || !cfg.Created.Equal(time.Unix(0, 0)) || !slices.Equal(cfg.Config.Env, spec.Env) {
		t.Errorf("config: os %q arch %q created %s env %v", cfg.OS, cfg.Architecture, cfg.Created, cfg.Config.Env)
	}
}

func TestBuildIsReproducible(t *testing.T) {
	spec, src := testSpec(t)
	digest := func() v1.Hash {
		t.Helper()
		img, err := Build(spec)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := digest()
	// Host file times do not reach the image; content does.
	if err := os.Chtimes(src, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if again := digest(); again != first {
		t.Errorf("same content, new mtime: digest %s, then %s", first, again)
	}
	if err := os.WriteFile(src, []byte("changed"), 0o750); err != nil {
		t.Fatal(err)
	}
	if changed := digest(); changed == first {
		t.Errorf("changed content kept digest %s", first)
	}
}

func TestBuildRefusesBadSpecs(t *testing.T) {
	for name, spec := range map[string]Spec{
		"no name":       {Files: []File{{Path: "/a", Data: []byte("a")}}},
		"relative path": {Refs: []string{"x:1"}, Files: []File{{Path: "a", Data: []byte("a")}}},
		"root entry":    {Refs: []string{"x:1"}, Files: []File{{Path: "/"}}},
		"missing file":  {Refs: []string{"x:1"}, Files: []File{{Path: "/a", Source: "/nonexistent/file"}}},
	} {
		if _, err := Build(spec); err == nil {
			t.Errorf("%s: Build succeeded", name)
		}
	}
}

// TestEnsure writes a tarball that reads back under every name, reuses it while the inputs
// are unchanged and makes a new one when a source file changes.
func TestEnsure(t *testing.T) {
	spec, src := testSpec(t)
	cache := t.TempDir()
	path, err := Ensure(cache, spec)
	if err != nil {
		t.Fatal(err)
	}
	built, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := built.Digest()
	for _, ref := range spec.Refs {
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(path, &tag)
		if err != nil {
			t.Fatalf("reading %s from %s: %v", ref, path, err)
		}
		if got, _ := img.Digest(); got != want {
			t.Errorf("%s in the tarball has digest %s, want %s", ref, got, want)
		}
	}
	again, err := Ensure(cache, spec)
	if err != nil || again != path {
		t.Errorf("Ensure again = %s, %v; want the cached %s", again, err, path)
	}
	if err := os.WriteFile(src, []byte("v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	rebuilt, err := Ensure(cache, spec)
	if err != nil || rebuilt == path {
		t.Errorf("Ensure after a source changed = %s, %v; want a new tarball", rebuilt, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the tarball of the old inputs is still there: %v", err)
	}
}

func TestParseLdd(t *testing.T) {
	out := `	linux-vdso.so.1 (0x00007ffd)
	libresolv.so.2 => /lib/x86_64-linux-gnu/libresolv.so.2 (0x00007f74)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f74)
	/lib64/ld-linux-x86-64.so.2 (0x00007f74)
`
	got, err := parseLdd(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/lib/x86_64-linux-gnu/libresolv.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseLdd (-want +got):\n%s", diff)
	}
	if _, err := parseLdd("libfoo.so.1 => not found\n"); err == nil {
		t.Error("a missing library was not reported")
	}
}

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
	for _, b := range OctopusBinaries {
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
		OctopusDNSImage, "ghcr.io/octopus-mcs/octopus-dns:v9.9.9"} {
		if !slices.Contains(refs, want) {
			t.Errorf("the catalog has no %s: %v", want, refs)
		}
	}
}

// TestRegistry pushes a tarball's image under both its tags and reads it back as a container
// runtime would through the mirror path HostsTOML configures.
func TestRegistry(t *testing.T) {
	spec, _ := testSpec(t)
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
	for _, tag := range []string{"1", "latest"} {
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
