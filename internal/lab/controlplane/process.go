package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
)

// logTailLines is how many lines of a child's log an error message quotes.
const logTailLines = 15

// Restart back-off for processes with restartOnCrash, like the kubelet's for static pods: the
// first restart is quick, a crash loop does not burn the CPU, and a run that lasted
// crashResetAfter starts the back-off afresh.
const (
	restartBackoffMin = 500 * time.Millisecond
	restartBackoffMax = 5 * time.Second
	crashResetAfter   = time.Minute
)

// process supervises one child binary across restarts. It owns a log file (appended to, so a
// restart keeps the history) and a pidfile that exists exactly while the child runs.
type process struct {
	name    string // for messages, e.g. "etcd" or "hub kube-apiserver"
	binary  string
	args    []string
	logPath string
	pidPath string
	log     logr.Logger
	// netns is the path of a network namespace to start the child in; "" for ours.
	netns string

	// restartOnCrash restarts the child after an exit nobody asked for. Controllers get it:
	// kube-controller-manager exits when the API server goes away while it initialises, and
	// in a real cluster the kubelet would restart it.
	restartOnCrash bool

	mu           sync.Mutex
	run          *run    // current or last run; nil before the first start
	unexpected   []error // exits nobody asked for (without restart), reported by Environment.Stop
	stopped      bool    // stop was called and start was not called since: don't restart
	crashes      int     // consecutive crashes, for the restart back-off
	lastCrash    error
	restartTimer *time.Timer // pending restart after a crash
}

// run is one execution of a process.
type run struct {
	cmd      *exec.Cmd
	started  time.Time
	done     chan struct{} // closed once the child is reaped and err is set
	err      error
	stopping bool // guarded by process.mu; set before we signal the child
}

// start launches the child. It fails if the previous run is still alive.
func (p *process) start() (*run, error) {
	p.mu.Lock()
	r, err := p.startLocked()
	p.mu.Unlock()
	if err != nil {
		if r != nil {
			<-r.done // the child was killed; let wait() reap it and remove the pidfile
		}
		return nil, err
	}
	p.log.V(1).Info("Started process", "process", p.name, "pid", r.cmd.Process.Pid, "log", p.logPath)
	return r, nil
}

