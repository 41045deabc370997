package archtest

import "testing"

// TestPackageMapIsTrue: docs/architecture.md's package map lists every package of the module,
// only packages of the module, and for each exactly the repository packages it imports.
func TestPackageMapIsTrue(t *testing.T) {
	bad, err := CheckRepositoryPackageMap("../..")
	reportEach(t, bad, err)
}

// TestPackageMapCatchesDrift: a package added without its line, a line left after its package
// went, and imports that changed are each reported, with the line to write.
func TestPackageMapCatchesDrift(t *testing.T) {
	const mod = "example.com/m"
	doc := []byte("# Doc\n\nprose | with a bar\n\n" +
		"| package | imports (repository packages) | what it is |\n" +
		"|---|---|---|\n" +
		"| `api/v1alpha1` | — | types |\n" +
		"| `gateway` | `api/v1alpha1`, `kube` | the gateway |\n" +
		"| `gone` | — | moved away |\n" +
		"| `cmd/x` | `gateway` | a command |\n" +
		"\nafter the table\n")
	m, err := ParsePackageMap(doc)
	if err != nil {
		t.Fatal(err)
	}
	pkgs := []Package{
		{ImportPath: mod + "/api/v1alpha1", Imports: []string{"fmt"}},
		{ImportPath: mod + "/internal/gateway", Imports: []string{mod + "/api/v1alpha1", "k8s.io/api/core/v1"}},
		{ImportPath: mod + "/cmd/x", Imports: []string{mod + "/internal/gateway"}},
		{ImportPath: mod + "/internal/kube", Imports: []string{mod + "/api/v1alpha1"}},
	}
	wantFindings(t, "CheckPackageMap", CheckPackageMap(mod, pkgs, m), nil, []string{
		"gateway imports `api/v1alpha1`, the package map says `api/v1alpha1`, `kube`; write: | `gateway` | `api/v1alpha1` | <what it is> |",
		"kube has no line in the package map; add: | `kube` | `api/v1alpha1` | <what it is> |",
		"the package map lists gone, which is no package of the module",
	})
}

func TestParsePackageMapNeedsTheTable(t *testing.T) {
	if _, err := ParsePackageMap([]byte("# Doc\n\n| other | table |\n|---|---|\n")); err == nil {
		t.Error("ParsePackageMap found a package map in a document without one")
	}
}
