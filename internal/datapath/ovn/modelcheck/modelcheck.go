// Package modelcheck holds the tests every package of generated OVN models runs (nbdb, sbdb,
// icsbdb): that the committed files are what hack/ovn-models.sh makes of the installed schema,
// and that the models match the schema embedded with them.
package modelcheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// Fresh fails t when the generated files of the package in the current directory (a package
// directory, as `go test` runs in) differ from what `hack/ovn-models.sh db` makes: after an
// OVN upgrade, or a hand edit. It regenerates into a scratch directory and compares the file
// sets and every byte. root is the repository's root, relative to the package.
func Fresh(t *testing.T, root, db string) {
	t.Helper()
	root, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(root, pkg)
	if err != nil {
		t.Fatal(err)
	}
	regenerate := "`go generate ./" + filepath.ToSlash(rel) + "`"
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "hack", "ovn-models.sh"), db, out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/ovn-models.sh %s: %v\n%s", db, err, b)
	}
	generated, inTree := goFiles(t, out), goFiles(t, ".")
	if !slices.Equal(generated, inTree) {
		t.Fatalf("generated files %v, in the tree %v: run %s", generated, inTree, regenerate)
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
			t.Errorf("%s is stale: run %s", name, regenerate)
		}
	}
	if len(generated) < 3 {
		t.Fatalf("only %d generated files; expected one per table and model.go", len(generated))
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

// MatchesSchema checks every generated model against the schema embedded with them, the same
// check a client makes against the server's schema when it connects.
func MatchesSchema(t *testing.T, schema ovsdb.DatabaseSchema, full func() (model.ClientDBModel, error)) {
	t.Helper()
	m, err := full()
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := model.NewDatabaseModel(schema, m); len(errs) > 0 {
		t.Fatalf("models do not match the schema: %v", errs)
	}
}
