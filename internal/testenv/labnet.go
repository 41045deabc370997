package testenv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// labLockPath is machine-wide on purpose: every lab network uses the same documentation
// ranges and API address, so two of them cannot exist at once, and `go test ./...` runs the
// packages that build them (internal/lab, internal/lab/labnet) in parallel.
var labLockPath = filepath.Join(os.TempDir(), "octopus-lab-network.lock")

// LabNetwork prepares a test that builds a lab network: it skips when not root (namespaces
// and links need CAP_NET_ADMIN; CI runs as root, where a skip fails the run) and otherwise
// waits for the machine-wide lab lock, held until the test ends.
func LabNetwork(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab creates network namespaces and links (CI runs as root)")
	}
	f, err := os.OpenFile(labLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("opening the lab lock %s: %v", labLockPath, err)
	}
	// flock is released by the kernel if the test process dies, so a crash never wedges it.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("locking %s: %v", labLockPath, err)
	}
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}
