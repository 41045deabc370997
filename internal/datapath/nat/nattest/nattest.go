// Package nattest holds what the tests of globalnet rulesets share (internal/datapath/nat's own,
// and those of the packages that build its State): the fake nftables' ruleset in a comparable
// form, and golden files of it. Only tests import it.
package nattest

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Dump is the fake's ruleset, one operation a line, with the elements sorted: their order is
// not part of the contract, while the order of the rules in a chain is (the fake already sorts
// tables, chains, sets and maps by name).
func Dump(fake *knftables.Fake) string {
	var objects, elements []string
	for _, line := range strings.Split(strings.TrimSpace(fake.Dump()), "\n") {
		if strings.HasPrefix(line, "add element ") {
			elements = append(elements, line)
		} else {
			objects = append(objects, line)
		}
	}
	slices.Sort(elements)
	return strings.Join(append(objects, elements...), "\n") + "\n"
}

// Golden compares got with testdata/name, which `go test -update` rewrites.
func Golden(t testing.TB, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil { //nolint:gosec // a golden file, read by everyone
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test -run %s -update` to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Fatalf("ruleset differs from %s:\n--- got\n%s--- want\n%s", path, got, want)
	}
}
