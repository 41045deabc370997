package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// execDrainMax bounds how long an exec waits for its output after the command exited: a
// process it left behind in another session could hold the output open for good.
const execDrainMax = 2 * time.Second

// firstResizeWait bounds how long a terminal session waits for the client's first terminal
// size before starting the command anyway.
const firstResizeWait = time.Second

// execIO is an exec session's streams; nil ones are not attached.
type execIO struct {
	in       io.Reader
	out, err io.Writer
	tty      bool
	resize   <-chan remotecommand.TerminalSize
}

// exec runs argv in the container's namespaces, as a container runtime's exec does: the
// container's image table, env and working directory apply, and the command runs as a host
// process like the container itself. A non-zero exit comes back as a utilexec.ExitError, which
// the streaming server turns into the exit code kubectl exits with. When ctx ends (the client
// went away) the command is killed.
func (p *pod) exec(ctx context.Context, c *container, argv []string, sio execIO) error {
	if p.isTornDown() {
		return fmt.Errorf("pod %s is stopping", p.key)
	}
	resolved, err := p.agent.opts.Images.Argv(corev1.Container{Image: c.spec.image, Command: argv})
	if err != nil {
		return err
	}
	resolved = p.mounts.wrap(resolved)
	cmd := exec.Command(resolved[0], resolved[1:]...)
	cmd.Env = c.spec.env
	cmd.Dir = c.spec.workDir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	var (
		toClose []io.Closer // our ends, closed when the command is done
		copies  sync.WaitGroup
		child   []*os.File // the command's ends, closed once it started
	)
	defer func() {
		for _, f := range child {
			_ = f.Close()
		}
	}()
	// Stdin is copied from the client by a goroutine that is not waited for: it may block
	// in the client's stream until the session closes.
	// A pipe is closed at the client's EOF, so the command sees it; a terminal is not (that
	// would hang the session up).
	copyIn := func(w io.WriteCloser, closeAtEOF bool) {
		go func() {
			_, _ = io.Copy(w, sio.in)
			if closeAtEOF {
				_ = w.Close()
			}
		}()
	}
	if sio.tty {
		master, slave, err := openPTY()
		if err != nil {
			return err
		}
		child = append(child, slave)
		toClose = append(toClose, master)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		// A session of its own with the terminal as controlling tty, as in a container
		// started with -t; the session leader's PID is also its process group.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true, Setctty: true, Ctty: 0}
		if sio.in != nil {
			copyIn(master, false)
		}
		if sio.out != nil {
			copies.Go(func() { _, _ = io.Copy(sio.out, master) }) // ends with EIO once the terminal closes
		}
		if sio.resize != nil {
			setSize := func(size remotecommand.TerminalSize) {
				_ = unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Height, Col: size.Width})
			}
			// Clients send the terminal's size as soon as the session opens, on a stream of
			// its own. Apply the first one before the command starts, as a container runtime
			// does, so that the command never sees a 0x0 terminal.
			select {
			case size, ok := <-sio.resize:
				if ok {
					setSize(size)
				}
			case <-time.After(firstResizeWait):
			}
			go func() {
				for size := range sio.resize {
					setSize(size)
				}
			}()
		}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if sio.in != nil {
			r, w, err := os.Pipe()
			if err != nil {
				return err
			}
			child = append(child, r)
			toClose = append(toClose, w)
			cmd.Stdin = r
			copyIn(w, true)
		}
		for _, s := range []struct {
			dst io.Writer
			set *io.Writer
		}{{sio.out, &cmd.Stdout}, {sio.err, &cmd.Stderr}} {
			if s.dst == nil {
				continue
			}
			r, w, err := os.Pipe()
			if err != nil {
				return err
			}
			child = append(child, w)
			*s.set = w
			copies.Go(func() {
				_, _ = io.Copy(s.dst, r)
				_ = r.Close()
			})
		}
	}
	if err := p.agent.opts.Start(cmd, p.netnsPath); err != nil {
		for _, f := range child {
			_ = f.Close()
		}
		child = nil
		copies.Wait()
		return fmt.Errorf("starting %q in pod %s: %w", argv, p.key, err)
	}
	for _, f := range child {
		_ = f.Close()
	}
	child = nil
	pid := cmd.Process.Pid
	stopKill := context.AfterFunc(ctx, func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	defer stopKill()

	// As with containers: once the command exits, what it forked in its group goes too,
	// killed while the zombie still holds the group ID.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = cmd.Wait()
	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(execDrainMax):
	}
	for _, c := range toClose {
		_ = c.Close()
	}
	code := cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command %q in pod %s exited with code %d", argv, p.key, code), Code: code}
	}
	return nil
}

// openPTY opens a pseudo-terminal pair: master for the agent, slave for the command. Done with
// x/sys ioctls rather than a pty module, which would do the same three calls.
func openPTY() (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening a pseudo-terminal: %w", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		_ = master.Close()
		return nil, nil, fmt.Errorf("unlocking a pseudo-terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		_ = master.Close()
		return nil, nil, fmt.Errorf("naming a pseudo-terminal: %w", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		_ = master.Close()
		return nil, nil, fmt.Errorf("opening a pseudo-terminal: %w", err)
	}
	return master, slave, nil
}
