package labnet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestShareNetnsDir runs, in a private mount namespace of its own thread (the host's mount
// table never changes), what happens to a namespace mounted in a directory that is no mount
// point when `ip netns add` later binds the directory onto itself: its file cannot be removed
// after the visible mount is gone (EBUSY), which is what left a lab's namespaces behind. Made a
// shared mount point first (shareNetnsDir, as the lab does before its first namespace), the
// same later bind changes nothing and the namespace's file goes; a second call adds no mount.
func TestShareNetnsDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes a mount namespace (CI runs as root)")
	}
	tmp := t.TempDir()
	errc := make(chan error, 1)
	go func() {
		// The thread is never unlocked, so it ends with the goroutine and its private mount
		// namespace with it.
		runtime.LockOSThread()
		errc <- shareNetnsDirScenario(tmp)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// shareNetnsDirScenario is TestShareNetnsDir's body, on a thread of its own in a new private
// mount namespace, with directories under tmp.
func shareNetnsDirScenario(tmp string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare of the mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "none", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the thread's mounts private: %w", err)
	}
	// namespace stands for a namespace's mount: a bind of a plain file onto a file in dir.
	namespace := func(dir, name string) (string, error) {
		path := filepath.Join(dir, name)
		for _, p := range []string{path, path + ".src"} {
			if err := os.WriteFile(p, nil, 0o444); err != nil {
				return "", err
			}
		}
		if err := unix.Mount(path+".src", path, "none", unix.MS_BIND, ""); err != nil {
			return "", fmt.Errorf("mounting %s: %w", path, err)
		}
		return path, nil
	}
	remove := func(path string) error {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			return err
		}
		return os.Remove(path)
	}
	ipNetnsAdd := shareNetnsDir // iproute2 does the same before each namespace it adds

	plain, shared := filepath.Join(tmp, "plain"), filepath.Join(tmp, "shared")
	for _, d := range []string{plain, shared} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	hidden, err := namespace(plain, "lab-ns")
	if err != nil {
		return err
	}
	if err := ipNetnsAdd(plain); err != nil {
		return fmt.Errorf("the bind ip netns makes: %w", err)
	}
	if err := remove(hidden); !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("without the lab's own mount point first, removing a namespace after ip netns bound the directory: %w, want EBUSY (the hazard this guards against)", err)
	}

	for range 2 {
		if err := shareNetnsDir(shared); err != nil {
			return fmt.Errorf("shareNetnsDir: %w", err)
		}
	}
	if n, err := mountsAt(shared); err != nil {
		return err
	} else if n != 1 {
		return fmt.Errorf("%d mounts at %s after two calls, want 1", n, shared)
	}
	ns, err := namespace(shared, "lab-ns")
	if err != nil {
		return err
	}
	if err := ipNetnsAdd(shared); err != nil {
		return fmt.Errorf("the bind ip netns makes: %w", err)
	}
	if err := remove(ns); err != nil {
		return fmt.Errorf("removing the lab's namespace after ip netns ran: %w", err)
	}
	return nil
}

// mountsAt counts the mounts whose mount point is dir in the calling thread's mount namespace.
func mountsAt(dir string) (int, error) {
	data, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return 0, err
	}
	n := 0
	for line := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			n++
		}
	}
	return n, nil
}
