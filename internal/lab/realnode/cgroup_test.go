package realnode

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestCgroups makes a lab's cgroups on this machine, puts a process into a nested one and
// checks that the lab's cleanup finds it, kills it and leaves no cgroup behind; also when the
// cgroup is frozen, as a runc killed while it signals a container leaves it.
func TestCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates cgroups (CI runs as root)")
	}
	for _, frozen := range []bool{false, true} {
		t.Run("frozen="+strconv.FormatBool(frozen), func(t *testing.T) { testCgroups(t, frozen) })
	}
}

func testCgroups(t *testing.T, frozen bool) {
	id := "test" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { _ = RemoveCgroups(id) })
	nested := nodeCgroup(id, "n1") + "/kubepods/pod1"
	if err := ensureCgroup(nested); err != nil {
		t.Fatal(err)
	}
	dirs, err := Cgroups(id)
	if err != nil || len(dirs) == 0 {
		t.Fatalf("Cgroups = %v, %v; want the lab's cgroup in every hierarchy", dirs, err)
	}
	mounts, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != len(mounts) {
		t.Errorf("the lab's cgroup is in %d of %d hierarchies: %v", len(dirs), len(mounts), dirs)
	}
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = sleep.Wait(); close(done) }()
	// One hierarchy is enough to find it; cpuset checks that ensureCgroup gave it CPUs.
	joined := false
	for _, m := range mounts {
		procs := filepath.Join(m, nested, "cgroup.procs")
		if err := os.WriteFile(procs, []byte(strconv.Itoa(sleep.Process.Pid)), 0o644); err != nil {
			t.Errorf("joining %s: %v", procs, err)
			continue
		}
		joined = true
	}
	if !joined {
		t.Fatal("the process joined no cgroup")
	}
	if frozen {
		froze := false
		for _, m := range mounts {
			if state := filepath.Join(m, nested, "freezer.state"); fileExists(state) {
				if err := os.WriteFile(state, []byte("FROZEN"), 0o644); err != nil {
					t.Fatal(err)
				}
				froze = true
			}
		}
		if !froze {
			t.Fatal("no freezer hierarchy to freeze the cgroup in (cgroup v1 has one)")
		}
	}
	pids, err := CgroupProcesses(id)
	if err != nil || !slices.Contains(pids, sleep.Process.Pid) {
		t.Fatalf("CgroupProcesses = %v, %v; want %d", pids, err, sleep.Process.Pid)
	}
	if err := KillCgroupProcesses(id, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the process in the lab's cgroup was not killed")
	}
	if err := RemoveCgroups(id); err != nil {
		t.Fatal(err)
	}
	if dirs, err := Cgroups(id); err != nil || len(dirs) > 0 {
		t.Errorf("after RemoveCgroups: %v, %v", dirs, err)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
