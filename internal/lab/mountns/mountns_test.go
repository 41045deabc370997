package mountns

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
		mounts []Bind
		want   []string
		errHas string
	}{
		{"existing target", []Bind{{Src: file, Target: "/etc/hosts"}},
			[]string{"bind", file, "/etc/hosts"}, ""},
		{"read-only", []Bind{{Src: dir, Target: "/etc", ReadOnly: true}},
			[]string{"bind", dir, "/etc", "ro", "/etc"}, ""},
		{"missing directory under /etc, after the overlay", []Bind{
			{Src: file, Target: "/etc/hosts"},
			{Src: dir, Target: "/etc/octopus-lab-unit-test/conf"},
		}, []string{
			"tmpfs", scratch,
			"mkdir", scratch + "/u0", "mkdir", scratch + "/w0", "overlay", "/etc", scratch + "/u0", scratch + "/w0",
			"bind", file, "/etc/hosts",
			"mkdir", "/etc/octopus-lab-unit-test/conf", "bind", dir, "/etc/octopus-lab-unit-test/conf",
		}, ""},
		{"missing file", []Bind{{Src: file, Target: "/etc/octopus-lab-unit-test.conf"}}, []string{
			"tmpfs", scratch,
			"mkdir", scratch + "/u0", "mkdir", scratch + "/w0", "overlay", "/etc", scratch + "/u0", scratch + "/w0",
			"touch", "/etc/octopus-lab-unit-test.conf", "bind", file, "/etc/octopus-lab-unit-test.conf",
		}, ""},
		{"never the root", []Bind{{Src: dir, Target: "/octopus-lab-unit-test"}}, nil, "no directory above it but /"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Ops(tc.mounts, scratch)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err = %v, want one with %q", err, tc.errHas)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Ops = %q, %v\nwant %q", got, err, tc.want)
			}
		})
	}
	// /var/run is a symlink to /run on Debian: the overlay goes on its target.
	if real, err := filepath.EvalSymlinks("/var/run"); err == nil && real == "/run" {
		got, err := Ops([]Bind{{Src: dir, Target: "/var/run/secrets/kubernetes.io/serviceaccount"}}, scratch)
		if err != nil || !slices.Contains(got, "overlay") || got[slices.Index(got, "overlay")+1] != "/run" {
			t.Errorf("service account mount: %q, %v; want an overlay of /run", got, err)
		}
	}
}
