package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A command only parses flags and wires (docs/architecture.md §2): it turns its flags into a
// package's options, checks them, and calls that package's Run. Work done in package main is
// work no other package can reuse and that only a test of the built binary can reach, which is
// how cmd/octopus-echo came to hold a whole server and cmd/octopus-agent the host firewall's
// lifecycle. "Only wires" cannot be checked exactly, so CheckCommands checks the three marks
// that work leaves in a command and wiring does not:
//
//   - concurrency: a `go` statement, a `select`, a channel send or receive. A command that
//     starts or waits on concurrent work is running a component, not handing it its options.
//   - serving: a reference to commandForbidden (net, net/http, os/exec). Listening, serving and
//     running processes belong to a package with tests; a command that must open a listener
//     before it starts (so that a taken port fails the start) calls the package that does,
//     such as internal/metricsserver.
//   - size: a function of more than MaxCommandStatements statements, flag definitions not
//     counted (one line per flag is the command's job however many flags there are). The
//     longest function that only checks flags today, octopus-agent gateway's complete, has
//     about 30; the limit leaves room for a few more checks, and a function that outgrows it
//     holds logic a package should own and test.
//
// These are not all the ways a command can do too much (a long chain of ifs that decides
// things stays possible under the limit), but each mark found so far in the tree was one of
// them, and a reviewer can argue with a raised limit in a diff more easily than with a
// convention nobody checks.
var commandForbidden = []string{"net", "net/http", "os/exec"}

// MaxCommandStatements is the size limit of a function in cmd/* (see above).
const MaxCommandStatements = 40

// flagDefinition is the method name of a call that defines or binds flags: pflag's and flag's
// StringVar, BoolVarP, ..., cobra's MarkFlagRequired and AddCommand, AddGoFlagSet, BindFlags.
var flagDefinition = regexp.MustCompile(`^(\w+VarP?|MarkFlag\w*|MarkPersistentFlag\w*|Add(Go)?FlagSet|AddCommand|BindFlags)$`)

// CheckCommands reports what in the non-test Go files of root/cmd/* is more than wiring (see
// above), one line per finding: file:line and what was found.
func CheckCommands(root string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, "cmd", "*", "*.go"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no Go files under %s/cmd", root)
	}
	var out []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, file, src, 0)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", file, err)
		}
		rel, _ := filepath.Rel(root, file)
		at := func(n ast.Node) string { return fmt.Sprintf("%s:%d", rel, fset.Position(n.Pos()).Line) }
		forbidden := map[string]string{} // local name → import path
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !slices.Contains(commandForbidden, path) {
				continue
			}
			name := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			forbidden[name] = path
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				out = append(out, at(n)+": starts a goroutine")
			case *ast.SelectStmt:
				out = append(out, at(n)+": selects on channels")
			case *ast.SendStmt:
				out = append(out, at(n)+": sends on a channel")
			case *ast.UnaryExpr:
				if n.Op == token.ARROW {
					out = append(out, at(n)+": receives from a channel")
				}
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && forbidden[id.Name] != "" {
					out = append(out, fmt.Sprintf("%s: uses %s.%s (%s serves or runs processes: call a package that does)", at(n), id.Name, n.Sel.Name, forbidden[id.Name]))
				}
			case *ast.FuncDecl:
				if n.Body != nil {
					if c := countStatements(n.Body); c > MaxCommandStatements {
						out = append(out, fmt.Sprintf("%s: %s has %d statements besides flag definitions, more than %d: move its logic into a package", at(n), n.Name.Name, c, MaxCommandStatements))
					}
				}
			}
			return true
		})
	}
	slices.Sort(out)
	return out, nil
}

// countStatements counts the statements in body, nested ones and those of function literals
// included (a cobra RunE belongs to the constructor that writes it), blocks and flag
// definitions not.
func countStatements(body *ast.BlockStmt) int {
	n := 0
	ast.Inspect(body, func(node ast.Node) bool {
		s, ok := node.(ast.Stmt)
		if !ok {
			return true
		}
		if _, block := s.(*ast.BlockStmt); block {
			return true
		}
		if isFlagDefinition(s) {
			return false
		}
		n++
		return true
	})
	return n
}

func isFlagDefinition(s ast.Stmt) bool {
	var call ast.Expr
	switch s := s.(type) {
	case *ast.ExprStmt:
		call = s.X
	case *ast.AssignStmt: // _ = cmd.MarkFlagRequired("x")
		if len(s.Rhs) == 1 {
			call = s.Rhs[0]
		}
	}
	c, ok := call.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	return ok && flagDefinition.MatchString(sel.Sel.Name)
}
