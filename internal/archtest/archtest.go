// Package archtest checks the repository's dependency rules (docs/architecture.md §2) against
// what `go list` reports, so that a forbidden import fails a test instead of waiting for a
// reviewer. Rules lists them; Check applies them to any module, which is how the test proves
// on a fixture that each rule catches what it forbids. CheckCitations keeps comments citing
// only what the repository holds.
package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
)

// Package is one package of a module as `go list` reports it, test files left out: what the
// package's binary links.
type Package struct {
	ImportPath string
	// Imports are the packages it imports directly.
	Imports []string
	// Deps are every package it links, directly or not.
	Deps []string
	// Error is why go list could not load the package; its imports are then incomplete.
	Error *struct{ Err string }
}

// A Rule forbids some packages of the module to depend on others. Patterns are import paths,
// relative to the module when their first element has no dot ("internal/lab"), absolute
// otherwise ("k8s.io/client-go"); a trailing "/..." also matches every package below, and
// "..." alone is every package of the module.
type Rule struct {
	// Name says what the rule keeps apart, for the failure message.
	Name string
	// Packages are the packages the rule applies to, minus Except.
	Packages, Except []string
	// Forbidden are the packages they must not import, minus Allowed.
	Forbidden, Allowed []string
	// Linked forbids linking them at all (Deps), not just importing them directly (Imports).
	Linked bool
}

// Violation is a package that breaks a rule.
type Violation struct {
	Rule, Package, Import string
	// Linked tells that Package links Import without importing it directly.
	Linked bool
}

func (v Violation) String() string {
	switch {
	case v.Import == "":
		return fmt.Sprintf("%s: %s", v.Rule, v.Package)
	case v.Linked:
		return fmt.Sprintf("%s: %s links %s", v.Rule, v.Package, v.Import)
	}
	return fmt.Sprintf("%s: %s imports %s", v.Rule, v.Package, v.Import)
}

// Load lists the packages of the module in dir with `go list`.
func Load(dir string) (module string, pkgs []Package, err error) {
	out, err := goList(dir, "-m", "-f", "{{.Path}}")
	if err != nil {
		return "", nil, err
	}
	module = strings.TrimSpace(string(out))
	out, err = goList(dir, "-e", "-json=ImportPath,Imports,Deps,Error", "./...")
	if err != nil {
		return "", nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", nil, fmt.Errorf("decoding go list output: %w", err)
		}
		if p.Error != nil {
			return "", nil, fmt.Errorf("go list cannot load %s, so its imports are unknown: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	return module, pkgs, nil
}

func goList(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s in %s: %w\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return out, nil
}

// Check applies rules to the packages of module. A rule that applies to no package is a
// violation too: after a move its patterns must follow the code, not silently match nothing.
func Check(module string, pkgs []Package, rules []Rule) []Violation {
	var out []Violation
	for _, r := range rules {
		matched := false
		for _, p := range pkgs {
			if !matchAny(module, r.Packages, p.ImportPath) || matchAny(module, r.Except, p.ImportPath) {
				continue
			}
			matched = true
			imports := p.Imports
			if r.Linked {
				imports = p.Deps
			}
			for _, imp := range imports {
				if matchAny(module, r.Forbidden, imp) && !matchAny(module, r.Allowed, imp) {
					out = append(out, Violation{Rule: r.Name, Package: strings.TrimPrefix(p.ImportPath, module+"/"), Import: imp,
						Linked: !slices.Contains(p.Imports, imp)})
				}
			}
		}
		if !matched {
			out = append(out, Violation{Rule: r.Name, Package: "no package matches " + strings.Join(r.Packages, ", ")})
		}
	}
	slices.SortFunc(out, func(a, b Violation) int { return strings.Compare(a.String(), b.String()) })
	return out
}

func matchAny(module string, patterns []string, path string) bool {
	for _, pat := range patterns {
		if match(module, pat, path) {
			return true
		}
	}
	return false
}

// match reports whether the import path matches pattern (see Rule).
func match(module, pattern, path string) bool {
	if first, _, _ := strings.Cut(pattern, "/"); first == "..." || !strings.Contains(first, ".") {
		pattern = module + "/" + pattern
	}
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == tree || strings.HasPrefix(path, tree+"/")
	}
	return path == pattern
}
