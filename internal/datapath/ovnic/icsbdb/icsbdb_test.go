package icsbdb

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/model"
)

// TestModelsAreFresh fails when the committed models differ from what modelgen makes of the
// installed IC SB schema: after an OVN upgrade, or a hand edit. It regenerates into a scratch
// directory and compares the file sets and every byte.
func TestModelsAreFresh(t *testing.T) {
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "hack", "ovn-ic-models.sh"), out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/ovn-ic-models.sh: %v\n%s", err, b)
	}
	generated := goFiles(t, out)
	inTree := goFiles(t, ".")
	if !slices.Equal(generated, inTree) {
		t.Fatalf("generated files %v, in the tree %v: run `go generate ./internal/datapath/ovnic/icsbdb`", generated, inTree)
	}
	for _, name := range generated {
		want, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `go generate ./internal/datapath/ovnic/icsbdb`", name)
		}
	}
	if len(generated) < 3 {
		t.Fatalf("only %d generated files; expected one per IC SB table and model.go", len(generated))
	}
}

// goFiles lists the generated Go files of dir: all but tests and the package doc.
func goFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") && n != "doc.go" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// TestModelMatchesSchema checks every generated model against the schema embedded with them,
// the same check the client makes against the server's schema when it connects.
func TestModelMatchesSchema(t *testing.T) {
	m, err := FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := model.NewDatabaseModel(Schema(), m); len(errs) > 0 {
		t.Fatalf("models do not match the schema: %v", errs)
	}
}