// startLocked does the work of start with p.mu held. On error it may return a run whose child
// is being killed.
func (p *process) startLocked() (*run, error) {
	if p.run != nil && !isClosed(p.run.done) {
		return nil, fmt.Errorf("%s is already running (pid %d)", p.name, p.run.cmd.Process.Pid)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log of %s: %w", p.name, err)
	}
	// A header separates restarts in the appended log.
	fmt.Fprintf(logFile, "==> %s starting %s %s\n", time.Now().Format(time.RFC3339Nano), p.binary, strings.Join(p.args, " "))

	cmd := exec.Command(p.binary, p.args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Pdeathsig: a parent that dies for any reason (also SIGKILL) takes its children along.
	// Setpgid: a Ctrl-C on the terminal reaches only the parent, which then stops the children
	// in the right order instead of all of them dying at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := startOnSpawnerThread(cmd, p.netns); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", p.name, p.binary, err)
	}
	r := &run{cmd: cmd, started: time.Now(), done: make(chan struct{})}
	p.run = r
	p.stopped = false
	// The pidfile is written before wait() may remove it, so none outlives its child.
	perr := os.WriteFile(p.pidPath, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
	if perr != nil {
		// Without a pidfile a crash of ours could leave the child unfindable: don't keep it.
		r.stopping = true
		_ = cmd.Process.Kill()
	}
	go p.wait(r, logFile)
	if perr != nil {
		return r, fmt.Errorf("writing pidfile of %s: %w", p.name, perr)
	}
	return r, nil
}

// binaryName is the file name of the binary, e.g. "kube-apiserver".
func (p *process) binaryName() string { return filepath.Base(p.binary) }

// wait reaps the child, removes its pidfile and handles an exit nobody asked for: it schedules
// a restart or records the exit for Environment.Stop.
func (p *process) wait(r *run, logFile *os.File) {
	err := r.cmd.Wait()
	_ = logFile.Close()
	_ = os.Remove(p.pidPath)

	p.mu.Lock()
	r.err = err
	switch {
	case r.stopping:
		p.log.V(1).Info("Process stopped", "process", p.name, "pid", r.cmd.Process.Pid)
	case p.restartOnCrash && !p.stopped:
		if time.Since(r.started) > crashResetAfter {
			p.crashes = 0
		}
		delay := min(restartBackoffMin<<min(p.crashes, 10), restartBackoffMax)
		p.crashes++
		p.lastCrash = p.exitError(r)
		p.log.Error(p.lastCrash, "Process exited unexpectedly, restarting it", "process", p.name, "in", delay, "crashes", p.crashes)
		p.restartTimer = time.AfterFunc(delay, func() { p.restartAfterCrash(r) })
	default:
		uerr := p.exitError(r)
		p.unexpected = append(p.unexpected, uerr)
		p.log.Error(uerr, "Process exited unexpectedly", "process", p.name, "log", p.logPath)
	}
	p.mu.Unlock()
	close(r.done)
}

// restartAfterCrash starts the process again unless it was stopped meanwhile.
func (p *process) restartAfterCrash(crashed *run) {
	<-crashed.done
	p.mu.Lock()
	p.restartTimer = nil
	if p.stopped || p.run != crashed {
		p.mu.Unlock()
		return
	}
	r, err := p.startLocked()
	p.mu.Unlock()
	if err != nil {
		if r != nil {
			<-r.done
		}
		err = fmt.Errorf("restarting %s after a crash: %w", p.name, err)
		p.mu.Lock()
		p.unexpected = append(p.unexpected, err)
		p.mu.Unlock()
		p.log.Error(err, "Restart failed", "process", p.name)
		return
	}
	p.log.Info("Restarted process after a crash", "process", p.name, "pid", r.cmd.Process.Pid)
}

// exitError describes how a run ended and quotes the end of the log, which is where the
// reason is (a bad flag, a port in use, an etcd error).
func (p *process) exitError(r *run) error {
	how := r.err
	if how == nil {
		how = errors.New("exit status 0")
	}
	return fmt.Errorf("%s (pid %d) exited: %w; last lines of %s:\n%s",
		p.name, r.cmd.Process.Pid, how, p.logPath, logTail(p.logPath, logTailLines))
}

// current returns the live run, or nil if the process is not running.
func (p *process) current() *run {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run == nil || isClosed(p.run.done) {
		return nil
	}
	return p.run
}

// stop sends SIGTERM and waits up to grace for the child to exit, then sends SIGKILL. A grace
// of zero kills at once. Stopping a process that is not running is not an error.
func (p *process) stop(grace time.Duration) error {
	p.mu.Lock()
	p.stopped = true
	if p.restartTimer != nil && p.restartTimer.Stop() {
		// Down between a crash and its restart: that is worth reporting.
		p.unexpected = append(p.unexpected, fmt.Errorf("%s was down after %d crash(es) in a row: %w", p.name, p.crashes, p.lastCrash))
		p.restartTimer = nil
	}
	r := p.run
	if r == nil || isClosed(r.done) {
		p.mu.Unlock()
		return nil
	}
	r.stopping = true
	p.mu.Unlock()

	pid := r.cmd.Process.Pid
	if grace > 0 {
		if err := signal(r, syscall.SIGTERM); err != nil {
			return fmt.Errorf("stopping %s (pid %d): %w", p.name, pid, err)
		}
		select {
		case <-r.done:
			return nil
		case <-time.After(grace):
			p.log.Info("Process still running after SIGTERM and grace period, killing it", "process", p.name, "pid", pid, "grace", grace)
		}
	}
	if err := signal(r, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing %s (pid %d): %w", p.name, pid, err)
	}
	<-r.done
	return nil
}

// unexpectedExits returns every exit of this process that nobody asked for and that was not
// healed by a restart.
func (p *process) unexpectedExits() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.unexpected...)
}

// forgetUnexpectedExits drops recorded exits, for a failed start that the caller retries.
func (p *process) forgetUnexpectedExits() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unexpected = nil
}

