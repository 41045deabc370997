package nodeagent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/octopus-mcs/octopus/internal/procfs"
)

func TestProbeResults(t *testing.T) {
	for _, tc := range []struct {
		name             string
		success, failure int32
		results          string // s: success, f: failure, r: container restarted
		want             string // passing after each result: + or -
	}{
		{"defaults: one success passes, three failures fail", 0, 0, "sffsfff", "++++++-"},
		{"success threshold 2", 2, 0, "ssfsss", "-+++++"},
		{"failures must be in a row", 1, 2, "sfsfsff", "++++++-"},
		{"a restart fails at once", 1, 3, "srss", "+-++"},
		{"starts failing", 3, 1, "ssfsss", "-----+"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newProbeResults(&corev1.Probe{SuccessThreshold: tc.success, FailureThreshold: tc.failure})
			var got strings.Builder
			for _, res := range tc.results {
				switch res {
				case 'r':
					r.reset()
				default:
					r.record(res == 's')
				}
				if r.passing {
					got.WriteByte('+')
				} else {
					got.WriteByte('-')
				}
			}
			if got.String() != tc.want {
				t.Errorf("results %s: passing %s, want %s", tc.results, got.String(), tc.want)
			}
		})
	}
}

// TestProbeFailedOut: a liveness or startup probe kills the container after FailureThreshold
// failures in a row, not after as many failures in all.
func TestProbeFailedOut(t *testing.T) {
	r := newProbeResults(&corev1.Probe{FailureThreshold: 3})
	var got strings.Builder
	for _, res := range "ffsfffs" {
		r.record(res == 's')
		if r.failedOut() {
			got.WriteByte('x')
		} else {
			got.WriteByte('.')
		}
	}
	if got.String() != ".....x." {
		t.Errorf("failed out after each of ffsfffs: %s, want .....x.", got.String())
	}
}

func TestProbeCommand(t *testing.T) {
	env := []corev1.EnvVar{{Name: "FILE", Value: "/tmp/ready"},
		{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}
	got := probeCommand([]string{"test", "-f", "$(FILE)", "$(IP)", "$(OTHER)", "$$(FILE)"}, env)
	want := []string{"test", "-f", "/tmp/ready", "", "$(OTHER)", "$(FILE)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("probeCommand = %q, want %q", got, want)
	}
}

// TestExecProbe runs exec probes as host processes (no namespaces): exit codes, the
// container's env, and a probe that outlives its timeout, which must be killed together with
// what it forked.
func TestExecProbe(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Fatal("sh is missing: every Debian machine has it (package dash); the lab's pods need it too")
	}
	dir := t.TempDir()
	p := &pod{
		key: "default/probed",
		agent: &Agent{opts: Options{Start: func(cmd *exec.Cmd, _ string) error {
			return cmd.Start()
		}}},
	}
	c := newContainer(containerSpec{name: "app", image: "example.com/app", env: []string{"GREETING=hello"}}, nil, nil)
	ctx := context.Background()
	probe := func(script string, timeout time.Duration) error {
		return p.execProbe(ctx, c, []string{"sh", "-c", script}, timeout)
	}

	if err := probe(`test "$GREETING" = hello`, 5*time.Second); err != nil {
		t.Errorf("probe that exits 0 in the container's env: %v", err)
	}
	if err := probe("exit 3", 5*time.Second); err == nil || !strings.Contains(err.Error(), "code 3") {
		t.Errorf("probe that exits 3: err = %v, want one naming exit code 3", err)
	}

	pidFile, childFile := filepath.Join(dir, "pid"), filepath.Join(dir, "child")
	begin := time.Now()
	err := probe("echo $$ > "+pidFile+"; sleep 60 & echo $! > "+childFile+"; wait", time.Second)
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("probe with a 1s timeout returned after %s", took)
	}
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("probe past its timeout: err = %v, want a timeout", err)
	}
	for _, f := range []string{pidFile, childFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		// The orphaned child may linger as a zombie until init reaps it; it must not run.
		deadline := time.Now().Add(2 * time.Second)
		for procfs.Alive(pid) {
			if time.Now().After(deadline) {
				t.Errorf("process %d of a timed-out probe still runs", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
