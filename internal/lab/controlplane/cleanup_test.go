package controlplane_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/procfs"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// The test binary doubles as helper process: with helperEnv set, TestMain runs a helper
// instead of the tests.
const (
	helperEnv    = "OCTOPUS_CONTROLPLANE_TEST_HELPER"
	helperDirEnv = "OCTOPUS_CONTROLPLANE_TEST_DIR"
	helperBinEnv = "OCTOPUS_CONTROLPLANE_TEST_BIN"
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "sleep":
		// Its arguments (ignored) put a path into /proc/<pid>/cmdline.
		time.Sleep(time.Hour)
		os.Exit(0)
	case "start":
		runStartHelper()
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%q\n", helperEnv, os.Getenv(helperEnv))
		os.Exit(2)
	}
}

// runStartHelper starts a control plane, says READY and waits to be killed: a parent that
// crashes while its environment runs.
func runStartHelper() {
	svc, pod := testenv.CIDRs(0)
	opts := controlplane.Options{BinDir: os.Getenv(helperBinEnv), Dir: os.Getenv(helperDirEnv)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	_, err := controlplane.Start(ctx, opts, controlplane.ClusterOptions{Name: "crash", ServiceCIDR: svc, PodCIDR: pod, Scheduler: true})
	cancel() // the control plane outlives ctx, which only bounded its start
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("READY")
	time.Sleep(time.Hour)
	os.Exit(0)
}

// TestCrashedParent kills a parent that runs a control plane with SIGKILL. Its children must
// die with it (Pdeathsig); CleanupStale must then remove the state directory, killing a
// leftover process whose command line refers to the directory but not an unrelated process
// whose PID happens to be in a pidfile there.
func TestCrashedParent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	parent := exec.Command(os.Args[0])
	parent.Env = append(os.Environ(), helperEnv+"=start", helperDirEnv+"="+dir, helperBinEnv+"="+testenv.BinDir(t))
	var stderr bytes.Buffer
	parent.Stderr = &stderr
	stdout, err := parent.StdoutPipe()
	must(t, err)
	must(t, parent.Start())
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })

	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "READY" {
			err = fmt.Errorf("helper said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("helper did not start its control plane: %v\n%s", err, stderr.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("helper did not start its control plane in time\n%s", stderr.String())
	}

	children := readPidfiles(t, filepath.Join(dir, "pids"))
	for _, name := range []string{"etcd", "crash-kube-apiserver", "crash-kube-controller-manager", "crash-kube-scheduler"} {
		pid, ok := children[name]
		if !ok || !procfs.Alive(pid) {
			t.Fatalf("%s not running after start (pidfiles: %v)", name, children)
		}
	}

	// The crash.
	must(t, parent.Process.Signal(syscall.SIGKILL))
	_ = parent.Wait()
	waitFor(t, 10*time.Second, "children of the killed parent to die (Pdeathsig)", func() (bool, error) {
		for name, pid := range children {
			if procfs.Alive(pid) {
				return false, fmt.Errorf("%s (pid %d) alive", name, pid)
			}
		}
		return true, nil
	})
	if left := readPidfiles(t, filepath.Join(dir, "pids")); len(left) != len(children) {
		t.Fatalf("a crashed parent should leave its pidfiles, found %v", left)
	}

	// What Pdeathsig cannot cover (e.g. a child that was re-parented before the crash) is
	// simulated with sleepers: one refers to the directory, one does not.
	inside := startSleeper(t, filepath.Join(dir, "leftover"))
	outside := startSleeper(t, t.TempDir())
	writePidfile(t, filepath.Join(dir, "pids", "leftover.pid"), inside.pid)
	writePidfile(t, filepath.Join(dir, "pids", "unrelated.pid"), outside.pid)

	if err := controlplane.CleanupStale(dir); err != nil {
		t.Fatalf("CleanupStale: %v", err)
	}
	select {
	case err := <-inside.exited:
		if !strings.Contains(fmt.Sprint(err), "killed") {
			t.Errorf("leftover process exited with %v, want killed", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("CleanupStale did not kill the leftover process whose command line refers to the state dir")
	}
	select {
	case err := <-outside.exited:
		t.Errorf("CleanupStale killed an unrelated process whose PID was in a pidfile (exit: %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("state dir still exists after CleanupStale: %v", err)
	}
}

// TestCleanupStaleDirectories covers the directories CleanupStale may and may not delete.
func TestCleanupStaleDirectories(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		wantErr string
		wantDir bool // dir still exists afterwards
	}{
		{
			name:  "missing dir",
			setup: func(t *testing.T, dir string) {},
		},
		{
			name:  "empty dir",
			setup: func(t *testing.T, dir string) { must(t, os.Mkdir(dir, 0o755)) },
		},
		{
			name: "foreign dir is kept",
			setup: func(t *testing.T, dir string) {
				must(t, os.Mkdir(dir, 0o755))
				must(t, os.WriteFile(filepath.Join(dir, "precious"), []byte("x"), 0o644))
			},
			wantErr: "refusing to delete",
			wantDir: true,
		},
		{
			name: "our dir with dead and garbled pidfiles",
			setup: func(t *testing.T, dir string) {
				must(t, os.MkdirAll(filepath.Join(dir, "pids"), 0o755))
				must(t, os.WriteFile(filepath.Join(dir, ".octopus-controlplane"), nil, 0o644))
				// PID_MAX_LIMIT is 2^22, so this PID cannot exist.
				writePidfile(t, filepath.Join(dir, "pids", "gone.pid"), 1<<22+1)
				must(t, os.WriteFile(filepath.Join(dir, "pids", "half-written.pid"), nil, 0o644))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			tt.setup(t, dir)
			err := controlplane.CleanupStale(dir)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("CleanupStale: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("CleanupStale error = %v, want one containing %q", err, tt.wantErr)
			}
			_, statErr := os.Stat(dir)
			if exists := statErr == nil; exists != tt.wantDir {
				t.Errorf("dir exists = %v, want %v", exists, tt.wantDir)
			}
		})
	}
}

type sleeper struct {
	pid    int
	exited chan error
}

// startSleeper starts a helper that sleeps with arg on its command line; t.Cleanup kills it.
func startSleeper(t *testing.T, arg string) sleeper {
	t.Helper()
	cmd := exec.Command(os.Args[0], arg)
	cmd.Env = append(os.Environ(), helperEnv+"=sleep")
	must(t, cmd.Start())
	s := sleeper{pid: cmd.Process.Pid, exited: make(chan error, 1)}
	go func() { s.exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return s
}

func writePidfile(t *testing.T, path string, pid int) {
	t.Helper()
	must(t, os.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o644))
}

// readPidfiles maps pidfile names without .pid to their PIDs, skipping files that vanish or
// are being written while it reads.
func readPidfiles(t testing.TB, dir string) map[string]int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.pid"))
	must(t, err)
	pids := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed since the Glob: its process exited
		}
		must(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue // being written
		}
		pids[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
	}
	return pids
}

func killFromPidfile(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	must(t, err)
	must(t, syscall.Kill(pid, syscall.SIGKILL))
}
