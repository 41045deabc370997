package ovnic

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// Process is one running ovn-ic, as a Starter started it.
type Process interface {
	// Signal sends sig to the process; after it has exited, an error (ignored by Stop).
	Signal(sig os.Signal) error
	// Done is closed once the process has exited, by itself or by a signal.
	Done() <-chan struct{}
	// Err is why the process exited; valid once Done is closed.
	Err() error
	// PID identifies the process in logs and tests.
	PID() int
}

// Starter starts argv. ExecStarter is the real one; tests use fakes.
type Starter func(argv []string) (Process, error)

// Supervisor runs ovn-ic on the IC endpoints of an endpoints file (WriteEndpointsFile) and
// restarts it when the file's endpoints change, so that ovn-ic-config's ic-db-host and ports
// apply live: ovn-ic takes them only on its command line.
//
// Precedence: the file is the only source of the IC endpoints. Until it exists (the icmaster in
// the same pod writes it once it has read ovn-ic-config) ovn-ic is not started: starting it on
// other endpoints, e.g. chart values older than the ConfigMap, would let it sync the AZ's NB
// from IC databases the user has left. A file that cannot be read as endpoints leaves the
// running ovn-ic as it is.
//
// The restart keeps OVN-IC's "one active ovn-ic per AZ": each ovn-ic takes the ovn_ic lock on
// the AZ's own SB before it acts, the old process has exited (its connection and lock gone)
// before the new one starts, and the new one is active only once it holds the lock again; a
// standby replica may take it meanwhile, which is the lock doing its job.
type Supervisor struct {
	// File is the endpoints file (required).
	File string
	// Argv is ovn-ic's command line without --ic-nb-db and --ic-sb-db, which are appended from
	// the file (required).
	Argv []string
	// Start starts a process; nil is ExecStarter.
	Start Starter
	// Poll is how often the file is read; 0 is DefaultPoll.
	Poll time.Duration
	// StopGrace is how long ovn-ic has to exit after SIGTERM before SIGKILL; 0 is
	// DefaultStopGrace.
	StopGrace time.Duration
	Log       logr.Logger

	proc    Process
	running Endpoints
	// seen is the file content last acted on (or refused): the same content is read once.
	seen    []byte
	waiting bool
}

// DefaultPoll reads the file every second: a stat and a read of a few bytes in an emptyDir,
// and no watch to set up again when the rename replaces the file's inode. A configuration
// change then reaches ovn-ic within a second of the icmaster's write.
const DefaultPoll = time.Second

// DefaultStopGrace is ovn-ic's time to exit on SIGTERM (it closes its connections and lock
// at once; the bound only matters for a hung process).
const DefaultStopGrace = 10 * time.Second

// Run supervises ovn-ic until ctx is cancelled (ovn-ic stopped, nil returned) or ovn-ic exits
// by itself (its error returned, so that the container restarts with the kubelet's backoff,
// as a bare ovn-ic would).
func (s *Supervisor) Run(ctx context.Context) error {
	if s.File == "" || len(s.Argv) == 0 {
		return errors.New("ovn-ic supervisor: the endpoints file and ovn-ic's command line are required")
	}
	if s.Log.GetSink() == nil {
		s.Log = logr.Discard()
	}
	poll := s.Poll
	if poll <= 0 {
		poll = DefaultPoll
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if err := s.sync(); err != nil {
			s.stop()
			return err
		}
		var exited <-chan struct{}
		if s.proc != nil {
			exited = s.proc.Done()
		}
		select {
		case <-ctx.Done():
			s.stop()
			return nil
		case <-exited:
			err := s.proc.Err()
			s.proc = nil
			return fmt.Errorf("ovn-ic (IC NB %s, IC SB %s) exited: %w", s.running.NB, s.running.SB, errOrExit(err))
		case <-tick.C:
		}
	}
}

func errOrExit(err error) error {
	if err == nil {
		return errors.New("exit status 0")
	}
	return err
}

