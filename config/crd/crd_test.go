package crd

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedFilesAreFresh fails when api/ changed without `make generate`: it regenerates
// every output into a scratch directory and compares byte for byte with the tree.
func TestGeneratedFilesAreFresh(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cg := os.Getenv("CONTROLLER_GEN")
	if cg == "" {
		cg = filepath.Join(root, "bin", "controller-gen")
	}
	if _, err := os.Stat(cg); err != nil {
		t.Fatalf("controller-gen not found at %s: run `make tools` (or set CONTROLLER_GEN)", cg)
	}
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "hack", "generate.sh"), cg, out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/generate.sh: %v\n%s", err, b)
	}
	checked := 0
	err = filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		want, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%s is generated but missing from the tree: run `make generate`", rel)
			return nil //nolint:nilerr // reported above; keep comparing the other files
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `make generate`", rel)
		}
		checked++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 6 {
		t.Fatalf("only %d generated files compared; expected deepcopy for 2 packages and 4 CRDs", checked)
	}
}

func TestEmbeddedCRDsDecode(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	hub, err := Hub()
	if err != nil {
		t.Fatal(err)
	}
	member, err := Member()
	if err != nil {
		t.Fatal(err)
	}
	if len(hub)+len(member) != len(all) {
		t.Fatalf("hub (%d) and member (%d) CRDs must cover all %d CRDs exactly", len(hub), len(member), len(all))
	}
	for _, c := range all {
		if c.Name == "" || len(c.Spec.Versions) == 0 {
			t.Errorf("CRD %q decoded without name or versions", c.Name)
		}
	}
}
