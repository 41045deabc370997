package realnode

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/octopus-mcs/octopus/internal/procfs"
)

// CgroupPrefix starts the name of the top-level cgroup of every lab (in each cgroup
// hierarchy): /octopus-lab-<lab ID>, with one cgroup per node below it. containerd (and so
// every shim it starts) and the kubelet's pods live there, which is how `lab down` finds
// every process of a real node, also after `lab up` was killed: the pods' processes are in
// network namespaces only containerd knows and are no children of the lab's.
const CgroupPrefix = "octopus-lab-"

// LabCgroup is the cgroup path of the lab with the given ID.
func LabCgroup(labID string) string { return "/" + CgroupPrefix + labID }

// nodeCgroup is the cgroup of one node: the kubelet's cgroupRoot.
func nodeCgroup(labID, node string) string { return LabCgroup(labID) + "/" + node }

// cgroupMounts lists the mount points of the host's cgroup hierarchies (v1 and v2).
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("listing cgroup hierarchies: %w", err)
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "36 31 0:33 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory"
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if fstype := fields[sep+1]; fstype == "cgroup" || fstype == "cgroup2" {
			mounts = append(mounts, fields[4])
		}
	}
	return mounts, sc.Err()
}

// ensureCgroup makes path in every hierarchy. A new cpuset cgroup starts with no CPUs and no
// memory nodes, so nothing could join it: each level gets its parent's.
func ensureCgroup(path string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		dir := m
		for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("creating cgroup %s: %w", dir, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(parent, f))
				if err != nil {
					continue // not the cpuset hierarchy
				}
				if cur, _ := os.ReadFile(filepath.Join(dir, f)); strings.TrimSpace(string(cur)) != "" {
					continue
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return fmt.Errorf("setting %s of cgroup %s: %w", f, dir, err)
				}
			}
		}
	}
	return nil
}

// Cgroups lists the directories of the lab's cgroup in every hierarchy that has it: what
// RemoveCgroups deletes.
func Cgroups(labID string) ([]string, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, m := range mounts {
		dir := filepath.Join(m, LabCgroup(labID))
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			dirs = append(dirs, dir)
		}
	}
	return dirs, nil
}

// CgroupProcesses lists the processes in the lab's cgroups (any hierarchy, any depth).
func CgroupProcesses(labID string) ([]int, error) {
	return cgroupProcesses(labID, func(string) bool { return true })
}

// PodProcesses lists the processes of the pod with the given UID on the lab's real nodes:
// those in the pod's cgroup, which the kubelet's cgroupfs driver names pod<UID> (below the
// node's kubepods/<QoS class>), and in its containers' cgroups below it.
func PodProcesses(labID, podUID string) ([]int, error) {
	podDir := string(filepath.Separator) + "pod" + podUID
	return cgroupProcesses(labID, func(dir string) bool {
		return strings.HasSuffix(dir, podDir) || strings.Contains(dir, podDir+string(filepath.Separator))
	})
}

// cgroupProcesses lists the processes in those of the lab's cgroups (any hierarchy, any
// depth) whose directory match accepts.
func cgroupProcesses(labID string, match func(dir string) bool) ([]int, error) {
	dirs, err := Cgroups(labID)
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	var pids []int
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // removed meanwhile
				}
				return err
			}
			if !e.IsDir() || !match(path) {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil //nolint:nilerr // a cgroup removed while walking
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] && procfs.Alive(pid) {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing the processes of cgroup %s: %w", d, err)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

// KillCgroupProcesses SIGKILLs every process in the lab's cgroups until none is left, or
// fails after timeout. Frozen cgroups are thawed first, and again while killing: runc freezes a
// container's cgroup while it signals the container's processes, and a runc killed in between
// (as lab down kills everything) leaves it FROZEN, where a SIGKILL stays pending for ever
// (the process shows state D).
func KillCgroupProcesses(labID string, timeout time.Duration) error {
	return procfs.KillUntilGone(func() ([]int, error) {
		if err := thawCgroups(labID); err != nil {
			return nil, err
		}
		return CgroupProcesses(labID)
	}, "in cgroup "+LabCgroup(labID), timeout)
}

// thawCgroups sets every frozen cgroup of the lab's in the freezer hierarchy (cgroup v1)
// THAWED.
func thawCgroups(labID string) error {
	dirs, err := Cgroups(labID)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return nil // removed meanwhile
			case err != nil:
				return err
			case !e.IsDir():
				return nil
			}
			state := filepath.Join(path, "freezer.state")
			b, err := os.ReadFile(state)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return nil // not the freezer hierarchy, or removed meanwhile
			case err != nil:
				return fmt.Errorf("reading %s: %w", state, err)
			case strings.TrimSpace(string(b)) == "THAWED":
				return nil
			}
			if err := os.WriteFile(state, []byte("THAWED"), 0o644); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("thawing cgroup %s: %w", path, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// RemoveCgroups deletes the lab's cgroups, deepest first; stop their processes first
// (KillCgroupProcesses). A cgroup whose last process has just died may stay busy for a
// moment, so each removal is retried briefly. Missing cgroups are not an error.
func RemoveCgroups(labID string) error {
	dirs, err := Cgroups(labID)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		var all []string
		_ = filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				all = append(all, path)
			}
			return nil
		})
		slices.SortFunc(all, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
		for _, c := range all {
			errs = append(errs, rmdirRetry(c))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing the cgroups of lab %s: %w", labID, err)
	}
	return nil
}

func rmdirRetry(dir string) error {
	var err error
	for range 50 {
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", dir, err)
}
