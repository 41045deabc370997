package memlimit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
)

// Cgroup is a memory cgroup below this process's own, with a limit: a place to run a process
// under a memory limit the way a container runtime does, for tests and benchmarks. Creating
// one needs root.
type Cgroup struct {
	// Dir is the cgroup's directory.
	Dir   string
	procs string
	peak  string
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
	return &Cgroup{Dir: dir, procs: filepath.Join(dir, "cgroup.procs"), peak: filepath.Join(dir, h.peakFile)}, nil
}

// Command is exec.CommandContext for a process that starts inside the cgroup: a shell moves
// itself in and then becomes the program, so that nothing of it runs outside.
func (c *Cgroup) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, c.procs, name}, args...)...)
}

// Peak returns the most memory the cgroup's processes were charged at once, in bytes: what a
// pod's limits.memory is enforced against, unlike a process's VmHWM, which counts file pages
// charged elsewhere and misses those charged here to no process's RSS.
func (c *Cgroup) Peak() (int64, error) {
	b, err := os.ReadFile(c.peak)
	if err != nil {
		return 0, fmt.Errorf("reading the peak memory of cgroup %s: %w", c.Dir, err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", c.peak, err)
	}
	return n, nil
}

// Remove removes the cgroup, which must have no processes left.
func (c *Cgroup) Remove() error {
	if err := os.Remove(c.Dir); err != nil {
		return fmt.Errorf("removing cgroup %s: %w", c.Dir, err)
	}
	return nil
}
