package archtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The package map is the table of docs/architecture.md §2 that tells a newcomer what each
// package is and what it imports. A table in prose goes stale silently (the one before it left
// out about 19 packages), so CheckPackageMap holds it to go list: the header below marks it,
// the first column names the package, the second lists exactly the repository packages it
// imports. Names are module-relative paths with "internal/" left out, as the table says.
const packageMapHeader = "| package | imports"

// CheckRepositoryPackageMap checks the package map of root/docs/architecture.md against the
// module in root (CheckPackageMap).
func CheckRepositoryPackageMap(root string) ([]string, error) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		return nil, err
	}
	m, err := ParsePackageMap(doc)
	if err != nil {
		return nil, fmt.Errorf("docs/architecture.md: %w", err)
	}
	module, pkgs, err := Load(root)
	if err != nil {
		return nil, err
	}
	return CheckPackageMap(module, pkgs, m), nil
}

// PackageMap is the package map: each package's short name and the short names of the
// repository packages it imports, as the document states them.
type PackageMap map[string][]string

// ParsePackageMap reads the package map out of a markdown document: the rows of the first
// table whose header starts with packageMapHeader. Cells hold names in backquotes, separated by
// commas; "—" is no import.
func ParsePackageMap(doc []byte) (PackageMap, error) {
	m := PackageMap{}
	in, found := false, false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case !in && !found && strings.HasPrefix(line, packageMapHeader):
			in, found = true, true
			continue
		case !in:
			continue
		case !strings.HasPrefix(line, "|"):
			in = false
			continue
		case strings.HasPrefix(line, "|---"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 2 {
			return nil, fmt.Errorf("package map row %q has no imports column", line)
		}
		name := unquote(cells[0])
		if _, dup := m[name]; dup {
			return nil, fmt.Errorf("package map lists %s twice", name)
		}
		var imports []string
		for _, c := range strings.Split(cells[1], ",") {
			if c = unquote(c); c != "" && c != "—" {
				imports = append(imports, c)
			}
		}
		slices.Sort(imports)
		m[name] = imports
	}
	if !found {
		return nil, fmt.Errorf("no table headed %q", packageMapHeader)
	}
	return m, sc.Err()
}

func unquote(cell string) string { return strings.Trim(strings.TrimSpace(cell), "`") }

// ShortName is how the package map names a package of module: its path from the module's root
// with a leading "internal/" left out, since nearly every package is under internal/ and the
// table is read by people.
func ShortName(module, path string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
	return strings.TrimPrefix(rel, "internal/")
}

// CheckPackageMap compares the package map with the packages of module: a package without its
// line, a line without its package, and a line whose imports differ from the package's. The
// imports must match exactly, not only be allowed: a reader takes the column as what the
// package depends on, so a stale entry misleads as much as a missing one. Each message says
// the line to write.
func CheckPackageMap(module string, pkgs []Package, m PackageMap) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range pkgs {
		name := ShortName(module, p.ImportPath)
		if seen[name] {
			out = append(out, fmt.Sprintf("two packages have the short name %s; the package map cannot tell them apart", name))
		}
		seen[name] = true
		var actual []string
		for _, imp := range p.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				actual = append(actual, ShortName(module, imp))
			}
		}
		slices.Sort(actual)
		stated, ok := m[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s has no line in the package map; add: %s", name, row(name, actual)))
		case !slices.Equal(stated, actual):
			out = append(out, fmt.Sprintf("%s imports %s, the package map says %s; write: %s", name, list(actual), list(stated), row(name, actual)))
		}
	}
	for name := range m {
		if !seen[name] {
			out = append(out, fmt.Sprintf("the package map lists %s, which is no package of the module", name))
		}
	}
	slices.Sort(out)
	return out
}

func list(names []string) string {
	if len(names) == 0 {
		return "—"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "`" + n + "`"
	}
	return strings.Join(q, ", ")
}

func row(name string, imports []string) string {
	return fmt.Sprintf("| `%s` | %s | <what it is> |", name, list(imports))
}
