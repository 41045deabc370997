package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Versions built by hack/k8s-binaries.sh when KUBE_VERSION and ETCD_VERSION are not set. They
// must equal the script's defaults (a test checks) because they name the cache directory.
const (
	KubernetesVersion = "v1.37.1"
	EtcdVersion       = "v3.6.5"
	// BuildRevision names how the script builds them (its BUILD_REV; r2 stamps the version
	// ldflags), so that a changed build gets a cache directory of its own instead of reusing
	// binaries built the old way.
	BuildRevision = "r2"
)

// buildScript is the script that builds the binaries, relative to the repository root.
const buildScript = "hack/k8s-binaries.sh"

// Binary names in the bin directory.
const (
	binEtcd              = "etcd"
	binAPIServer         = "kube-apiserver"
	binControllerManager = "kube-controller-manager"
	binScheduler         = "kube-scheduler"
	binKubeProxy         = "kube-proxy"
	binKubectl           = "kubectl"
)

// Binaries lists every binary the script builds. kube-proxy and kubectl are not started by this
// package but the lab needs them, so a bin directory without them is incomplete.
var Binaries = []string{binEtcd, binAPIServer, binControllerManager, binScheduler, binKubeProxy, binKubectl}

// cacheDir is the root of the binary cache that the build scripts under hack/ write:
// $OCTOPUS_CACHE, else ~/.cache/octopus.
func cacheDir() (string, error) {
	if cache := os.Getenv("OCTOPUS_CACHE"); cache != "" {
		return cache, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding the binary cache: set OCTOPUS_CACHE or HOME: %w", err)
	}
	return filepath.Join(home, ".cache", "octopus"), nil
}

// DefaultBinDir returns the directory hack/k8s-binaries.sh builds into, computed from the same
// environment variables the script reads (OCTOPUS_CACHE, KUBE_VERSION, ETCD_VERSION, HOME) and
// its BUILD_REV.
func DefaultBinDir() (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	kube := envOr("KUBE_VERSION", KubernetesVersion)
	etcd := envOr("ETCD_VERSION", EtcdVersion)
	return filepath.Join(cache, fmt.Sprintf("k8s-%s-etcd-%s-%s", kube, etcd, BuildRevision), "bin"), nil
}

// EnsureBinaries returns the directory with the control-plane binaries, running
// hack/k8s-binaries.sh (found from repoRoot) when any is missing; build progress goes to
// progress (nil discards it). Concurrent callers, also in other processes, are serialised
// with a lock file so that only one of them builds; the others wait and reuse its result.
//
// CoreDNS, which the lab runs as cluster DNS, is ensured too (EnsureCoreDNS).
func EnsureBinaries(ctx context.Context, repoRoot string, progress io.Writer) (string, error) {
	dir, err := ensureKubernetesBinaries(ctx, repoRoot, progress)
	if err != nil {
		return "", err
	}
	if _, err := EnsureCoreDNS(ctx, repoRoot, progress); err != nil {
		return "", err
	}
	return dir, nil
}

func ensureKubernetesBinaries(ctx context.Context, repoRoot string, progress io.Writer) (string, error) {
	dir, err := DefaultBinDir()
	if err != nil {
		return "", err
	}
	err = cachedBuild(ctx, cachedBuildOptions{
		RepoRoot: repoRoot, Script: buildScript, CacheDir: filepath.Dir(dir),
		What:    "control-plane binaries",
		Missing: func() error { return missingBinaries(dir) },
	}, progress)
	return dir, err
}

// cachedBuildOptions describe one cached build by a script under hack/.
type cachedBuildOptions struct {
	// RepoRoot is where the script runs; Script is its path relative to it.
	RepoRoot, Script string
	// CacheDir holds the build's output and its lock file.
	CacheDir string
	// What names the output in progress and error messages.
	What string
	// Missing reports what of the output is absent, nil when the build is complete.
	Missing func() error
}

// cachedBuild runs the build script when its output is missing. Builders of the same cache,
// also in other processes, serialise on a lock file there, and check again after waiting, so
// only one of them builds and the others reuse its result. Build output goes to progress (nil
// discards it).
func cachedBuild(ctx context.Context, o cachedBuildOptions, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	if o.Missing() == nil {
		return nil
	}
	if err := os.MkdirAll(o.CacheDir, 0o755); err != nil {
		return fmt.Errorf("creating binary cache %s: %w", o.CacheDir, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(o.CacheDir, ".build.lock"), progress)
	if err != nil {
		return err
	}
	defer unlock()
	// Another process may have finished the build while we waited for the lock.
	missing := o.Missing()
	if missing == nil {
		return nil
	}
	script := filepath.Join(o.RepoRoot, o.Script)
	if _, err := os.Stat(script); err != nil {
		return fmt.Errorf("%s: %w, and the build script not found: %w", o.What, missing, err)
	}
	fmt.Fprintf(progress, "building %s with %s (minutes on a cold cache)\n", o.What, script)
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Dir = o.RepoRoot
	cmd.Stdout = io.Discard
	cmd.Stderr = progress
	// The script runs `go build`; its own process group lets a cancelled context stop the
	// compilers too, not only bash.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running %s (output above): %w", script, err)
	}
	if err := o.Missing(); err != nil {
		return fmt.Errorf("%s finished, but the build of %s is incomplete: %w", script, o.What, err)
	}
	return nil
}

// missingBinaries reports which binaries are absent or not executable in dir.
func missingBinaries(dir string) error { return missingIn(dir, Binaries...) }

// lockFile takes an exclusive flock on path, polling so that ctx can cancel the wait.
func lockFile(ctx context.Context, path string, progress io.Writer) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening build lock %s: %w", path, err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil // closing releases the flock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if !told {
			fmt.Fprintf(progress, "waiting for another build to finish (lock %s)\n", path)
			told = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for build lock %s: %w", path, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// CacheDir returns the root of the cache the build scripts under hack/ write, for other
// cached artefacts of the lab (its container images): $OCTOPUS_CACHE, else ~/.cache/octopus.
func CacheDir() (string, error) { return cacheDir() }
