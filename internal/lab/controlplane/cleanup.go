package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/octopus-mcs/octopus/internal/procfs"
)

// markerFile marks a state directory as created by Start. CleanupStale deletes only
// directories that carry it (or are empty), so a mistyped Dir never wipes unrelated files.
const markerFile = ".octopus-controlplane"

// Subdirectories of the state directory.
const (
	pidsDir     = "pids"
	logsDir     = "logs"
	etcdDataDir = "etcd"
	clustersDir = "clusters"
)

// staleKillTimeout bounds how long CleanupStale waits for a killed process to disappear.
const staleKillTimeout = 10 * time.Second

// CleanupStale kills processes a crashed earlier run left behind under dir and removes dir. It
// finds them by the pidfiles in dir/pids and kills a PID only if /proc/<pid>/cmdline refers to
// a path inside dir, so a PID the kernel has since reused for an unrelated process is never
// touched. A missing dir is not an error. It refuses to delete a non-empty dir that Start did
// not create. Do not call it on the Dir of a running Environment: use Environment.Stop.
func CleanupStale(dir string) error {
	if dir == "" {
		return errors.New("cleaning up control-plane state: no directory given")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("cleaning up control-plane state in %s: %w", dir, err)
	}
	if resolved, err := filepath.EvalSymlinks(dir); err == nil {
		dir = resolved // Start passes canonical paths to its children
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cleaning up control-plane state in %s: %w", dir, err)
	}
	if len(entries) == 0 {
		return removeDir(dir)
	}
	if _, err := os.Stat(filepath.Join(dir, markerFile)); err != nil {
		return fmt.Errorf("refusing to delete %s: it is not empty and has no %s, so it was not created by controlplane.Start", dir, markerFile)
	}

	if err := killStale(dir); err != nil {
		return err
	}
	return removeDir(dir)
}

// killStale kills every process named by a pidfile under dir/pids whose command line refers
// to dir, waits for all of them to go away and removes the pidfiles.
func killStale(dir string) error {
	pidfiles, err := filepath.Glob(filepath.Join(dir, pidsDir, "*.pid"))
	if err != nil {
		return fmt.Errorf("listing pidfiles in %s: %w", dir, err)
	}
	var errs []error
	var killed []int
	for _, pf := range pidfiles {
		pid, err := readPidfile(pf)
		if err != nil {
			// A crash while writing leaves an empty pidfile; its child died with us
			// (Pdeathsig) and there is no PID to look for.
			continue
		}
		if !cmdlineRefersTo(pid, dir) {
			continue // gone, a zombie, or an unrelated process that reused the PID
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("killing stale process %d from %s: %w", pid, pf, err))
			continue
		}
		killed = append(killed, pid)
	}
	deadline := time.Now().Add(staleKillTimeout)
	for _, pid := range killed {
		for procfs.Alive(pid) {
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("stale process %d under %s is still alive %s after SIGKILL", pid, dir, staleKillTimeout))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cleaning up stale processes under %s: %w", dir, errors.Join(errs...))
	}
	for _, pf := range pidfiles {
		_ = os.Remove(pf)
	}
	return nil
}

func readPidfile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading pidfile: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("pidfile %s holds %q, not a process ID", path, bytes.TrimSpace(b))
	}
	return pid, nil
}

// cmdlineRefersTo reports whether an argument of process pid is dir or a path inside it (also
// as the value of a --flag=path). Every child Start runs has such an argument (its data dir,
// certificates or kubeconfig), which is what makes a pidfile's PID trustworthy.
func cmdlineRefersTo(pid int, dir string) bool {
	args, err := procfs.Cmdline(pid)
	return err == nil && argsReferTo(args, dir)
}

// argsReferTo is the pure part of cmdlineRefersTo.
func argsReferTo(args []string, dir string) bool {
	dir = filepath.Clean(dir)
	for _, a := range args {
		if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "-") {
			a = v
		}
		if a == dir || strings.HasPrefix(a, dir+"/") {
			return true
		}
	}
	return false
}

func removeDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing control-plane state %s: %w", dir, err)
	}
	return nil
}
