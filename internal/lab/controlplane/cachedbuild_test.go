package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCachedBuild runs cachedBuild against small scripts: nothing runs when the output is
// there, a missing output is built, and a script that does not produce it, or is not there,
// is an error naming what is missing.
func TestCachedBuild(t *testing.T) {
	for _, tc := range []struct {
		name      string
		present   bool   // the output exists before the build
		script    string // the build script's body; "" means no script
		wantErr   string
		wantBuilt bool
	}{
		{name: "cached", present: true, script: "exit 1"},
		{name: "built", script: `touch "$OUT"`, wantBuilt: true},
		{name: "script builds nothing", script: "true", wantErr: "finished, but the build of the thing is incomplete"},
		{name: "script fails", script: "echo boom >&2; exit 3", wantErr: "exit status 3"},
		{name: "no script", wantErr: "build script not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, cache := t.TempDir(), t.TempDir()
			out := filepath.Join(cache, "out")
			t.Setenv("OUT", out)
			if tc.present {
				if err := os.WriteFile(out, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.script != "" {
				if err := os.WriteFile(filepath.Join(root, "build.sh"), []byte(tc.script+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			var progress strings.Builder
			err := cachedBuild(t.Context(), cachedBuildOptions{
				RepoRoot: root, Script: "build.sh", CacheDir: cache, What: "the thing",
				Missing: func() error {
					if _, err := os.Stat(out); err != nil {
						return fmt.Errorf("no %s", out)
					}
					return nil
				},
			}, &progress)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("cachedBuild = %v, want error containing %q", err, tc.wantErr)
			}
			if built := strings.Contains(progress.String(), "building the thing"); built != (tc.wantBuilt || tc.wantErr != "" && tc.script != "") {
				t.Errorf("progress %q: build ran = %v", progress.String(), built)
			}
		})
	}
}
