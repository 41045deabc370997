package nodeagent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMountOps checks the operations the mount namespace's holder runs: existing targets
// are bound directly; a missing one is made under an overlay of its nearest existing
// ancestor (symlinks resolved, overlays first); the root is never overlaid.
func TestMountOps(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	scratch := filepath.Join(dir, "scratch")
	for _, tc := range []struct {
		name   string
		mounts []bindMount
		want   []string
		errHas string
	}{
		{"existing target", []bindMount{{src: file, target: "/etc/hosts"}},
			[]string{"bind", file, "/etc/hosts"}, ""},
		{"read-only", []bindMount{{src: dir, target: "/etc", readOnly: true}},
			[]string{"bind", dir, "/etc", "ro", "/etc"}, ""},
		{"missing directory under /etc, after the overlay", []bindMount{
			{src: file, target: "/etc/hosts"},
			{src: dir, target: "/etc/octopus-lab-unit-test/conf"},
		}, []string{
			"tmpfs", scratch,
			"mkdir", scratch + "/u0", "mkdir", scratch + "/w0", "overlay", "/etc", scratch + "/u0", scratch + "/w0",
			"bind", file, "/etc/hosts",
			"mkdir", "/etc/octopus-lab-unit-test/conf", "bind", dir, "/etc/octopus-lab-unit-test/conf",
		}, ""},
		{"missing file", []bindMount{{src: file, target: "/etc/octopus-lab-unit-test.conf"}}, []string{
			"tmpfs", scratch,
			"mkdir", scratch + "/u0", "mkdir", scratch + "/w0", "overlay", "/etc", scratch + "/u0", scratch + "/w0",
			"touch", "/etc/octopus-lab-unit-test.conf", "bind", file, "/etc/octopus-lab-unit-test.conf",
		}, ""},
		{"never the root", []bindMount{{src: dir, target: "/octopus-lab-unit-test"}}, nil, "no directory above it but /"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mountOps(tc.mounts, scratch)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err = %v, want one with %q", err, tc.errHas)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("mountOps = %q, %v\nwant %q", got, err, tc.want)
			}
		})
	}
	// /var/run is a symlink to /run on Debian: the overlay goes on its target.
	if real, err := filepath.EvalSymlinks("/var/run"); err == nil && real == "/run" {
		got, err := mountOps([]bindMount{{src: dir, target: "/var/run/secrets/kubernetes.io/serviceaccount"}}, scratch)
		if err != nil || !slices.Contains(got, "overlay") || got[slices.Index(got, "overlay")+1] != "/run" {
			t.Errorf("service account mount: %q, %v; want an overlay of /run", got, err)
		}
	}
}

func TestWriteVolume(t *testing.T) {
	dir := t.TempDir()
	if err := writeVolume(dir, map[string][]byte{"a": []byte("1"), "sub/b": []byte("2")}); err != nil {
		t.Fatal(err)
	}
	if err := writeVolume(dir, map[string][]byte{"a": []byte("changed")}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "a")); string(got) != "changed" {
		t.Errorf("a = %q, want changed", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Errorf("sub was not removed with its key: %v", err)
	}
	if err := writeVolume(dir, map[string][]byte{"../escape": nil}); err == nil {
		t.Error("a path leaving the volume was accepted")
	}
}
