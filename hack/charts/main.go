// Command charts writes the generated files of the charts (internal/manifests/chartgen) under the
// directory given as its argument (charts/ by default); hack/generate.sh runs it.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/octopus-mcs/octopus/internal/manifests/chartgen"
)

func main() {
	dir := "charts"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	if err := write(dir); err != nil {
		fmt.Fprintln(os.Stderr, "charts:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	files, err := chartgen.Files()
	if err != nil {
		return err
	}
	for p, data := range files {
		out := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(out, data, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", out, err)
		}
	}
	return nil
}
