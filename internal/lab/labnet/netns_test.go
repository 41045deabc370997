package labnet

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNameNamespace names the network namespaces of processes (as the lab does for real
// nodes' pods): the name enters the process's namespace, naming it again is a no-op, naming
// another process's namespace moves the name, and the name keeps the namespace after its
// processes are gone, until DeleteNamespace.
func TestNameNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it creates network namespaces (CI runs as root)")
	}
	name := PodNetnsName(LabID(t.TempDir()), "name-namespace-test")
	t.Cleanup(func() { _ = DeleteNamespace(name) })
	inode := func(path string) uint64 {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	// sleeper runs a process in a new network namespace and returns its namespace's path.
	sleeper := func() (string, *exec.Cmd) {
		t.Helper()
		cmd := exec.Command("unshare", "--net", "sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		path := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net"
		self := inode("/proc/self/ns/net")
		for range 500 { // until unshare has exec'd sleep in the new namespace
			var st unix.Stat_t
			if unix.Stat(path, &st) == nil && st.Ino != self {
				return path, cmd
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("unshare --net did not enter a new namespace")
		return "", nil
	}
	first, firstCmd := sleeper()
	second, _ := sleeper()
	for _, step := range []struct {
		what string
		path string
	}{
		{"a process's namespace", first},
		{"the same again", first},
		{"another process's namespace", second},
		{"the first again", first},
	} {
		if err := NameNamespace(name, step.path); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		if got, want := inode(NetnsPath(name)), inode(step.path); !NamespaceExists(name) || got != want {
			t.Fatalf("%s: %s is namespace %d (exists %t), want %d", step.what, name, got, NamespaceExists(name), want)
		}
	}
	want := inode(first)
	_ = firstCmd.Process.Kill()
	_ = firstCmd.Wait()
	if !NamespaceExists(name) || inode(NetnsPath(name)) != want {
		t.Fatalf("%s did not keep the namespace of its exited process", name)
	}
	if err := DeleteNamespace(name); err != nil {
		t.Fatal(err)
	}
	if NamespaceExists(name) {
		t.Errorf("%s exists after DeleteNamespace", name)
	}
}