// sync reads the file once and starts or restarts ovn-ic if its endpoints changed. Only a
// failure to start ovn-ic is returned; what is wrong with the file is logged and waited out.
func (s *Supervisor) sync() error {
	data, err := os.ReadFile(s.File)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if s.proc == nil && !s.waiting {
			s.waiting = true
			s.Log.Info("Waiting for the IC endpoints file before starting ovn-ic; the icmaster writes it from ovn-ic-config's ic-db-host, ic-nb-port and ic-sb-port",
				"file", s.File)
		}
		return nil
	case err != nil:
		s.Log.Error(err, "Could not read the IC endpoints file; ovn-ic keeps its endpoints", "file", s.File, "running", s.proc != nil)
		return nil
	case slices.Equal(data, s.seen):
		return nil
	}
	s.seen = slices.Clone(data)
	e, err := ParseEndpoints(data)
	if err != nil {
		s.Log.Error(err, "Ignored a malformed IC endpoints file; ovn-ic keeps its endpoints", "file", s.File,
			"running", s.proc != nil, "icNB", s.running.NB, "icSB", s.running.SB)
		return nil
	}
	if s.proc != nil && e == s.running {
		return nil
	}
	if s.proc != nil {
		s.Log.Info("Restarting ovn-ic on changed IC endpoints", "oldICNB", s.running.NB, "newICNB", e.NB,
			"oldICSB", s.running.SB, "newICSB", e.SB, "oldPID", s.proc.PID())
		s.stop()
	}
	argv := Command(s.Argv, e)
	start := s.Start
	if start == nil {
		start = ExecStarter
	}
	p, err := start(argv)
	if err != nil {
		return fmt.Errorf("starting ovn-ic on IC NB %s, IC SB %s: %w", e.NB, e.SB, err)
	}
	s.proc, s.running, s.waiting = p, e, false
	s.Log.Info("Started ovn-ic", "icNB", e.NB, "icSB", e.SB, "pid", p.PID())
	return nil
}

// Command is the command line the Supervisor runs: ovn-ic's argv with e's IC databases.
func Command(argv []string, e Endpoints) []string {
	return append(slices.Clone(argv), "--ic-nb-db="+e.NB, "--ic-sb-db="+e.SB)
}

// stop ends the running ovn-ic, if any, and waits until it has exited: SIGTERM, SIGKILL after
// StopGrace. Waiting matters: the next ovn-ic starts only once this one's SB lock is released.
func (s *Supervisor) stop() {
	if s.proc == nil {
		return
	}
	grace := s.StopGrace
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	p := s.proc
	s.proc = nil
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
		return
	case <-time.After(grace):
	}
	s.Log.Info("ovn-ic did not exit on SIGTERM; killing it", "pid", p.PID(), "grace", grace)
	_ = p.Signal(syscall.SIGKILL)
	<-p.Done()
}

// Probe is the ovn-ic container's liveness check: argv (ovn-appctl asking ovn-ic) unless the
// endpoints file does not exist yet. Then the Supervisor has started no ovn-ic, which is no
// failure of it (waiting is true): restarting the container would bring none either, and the
// kubelet's growing backoff would delay ovn-ic's start once the file comes. A malformed file is
// not waited out here: the Supervisor may still run an ovn-ic of an earlier good file, and a
// hung one must fail the probe; a malformed first file restarts the container (with backoff)
// until the icmaster writes a good one.
func Probe(ctx context.Context, file string, argv []string) (waiting bool, err error) {
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if len(argv) == 0 {
		return false, errors.New("probing ovn-ic: no command")
	}
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("probing ovn-ic with %q: %w: %s", argv, err, out)
	}
	return false, nil
}

// ExecStarter starts argv as a child process with the supervisor's stdout and stderr (the
// container's log). Pdeathsig kills it if the supervisor dies first, so that no orphaned
// ovn-ic keeps the AZ's lock on endpoints nobody supervises.
//
// Pdeathsig is sent when the thread that started the child ends, not the process: the child is
// started, and waited for, by a goroutine locked to its thread until the child has exited, so
// that the Go runtime never ends that thread under a living ovn-ic.
func ExecStarter(argv []string) (Process, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &execProcess{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	return p, nil
}

type execProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

var _ Process = (*execProcess)(nil)

func (p *execProcess) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }
func (p *execProcess) Done() <-chan struct{}      { return p.done }
func (p *execProcess) Err() error                 { return p.err }
func (p *execProcess) PID() int                   { return p.cmd.Process.Pid }
