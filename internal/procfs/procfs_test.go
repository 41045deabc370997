package procfs

import (
	"os"
	"os/exec"
	"path/filepath"
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
	args, err := Cmdline(pid)
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
