package procfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAliveAndCmdline(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !Alive(pid) {
		t.Fatal("a running child is not Alive")
	}
	// Right after Start, the child's cmdline was once read empty on a loaded machine (a CI
	// run, 2026-11-24): wait until it is filled before judging it.
	var args []string
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		args, err = Cmdline(pid)
		if err != nil || len(args) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || len(args) != 2 || filepath.Base(args[0]) != "sleep" || args[1] != "60" {
		t.Fatalf("Cmdline = %q, %v", args, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Killed but not yet reaped, the child is a zombie, which must not count as alive.
	deadline := time.Now().Add(10 * time.Second)
	for Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatal("a killed, unreaped child (a zombie) still counts as Alive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Wait()
	if Alive(pid) {
		t.Fatal("a reaped child is still Alive")
	}
	if _, err := Cmdline(pid); err == nil {
		t.Fatal("Cmdline of a reaped child succeeded")
	}
}

func TestAliveRejectsImpossiblePID(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Error("Alive(self) = false")
	}
	if Alive(1<<22 + 1) { // above PID_MAX_LIMIT
		t.Error("Alive(impossible PID) = true")
	}
}

// TestKillUntilGone kills what the list names until it names nothing, and says what is left
// when a process cannot be killed in time.
func TestKillUntilGone(t *testing.T) {
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = sleep.Wait() }() // reaps it, so Alive turns false
	pid := sleep.Process.Pid
	list := func() ([]int, error) {
		if Alive(pid) {
			return []int{pid}, nil
		}
		return nil, nil
	}
	if err := KillUntilGone(list, "of the test", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if Alive(pid) {
		t.Errorf("process %d is alive", pid)
	}
	// A deadline already past: the process that stays (this test's) is reported, not killed.
	err := KillUntilGone(func() ([]int, error) { return []int{os.Getpid()}, nil }, "of the test", -time.Second)
	if err == nil || !strings.Contains(err.Error(), "still alive") {
		t.Errorf("a process that stays: err = %v", err)
	}
}
