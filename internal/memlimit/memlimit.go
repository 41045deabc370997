// Package memlimit gives the Go runtime a soft memory limit below the memory limit of the
// cgroup the process runs in (a container's limits.memory, a systemd unit's MemoryMax), so that
// the garbage collector works harder as the heap nears the limit instead of letting it grow to
// twice the live heap and the kernel kill the process. Go does this for GOMAXPROCS and CPU
// quotas, not for memory; Prometheus 3, among others, does the same by default.
package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultRatio is the share of the cgroup's limit the heap may use: the rest is for what the
// runtime does not count (goroutine stacks are counted, but not the binary, thread stacks of
// cgo, or memory the kernel charges to the cgroup, like page cache of files the process reads).
const DefaultRatio = 0.9

// unlimited is what cgroup v1 reports as no limit (the largest page-aligned int64); anything
// at or above it means none.
const unlimited = math.MaxInt64 &^ 4095

// Set sets the runtime's soft memory limit to ratio of the process's cgroup memory limit, the
// smallest of its cgroup and every ancestor's. It does nothing, and returns 0, when GOMEMLIMIT
// is set (the runtime already applied it: an explicit setting wins) or when there is no limit.
// It returns the limit it set, in bytes.
func Set(ratio float64) (int64, error) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	if ratio <= 0 || ratio > 1 {
		return 0, fmt.Errorf("memory limit ratio %g: must be in (0, 1]", ratio)
	}
	limit, err := CgroupLimit(os.DirFS("/"))
	if err != nil || limit == 0 {
		return 0, err
	}
	soft := int64(float64(limit) * ratio)
	debug.SetMemoryLimit(soft)
	return soft, nil
}

// CgroupLimit returns the memory limit that applies to the process in bytes, 0 for none, from
// /proc/self/cgroup and the cgroup file systems under /sys/fs/cgroup in root (cgroup v2's
// unified hierarchy, or v1's memory controller).
func CgroupLimit(root fs.FS) (int64, error) {
	self, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return 0, fmt.Errorf("reading the process's cgroups: %w", err)
	}
	h, ok, err := memoryHierarchy(self)
	if err != nil || !ok {
		return 0, err
	}
	return smallestLimit(root, h.mount, h.cgroup, h.limitFile)
}

// hierarchy is where the process's memory cgroup is: the mount (relative to /) of the cgroup
// file system that holds the memory controller, the process's cgroup in it, and the name of
// its limit and peak-usage files.
type hierarchy struct{ mount, cgroup, limitFile, peakFile string }

// memoryHierarchy finds the hierarchy with the memory controller from /proc/self/cgroup; ok is
// false when the process is in none.
func memoryHierarchy(procSelfCgroup []byte) (h hierarchy, ok bool, err error) {
	v1, v2, err := parseProcCgroup(procSelfCgroup)
	switch {
	case err != nil:
		return hierarchy{}, false, err
	case v1 != "": // a hybrid system lists both; the memory controller is in v1 then
		return hierarchy{"sys/fs/cgroup/memory", v1, "memory.limit_in_bytes", "memory.max_usage_in_bytes"}, true, nil
	case v2 != "":
		return hierarchy{"sys/fs/cgroup", v2, "memory.max", "memory.peak"}, true, nil
	}
	return hierarchy{}, false, nil
}

// parseProcCgroup returns the process's cgroup path in the v1 memory hierarchy and in the v2
// unified hierarchy ("" where it is not in one) from /proc/self/cgroup, whose lines are
// "<id>:<controllers>:<path>" (v2's with id 0 and no controllers).
func parseProcCgroup(b []byte) (v1Memory, v2 string, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), ":", 3)
		if len(fields) != 3 {
			return "", "", fmt.Errorf("/proc/self/cgroup: unexpected line %q", sc.Text())
		}
		switch {
		case fields[0] == "0" && fields[1] == "":
			v2 = fields[2]
		case containsController(fields[1], "memory"):
			v1Memory = fields[2]
		}
	}
	return v1Memory, v2, sc.Err()
}

func containsController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// smallestLimit returns the smallest limit in file of cgroup and its ancestors under mount,
// 0 if none has one. Limits nest: a process is held to the tightest on its way to the root.
// Directories that do not exist are skipped: inside a container with a cgroup namespace the
// path reads "/" and the container's own cgroup is the mount's root.
func smallestLimit(root fs.FS, mount, cgroup, file string) (int64, error) {
	var smallest int64
	for dir := path.Clean("/" + cgroup); ; dir = path.Dir(dir) {
		b, err := fs.ReadFile(root, path.Join(mount, dir, file))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return 0, fmt.Errorf("reading the cgroup memory limit: %w", err)
		default:
			v := strings.TrimSpace(string(b))
			if v != "max" {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("%s in cgroup %s: %q is not a number of bytes", file, dir, v)
				}
				if n > 0 && n < unlimited && (smallest == 0 || n < smallest) {
					smallest = n
				}
			}
		}
		if dir == "/" {
			return smallest, nil
		}
	}
}
