// Package x cites what it should and what it should not.
package x

// Good: docs/architecture.md §6b, internal/x/x.go.
// Bad: the design (DESIGN §5), the style guide (STYLE.md §6), docs/architecture.md §9, and
// internal/x/gone.go.
const X = 1
