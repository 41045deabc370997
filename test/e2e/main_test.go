// Package e2e drives the real octopus and octopus-agent binaries against real control planes,
// as a user would.
package e2e

import (
	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binDir holds octopus and octopus-agent built from this tree for the run.
var binDir string

func TestMain(m *testing.M) {
	// The test's own clients log nothing worth reading; failures are reported through t.
	log.SetLogger(logr.Discard())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "octopus-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "github.com/octopus-mcs/octopus/cmd/octopus", "github.com/octopus-mcs/octopus/cmd/octopus-agent")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the binaries under test:", err)
		return 1
	}
	binDir = dir
	return m.Run()
}
