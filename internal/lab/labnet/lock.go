package labnet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockDir holds the labs' lock files: /run is a tmpfs, so a reboot, which ends every lab,
// clears them too.
const lockDir = "/run"

// lockPath is the file whose exclusive flock the process running lab id holds.
func lockPath(id string) string { return filepath.Join(lockDir, "octopus-lab-"+id+".lock") }

// Lock marks lab id as running for as long as the returned file stays open: an exclusive
// flock, which the kernel drops when the process dies however it dies, so a lab killed with
// its processes leaves nothing that claims it is running. The file holds the PID, for the
// message of whoever finds it taken. It is not inherited by child processes.
func Lock(id string) (*os.File, error) {
	path := lockPath(id)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the lab lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lab %s is already running: %s", id, holder(path))
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// lockHeld tells whether a live process holds lab id's lock, and which, in words.
func lockHeld(id string) (bool, string, error) {
	path := lockPath(id)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("opening the lab lock %s: %w", path, err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	switch {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return true, holder(path), nil
	case err != nil:
		return false, "", fmt.Errorf("testing the lab lock %s: %w", path, err)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false, "", nil
}

// holder names the process that holds the lock file at path, as its PID line says.
func holder(path string) string {
	b, _ := os.ReadFile(path)
	if pid := strings.TrimSpace(string(b)); pid != "" {
		return fmt.Sprintf("process %s holds %s", pid, path)
	}
	return "a process holds " + path
}
