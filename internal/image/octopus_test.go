package image

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestOctopus: the project's image has the daemons, the nft program the data plane drives with
// its libraries, and a shell; not the CLI; and it needs a tag.
func TestOctopus(t *testing.T) {
	for _, p := range []string{"busybox", "nft", "ldd"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (hack/install-deps.sh): %v", p, err)
		}
	}
	// Any dynamic program stands in for the binaries.
	stand, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(stand)
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, b := range OctopusBinaries {
		if err := os.WriteFile(filepath.Join(bin, b), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Octopus(OctopusOptions{BinDir: bin}); err == nil {
		t.Error("an image without a tag was accepted")
	}
	spec, err := Octopus(OctopusOptions{BinDir: bin, Tags: []string{OctopusRepo + ":v9.9.9"}})
	if err != nil {
		t.Fatal(err)
	}
	nft, _ := exec.LookPath("nft")
	nft, _ = filepath.Abs(nft)
	have := map[string]bool{}
	libnftables := false
	for _, f := range spec.Files {
		have[f.Path] = true
		libnftables = libnftables || filepath.Base(f.Path) == "libnftables.so.1"
	}
	for _, p := range []string{"/usr/local/bin/octopus-agent", "/usr/local/bin/octopus-dns", "/usr/local/bin/octopus-echo", nft, "/bin/sh"} {
		if !have[p] {
			t.Errorf("the image lacks %s", p)
		}
	}
	if have["/usr/local/bin/octopus"] {
		t.Error("the image has the CLI")
	}
	if !libnftables {
		t.Error("the image lacks nft's libnftables")
	}
	if _, err := Build(spec); err != nil {
		t.Errorf("building the image: %v", err)
	}
}

// TestOVN: the secondary network's image has octopus-ovn, every OVS and OVN program its pods
// run with their libraries, the schemas their databases are made from, and a shell; not the
// agent; and it needs a tag.
func TestOVN(t *testing.T) {
	for _, p := range append(slices.Sorted(maps.Keys(OVNPrograms)), "busybox", "ldd") {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (hack/install-deps.sh): %v", p, err)
		}
	}
	stand, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(stand)
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, b := range append(OVNBinaries, DaemonBinaries...) {
		if err := os.WriteFile(filepath.Join(bin, b), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := OVN(OVNOptions{BinDir: bin}); err == nil {
		t.Error("an image without a tag was accepted")
	}
	spec, err := OVN(OVNOptions{BinDir: bin, Tags: []string{OVNRepo + ":v9.9.9"}})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	libs := map[string]bool{}
	for _, f := range spec.Files {
		have[f.Path] = true
		libs[filepath.Base(f.Path)] = true
	}
	want := []string{"/usr/local/bin/octopus-ovn", "/bin/sh",
		"/usr/share/openvswitch/vswitch.ovsschema", "/usr/share/ovn/ovn-nb.ovsschema", "/usr/share/ovn/ovn-sb.ovsschema",
		"/usr/share/ovn/ovn-ic-nb.ovsschema", "/usr/share/ovn/ovn-ic-sb.ovsschema"}
	for _, p := range slices.Sorted(maps.Keys(OVNPrograms)) {
		path, _ := exec.LookPath(p)
		path, _ = filepath.Abs(path)
		want = append(want, path)
	}
	for _, p := range want {
		if !have[p] {
			t.Errorf("the image lacks %s", p)
		}
	}
	for _, b := range DaemonBinaries {
		if have["/usr/local/bin/"+b] {
			t.Errorf("the image has %s, which is the project image's", b)
		}
	}
	// OVS's own library: the programs are dynamic, so without their libraries none starts.
	if !libs["libcrypto.so.3"] {
		t.Errorf("the image lacks the OVS programs' libraries (libcrypto.so.3)")
	}
	if _, err := Build(spec); err != nil {
		t.Errorf("building the image: %v", err)
	}
}
