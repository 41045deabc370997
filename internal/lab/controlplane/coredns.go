package controlplane

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// CoreDNSVersion is the CoreDNS release hack/coredns pins; it names the cache directory and
// must equal hack/coredns.sh's COREDNS_VERSION (a test checks).
const CoreDNSVersion = "v1.15.0"

// coreDNSScript builds CoreDNS, relative to the repository root.
const coreDNSScript = "hack/coredns.sh"

// CoreDNSPath returns where hack/coredns.sh puts the CoreDNS binary:
// $OCTOPUS_CACHE/coredns-<version>/coredns (default cache ~/.cache/octopus).
func CoreDNSPath() (string, error) {
	cache := os.Getenv("OCTOPUS_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("finding the binary cache: set OCTOPUS_CACHE or HOME: %w", err)
		}
		cache = filepath.Join(home, ".cache", "octopus")
	}
	return filepath.Join(cache, "coredns-"+CoreDNSVersion, "coredns"), nil
}

// EnsureCoreDNS returns the CoreDNS binary, running hack/coredns.sh (found from repoRoot) when
// it is missing, serialised with other builders by the binary cache's lock file.
func EnsureCoreDNS(ctx context.Context, repoRoot string, progress io.Writer) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	path, err := CoreDNSPath()
	if err != nil {
		return "", err
	}
	if isExecutable(path) {
		return path, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("creating binary cache %s: %w", filepath.Dir(path), err)
	}
	unlock, err := lockFile(ctx, filepath.Join(filepath.Dir(path), ".build.lock"), progress)
	if err != nil {
		return "", err
	}
	defer unlock()
	if isExecutable(path) {
		return path, nil
	}
	script := filepath.Join(repoRoot, coreDNSScript)
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("CoreDNS missing at %s and build script not found: %w", path, err)
	}
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Dir = repoRoot
	cmd.Stdout = io.Discard
	cmd.Stderr = progress
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("running %s (output above): %w", script, err)
	}
	if !isExecutable(path) {
		return "", fmt.Errorf("%s finished but %s is still missing", script, path)
	}
	return path, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode().Perm()&0o111 != 0
}
