package testenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
)

func TestCIDRs(t *testing.T) {
	svc, pod := CIDRs(0)
	if svc.String() != "10.200.0.0/16" || pod.String() != "10.100.0.0/16" {
		t.Errorf("CIDRs(0) = %s, %s", svc, pod)
	}
	var all []string
	for i := range MaxClusters {
		svc, pod := CIDRs(i)
		for _, p := range []string{svc.String(), pod.String()} {
			for _, q := range all {
				if p == q {
					t.Fatalf("CIDRs(%d): %s used twice", i, p)
				}
			}
			all = append(all, p)
		}
		if svc.Overlaps(pod) {
			t.Errorf("CIDRs(%d) overlap: %s %s", i, svc, pod)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("CIDRs(MaxClusters) did not panic")
		}
	}()
	CIDRs(MaxClusters)
}

func TestFindModuleRoot(t *testing.T) {
	root := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "go.mod"), "// comment\nmodule "+modulePath+"\n\ngo 1.26.0\n")
	// A nested module (like hack/tools) must be skipped.
	write(filepath.Join(root, "hack", "tools", "go.mod"), "module example.com/tools\n")
	if err := os.MkdirAll(filepath.Join(root, "internal", "x"), 0o755); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, from string
		wantErr    bool
	}{
		{"root", root, false},
		{"package dir", filepath.Join(root, "internal", "x"), false},
		{"nested module", filepath.Join(root, "hack", "tools"), false},
		{"outside", filepath.Dir(root), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findModuleRoot(tt.from, modulePath)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("findModuleRoot(%s) = %s, want an error", tt.from, got)
				}
				return
			}
			if err != nil || got != root {
				t.Fatalf("findModuleRoot(%s) = %q, %v; want %s", tt.from, got, err, root)
			}
		})
	}
}

func TestRepoRoot(t *testing.T) {
	root := RepoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "hack", "k8s-binaries.sh")); err != nil {
		t.Errorf("RepoRoot = %s, which has no hack/k8s-binaries.sh: %v", root, err)
	}
}

// TestControlPlanes checks the helper's contract: named clusters with the documented CIDRs,
// and everything stopped when the test that asked for them ends.
func TestControlPlanes(t *testing.T) {
	var env *controlplane.Environment
	t.Run("inner", func(t *testing.T) {
		env = ControlPlanes(t, "alpha", "beta")
		for i, name := range []string{"alpha", "beta"} {
			cp := env.Cluster(name)
			if cp == nil {
				t.Fatalf("cluster %s missing", name)
			}
			svc, pod := CIDRs(i)
			if cp.ServiceCIDR != svc || cp.PodCIDR != pod {
				t.Errorf("%s: CIDRs %s %s, want %s %s", name, cp.ServiceCIDR, cp.PodCIDR, svc, pod)
			}
		}
	})
	if env == nil {
		t.FailNow()
	}
	// After the subtest's cleanups: processes stopped and the temporary dir removed.
	if _, err := os.Stat(env.Dir); !os.IsNotExist(err) {
		t.Errorf("state dir %s still exists after the test: %v", env.Dir, err)
	}
	for _, cp := range env.Clusters {
		host := strings.TrimPrefix(cp.URL, "https://")
		if conn, err := net.DialTimeout("tcp", host, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s: API server at %s still accepts connections", cp.Name, cp.URL)
		}
	}
}

func TestEventuallyReturnsOnceTheCheckHolds(t *testing.T) {
	calls := 0
	Eventually(t, 5*time.Second, "the third call", func() error {
		if calls++; calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("calls = %d, want 3", calls)
	}
}
