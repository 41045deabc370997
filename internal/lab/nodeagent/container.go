package nodeagent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Restart back-off of containers, the kubelet's CrashLoopBackOff shortened for a lab: a
// crash-looping test pod shows its state within seconds, and a loop costs little CPU.
const (
	backoffMin = time.Second
	backoffMax = 30 * time.Second
	// backoffReset: a container that ran this long starts the back-off afresh.
	backoffReset = time.Minute
)

// Waiting reasons the lab reports besides the kubelet's own.
const (
	// ReasonBinaryNotFound: the container's program is not on this machine (lab containers
	// are host processes). The message names the binary and what to install.
	ReasonBinaryNotFound = "BinaryNotFound"
	reasonCrashLoop      = "CrashLoopBackOff"
	reasonCreating       = "ContainerCreating"
	reasonConfigError    = "CreateContainerConfigError"
	reasonRunError       = "RunContainerError"
)

// Starter starts a prepared command inside a network namespace (by path) so that it dies with
// the agent's process: controlplane.StartInNetns. Tests may run commands directly.
type Starter func(cmd *exec.Cmd, netnsPath string) error

// containerSpec is what it takes to run one container.
type containerSpec struct {
	name    string
	image   string
	argv    []string
	env     []string
	workDir string
	netns   string // path of the network namespace
	// logDir holds one log file per run of the container (runLogPath).
	logDir  string
	pidPath string
	policy  corev1.RestartPolicy
	// setupErr is set when the container cannot be started at all (missing binary, bad env):
	// it stays Waiting with reason and message, and is not retried until the pod is recreated.
	setupReason, setupErr string
}

// container supervises one container's process across restarts, following the pod's restart
// policy. Its main process leads a process group of its own; when it exits, what it forked is
// killed too, as a container runtime ends a container's whole PID namespace.
type container struct {
	spec     containerSpec
	start    Starter
	onChange func()

	mu       sync.Mutex
	cmd      *exec.Cmd // current run, nil when not running
	started  time.Time
	restarts int32
	crashes  int // consecutive, for the back-off
	last     *corev1.ContainerStateTerminated
	waiting  *corev1.ContainerStateWaiting // set while not running and not finished
	done     bool                          // terminated for good (restart policy)
	stopped  bool
	timer    *time.Timer
	exited   chan struct{} // closed when the current run's process is reaped
	logPath  string        // log file of the current or last run; "" before the first
	logRun   int32         // the run logPath belongs to (runLogPath)
}

func newContainer(spec containerSpec, start Starter, onChange func()) *container {
	c := &container{spec: spec, start: start, onChange: onChange}
	c.waiting = &corev1.ContainerStateWaiting{Reason: reasonCreating}
	if spec.setupErr != "" {
		c.waiting = &corev1.ContainerStateWaiting{Reason: spec.setupReason, Message: spec.setupErr}
	}
	return c
}

// run starts the container unless it cannot run at all.
func (c *container) run() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.spec.setupErr != "" || c.stopped {
		return
	}
	c.startLocked()
}

func (c *container) startLocked() {
	c.timer = nil
	if err := c.launchLocked(); err != nil {
		// A start failure counts as a crash: retry with back-off, as the kubelet does.
		c.waiting = &corev1.ContainerStateWaiting{Reason: reasonRunError, Message: err.Error()}
		c.scheduleRestartLocked(true)
	}
}

func (c *container) launchLocked() error {
	// One log file per run, as the kubelet keeps them: <restarts>.log, so `kubectl logs
	// --previous` reads the run before. Older runs' files go.
	logPath := runLogPath(c.spec.logDir, c.restarts)
	if err := os.MkdirAll(c.spec.logDir, 0o755); err != nil {
		return fmt.Errorf("creating log directory of container %s: %w", c.spec.name, err)
	}
	if c.restarts >= 2 {
		_ = os.Remove(runLogPath(c.spec.logDir, c.restarts-2))
	}
	logs, err := newLogWriter(logPath)
	if err != nil {
		return fmt.Errorf("opening log of container %s: %w", c.spec.name, err)
	}
	stdout, stderr, err := logs.pipes()
	if err != nil {
		logs.close()
		return fmt.Errorf("creating log pipes of container %s: %w", c.spec.name, err)
	}
	cmd := exec.Command(c.spec.argv[0], c.spec.argv[1:]...)
	cmd.Env = c.spec.env
	cmd.Dir = c.spec.workDir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Pdeathsig: a container dies with the agent (also on SIGKILL), as with the control
	// planes; Setpgid: its children can be killed with it as a group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	startErr := c.start(cmd, c.spec.netns)
	// The child holds its own copies; ours would keep the log readers from seeing EOF.
	_ = stdout.Close()
	_ = stderr.Close()
	if startErr != nil {
		logs.close()
		return fmt.Errorf("starting container %s (%s): %w", c.spec.name, strings.Join(c.spec.argv, " "), startErr)
	}
	if err := os.WriteFile(c.spec.pidPath, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		// Without a pidfile the process is still found by its namespace (labnet.
		// KillProcessesIn), so this is worth a log line in the container log only.
		logs.note("lab node agent: writing pidfile: " + err.Error())
	}
	c.cmd, c.started, c.waiting, c.logPath, c.logRun = cmd, time.Now(), nil, logPath, c.restarts
	c.exited = make(chan struct{})
	go c.wait(cmd, logs, c.exited)
	return nil
}

