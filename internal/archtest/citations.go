package archtest

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

var (
	// outsideDocs are the design documents kept outside the repository; a comment citing
	// them cites nothing a reader of the code can open.
	outsideDocs = regexp.MustCompile(`\bDESIGN\b|\bSTYLE\.md\b`)
	// repoPath is a path from the repository's root with a file extension.
	repoPath = regexp.MustCompile(`\b(?:api|cmd|config|docs|hack|internal|pkg|test)/[A-Za-z0-9_./-]*\.(?:go|md|sh|yaml|yml|json|txt)\b`)
	// architectureSection is a citation of a section of docs/architecture.md.
	architectureSection = regexp.MustCompile(`docs/architecture\.md §([0-9]+[a-z]?)`)
	// sectionHeading is a section heading of docs/architecture.md: "## 6d. Gateways ...".
	sectionHeading = regexp.MustCompile(`(?m)^## ([0-9]+[a-z]?)\. `)
)

// CheckCitations reads the comments of every Go file under root (testdata left out) and
// reports those that cite a design document kept outside the repository, a file path that
// does not exist under root, or a section that docs/architecture.md does not have.
func CheckCitations(root string) ([]string, error) {
	sections := map[string]bool{}
	if doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md")); err == nil {
		for _, m := range sectionHeading.FindAllStringSubmatch(string(doc), -1) {
			sections[m[1]] = true
		}
	}
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != root && (name == "testdata" || name == "bin" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", p, err)
		}
		rel, _ := filepath.Rel(root, p)
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				where := fmt.Sprintf("%s:%d", rel, fset.Position(c.Pos()).Line)
				for _, m := range outsideDocs.FindAllString(c.Text, -1) {
					out = append(out, fmt.Sprintf("%s cites %s, a document outside the repository", where, m))
				}
				for _, m := range repoPath.FindAllString(c.Text, -1) {
					if _, err := os.Stat(filepath.Join(root, m)); err != nil {
						out = append(out, fmt.Sprintf("%s cites %s, which does not exist", where, m))
					}
				}
				for _, m := range architectureSection.FindAllStringSubmatch(c.Text, -1) {
					if !sections[m[1]] {
						out = append(out, fmt.Sprintf("%s cites docs/architecture.md §%s, which has no such section", where, m[1]))
					}
				}
			}
		}
		return nil
	})
	return out, err
}
