package lab_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/octopus-mcs/octopus/internal/lab/images"
)

// projectCommands are built once per test binary (builtCommands) into one directory that
// every lab test of this run shares: a lab test used to build its own set into a fresh
// directory, which cost a link of each binary per test and, since the image cache keyed on
// the files' paths, a new project image and a new pull on every node.
var projectCommands struct {
	once sync.Once
	dir  string
	err  error
	// sets are the per-set directories buildCommands made, by their sorted names.
	mu   sync.Mutex
	sets map[string]string
}

// cleanupBuiltCommands removes what the run built; TestMain calls it after the tests.
func cleanupBuiltCommands() {
	if projectCommands.dir != "" {
		_ = os.RemoveAll(filepath.Dir(projectCommands.dir))
	}
}

// buildAllCommands builds every command of the module (./cmd/...) into one directory, once
// per test binary. -trimpath makes the binaries the same bytes in every checkout, so the
// content-keyed image cache (internal/image) serves a clean clone's run what an earlier
// run built.
func buildAllCommands() (string, error) {
	projectCommands.once.Do(func() {
		root, err := os.MkdirTemp("", "octopus-lab-bin-")
		if err != nil {
			projectCommands.err = err
			return
		}
		dir := filepath.Join(root, "all")
		cmd := exec.Command("go", "build", "-trimpath", "-o", dir+string(filepath.Separator), "github.com/octopus-mcs/octopus/cmd/...")
		if out, err := cmd.CombinedOutput(); err != nil {
			projectCommands.err = fmt.Errorf("building the project's commands: %w\n%s", err, out)
			return
		}
		projectCommands.dir = dir
	})
	return projectCommands.dir, projectCommands.err
}

// buildCommands returns the paths of the named commands of this module, with every binary of
// the project's images (images.OctopusBinaries) beside them: the lab's real nodes run its pods
// from those images, which the lab builds from the agent binary's directory, and builds the
// OVN image only when that directory holds its binaries (images.HasOVNBinaries).
func buildCommands(t testing.TB, names ...string) map[string]string {
	t.Helper()
	for _, b := range images.OctopusBinaries {
		if !slices.Contains(names, b) {
			names = append(names, b)
		}
	}
	return commandSet(t, names...)
}

// commandSet returns the paths of exactly the named commands in a directory holding only them,
// one directory per set, of hard links to the binaries built once (buildAllCommands).
func commandSet(t testing.TB, names ...string) map[string]string {
	t.Helper()
	all, err := buildAllCommands()
	if err != nil {
		t.Fatal(err)
	}
	names = slices.Sorted(slices.Values(names))
	names = slices.Compact(names)
	key := strings.Join(names, ",")

	projectCommands.mu.Lock()
	defer projectCommands.mu.Unlock()
	dir, ok := projectCommands.sets[key]
	if !ok {
		dir, err = os.MkdirTemp(filepath.Dir(all), "set-")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if err := linkOrCopy(filepath.Join(all, n), filepath.Join(dir, n)); err != nil {
				t.Fatalf("command %s: %v", n, err)
			}
		}
		if projectCommands.sets == nil {
			projectCommands.sets = map[string]string{}
		}
		projectCommands.sets[key] = dir
	}
	paths := map[string]string{}
	for _, n := range names {
		paths[n] = filepath.Join(dir, n)
	}
	return paths
}

// linkOrCopy hard-links src to dst, or copies it where a link cannot be made.
func linkOrCopy(src, dst string) error {
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