// wait waits for the main process to exit, kills the rest of its group while its PID is
// still held by the zombie (so the group ID cannot have been reused), reaps it and applies
// the restart policy.
func (c *container) wait(cmd *exec.Cmd, logs *logWriter, exited chan struct{}) {
	pid := cmd.Process.Pid
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = cmd.Wait()
	logs.close()
	_ = os.Remove(c.spec.pidPath)

	code := int32(cmd.ProcessState.ExitCode())
	reason := "Completed"
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int32(ws.Signal())
		reason = "Error"
	} else if code != 0 {
		reason = "Error"
	}
	c.mu.Lock()
	c.last = &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, StartedAt: metav1.NewTime(c.started), FinishedAt: metav1.Now(),
		ContainerID: containerID(pid),
	}
	c.cmd = nil
	close(exited)
	if !c.stopped {
		restart := c.spec.policy == corev1.RestartPolicyAlways ||
			(c.spec.policy == corev1.RestartPolicyOnFailure && code != 0)
		if restart {
			c.scheduleRestartLocked(time.Since(c.started) < backoffReset)
		} else {
			c.done = true
		}
	}
	c.mu.Unlock()
	c.onChange()
}

// scheduleRestartLocked restarts the container after the back-off; crashed false resets it.
func (c *container) scheduleRestartLocked(crashed bool) {
	if !crashed {
		c.crashes = 0
	}
	delay := min(backoffMin<<min(c.crashes, 10), backoffMax)
	c.crashes++
	if c.last != nil {
		c.waiting = &corev1.ContainerStateWaiting{Reason: reasonCrashLoop,
			Message: fmt.Sprintf("back-off %s restarting failed container %s", delay, c.spec.name)}
	}
	c.timer = time.AfterFunc(delay, func() {
		c.mu.Lock()
		if !c.stopped {
			c.restarts++
			c.startLocked()
		}
		c.mu.Unlock()
		c.onChange()
	})
}

// stop ends the container: SIGTERM to its process group, SIGKILL after grace. No restart
// follows. Stopping a container that does not run is not an error.
func (c *container) stop(grace time.Duration) {
	c.mu.Lock()
	c.stopped = true
	if c.timer != nil {
		c.timer.Stop()
	}
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	if cmd != nil {
		terminate(cmd.Process.Pid, exited, grace)
	}
}

// kill ends the run that began at run, as the kubelet does when a liveness or startup probe
// fails: SIGTERM to its group, SIGKILL after grace. Its restart policy then applies as after
// any exit. A later run, or a stopped container, is left alone.
func (c *container) kill(run time.Time, grace time.Duration) {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	mine := cmd != nil && !c.stopped && c.started.Equal(run)
	c.mu.Unlock()
	if mine {
		terminate(cmd.Process.Pid, exited, grace)
	}
}

// terminate sends SIGTERM to the process group of pid, SIGKILL after grace, and waits until
// exited is closed.
func terminate(pid int, exited <-chan struct{}, grace time.Duration) {
	// The group is signalled while its leader is alive or a zombie (wait() kills the group
	// before reaping), so the group ID is still ours.
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-exited:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-exited
}

// logFor returns the log file of the current (or last) run, or of the run before with
// previous, and a function that reports whether the run is still writing it.
func (c *container) logFor(previous bool) (path string, live func() bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logPath == "" {
		return "", nil, fmt.Errorf("container %s has not started yet", c.spec.name)
	}
	if previous {
		if c.logRun == 0 {
			return "", nil, fmt.Errorf("previous terminated container %q not found", c.spec.name)
		}
		return runLogPath(c.spec.logDir, c.logRun-1), func() bool { return false }, nil
	}
	path = c.logPath
	return path, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.logPath == path && c.cmd != nil
	}, nil
}

// running reports whether the main process runs, and since when.
func (c *container) running() (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd != nil, c.started
}

// status reports the container as the kubelet would; ready and started come from the prober.
func (c *container) status(ready, started bool) corev1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := corev1.ContainerStatus{
		Name: c.spec.name, Image: c.spec.image, ImageID: "lab://" + c.spec.image,
		RestartCount: c.restarts,
	}
	switch {
	case c.cmd != nil:
		s.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.started)}
		s.ContainerID = containerID(c.cmd.Process.Pid)
		s.Ready = ready
		s.Started = ptrTo(started)
	case c.done && c.last != nil:
		last := *c.last
		s.State.Terminated = &last
		s.ContainerID = last.ContainerID
		s.Started = ptrTo(false)
	default:
		w := corev1.ContainerStateWaiting{Reason: reasonCreating}
		if c.waiting != nil {
			w = *c.waiting
		}
		s.State.Waiting = &w
		s.Started = ptrTo(false)
	}
	if c.last != nil && (c.cmd != nil || !c.done) {
		last := *c.last
		s.LastTerminationState.Terminated = &last
	}
	return s
}

// containerID names a lab container by its host PID, in the "<runtime>://<id>" form.
func containerID(pid int) string { return "lab://" + strconv.Itoa(pid) }

func ptrTo[T any](v T) *T { return &v }