// signal sends sig to the child of run r. os.Process signals through a pidfd, so a PID the
// kernel reused after the child was reaped can never be hit; a child that is already gone is
// not an error (process.wait reaps it).
func signal(r *run, sig syscall.Signal) error {
	if err := r.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// waitReady polls check until it succeeds. It fails early, quoting the log, when the child
// exits, and on timeout or cancellation, quoting the last check error.
func (p *process) waitReady(ctx context.Context, r *run, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-r.done:
			return p.exitError(r)
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to become ready: %w (last check: %w); see %s", p.name, ctx.Err(), last, p.logPath)
		case <-tick.C:
		}
	}
}

// logTail returns the last n lines of the file at path, indented for quoting in an error.
func logTail(path string, n int) string {
	const maxRead = 32 << 10 // Kubernetes log lines can be long; this keeps errors bounded.
	f, err := os.Open(path)
	if err != nil {
		return "    (log unreadable: " + err.Error() + ")"
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "    (log unreadable: " + err.Error() + ")"
	}
	off := max(fi.Size()-maxRead, 0)
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return "    (log unreadable: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // the first line is cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// freePort asks the kernel for a currently unused TCP port on addr. Another process may take it
// before our child binds it; callers retry with a new port when the child reports that.
func freePort(addr netip.Addr) (uint16, error) {
	l, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %s: %w", addr, err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port), nil
}

// addressInUse reports whether the child's log says its listen address was taken.
func addressInUse(logPath string) bool {
	return strings.Contains(logTail(logPath, logTailLines), "address already in use")
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// spawnRequest asks the spawner thread to start cmd, in the network namespace mounted at
// netns if that is set.
type spawnRequest struct {
	cmd   *exec.Cmd
	netns string
	errc  chan<- error
}

// spawnRequests feeds the spawner goroutine.
var (
	spawnRequests chan spawnRequest
	spawnerOnce   sync.Once
)

// startOnSpawnerThread starts cmd from one OS thread that stays alive for the life of the
// program. Linux delivers Pdeathsig when the *thread* that forked the child exits, not the
// process; Go ends a thread when a goroutine that locked it returns (as netns code does after
// setns), which would SIGKILL our children for no reason. A dedicated locked thread also keeps
// children out of whatever namespace the calling goroutine's thread happens to be in.
//
// With netns set, the spawner thread enters that network namespace for the fork only: a child
// inherits the namespace of the thread that forks it, and Go's os/exec has no setns of its
// own.
func startOnSpawnerThread(cmd *exec.Cmd, netns string) error {
	spawnerOnce.Do(func() {
		spawnRequests = make(chan spawnRequest)
		go spawner(spawnRequests)
	})
	errc := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd: cmd, netns: netns, errc: errc}
	return <-errc
}

// spawner serves spawn requests on a locked thread, which it never unlocks: the thread must
// never exit while children forked from it live.
func spawner(reqs chan spawnRequest) {
	runtime.LockOSThread()
	home, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		home = nil // then requests with a namespace fail; plain starts still work
	}
	for req := range reqs {
		if req.netns == "" {
			req.errc <- req.cmd.Start()
			continue
		}
		stranded, err := startInNetns(req.cmd, req.netns, home)
		req.errc <- err
		if stranded {
			// This thread could not go home and is in a node's namespace for good. It must
			// stay alive (its children's Pdeathsig) but may fork nothing more: hand all
			// further requests to a fresh spawner on another thread.
			next := make(chan spawnRequest)
			go spawner(next)
			for r := range reqs {
				next <- r
			}
		}
	}
}

// startInNetns switches the calling (locked) thread into the namespace at path, starts cmd
// and switches back to home. stranded reports that switching back failed.
func startInNetns(cmd *exec.Cmd, path string, home *os.File) (stranded bool, err error) {
	if home == nil {
		return false, fmt.Errorf("starting %s in network namespace %s: the spawner cannot return to its own namespace", cmd.Path, path)
	}
	target, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("opening network namespace %s: %w", path, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return false, fmt.Errorf("entering network namespace %s: %w", path, err)
	}
	startErr := cmd.Start()
	if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
		return true, errors.Join(startErr, fmt.Errorf("leaving network namespace %s: %w", path, err))
	}
	return false, startErr
}
