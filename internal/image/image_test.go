package image

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
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

// TestEnsureKeysOnContent reuses the tarball for the same files built elsewhere and later, as
// each lab test run builds the project's binaries into a directory of its own, and makes a
// new one when only a file's permission bits change.
func TestEnsureKeysOnContent(t *testing.T) {
	spec, src := testSpec(t)
	cache := t.TempDir()
	path, err := Ensure(cache, spec)
	if err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "tool-copy")
	if err := os.WriteFile(elsewhere, content, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(elsewhere, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	moved := spec
	moved.Files = slices.Clone(spec.Files)
	moved.Files[0].Source = elsewhere
	if again, err := Ensure(cache, moved); err != nil || again != path {
		t.Errorf("Ensure of the same content at another path and time = %s, %v; want the cached %s", again, err, path)
	}
	if err := os.Chmod(elsewhere, 0o700); err != nil {
		t.Fatal(err)
	}
	if rebuilt, err := Ensure(cache, moved); err != nil || rebuilt == path {
		t.Errorf("Ensure after a mode change = %s, %v; want a new tarball", rebuilt, err)
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
