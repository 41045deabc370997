package memlimit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
)

// Cgroup is a memory cgroup below this process's own, with a limit: a place to run a process
// under a memory limit the way a container runtime does, for tests and benchmarks. Creating
// one needs root.
type Cgroup struct {
	// Dir is the cgroup's directory.
	Dir   string
	procs string
}

var cgroupSeq atomic.Int64

// NewCgroup creates a memory cgroup limited to limit bytes (cgroup v2, or v1's memory
// controller, whichever holds this process's memory).
func NewCgroup(limit int64) (*Cgroup, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("reading this process's cgroups: %w", err)
	}
	h, ok, err := memoryHierarchy(self)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("this process is in no memory cgroup: mount cgroup v2, or v1's memory controller")
	}
	dir := filepath.Join("/", h.mount, h.cgroup, fmt.Sprintf("octopus-%d-%d", os.Getpid(), cgroupSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating cgroup %s (needs root): %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, h.limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("setting the memory limit of cgroup %s: %w", dir, err)
	}
	return &Cgroup{Dir: dir, procs: filepath.Join(dir, "cgroup.procs")}, nil
}

// Command is exec.CommandContext for a process that starts inside the cgroup: a shell moves
// itself in and then becomes the program, so that nothing of it runs outside.
func (c *Cgroup) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, c.procs, name}, args...)...)
}

// Remove removes the cgroup, which must have no processes left.
func (c *Cgroup) Remove() error {
	if err := os.Remove(c.Dir); err != nil {
		return fmt.Errorf("removing cgroup %s: %w", c.Dir, err)
	}
	return nil
}
