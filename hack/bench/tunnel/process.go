package main

import (
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is a long-running program started inside a network namespace with `ip netns exec`,
// which execs it: the PID is the program's own, so its CPU time can be read from /proc.
type process struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser // nil unless started with withStdin
	stdout io.Reader      // nil unless started with withStdout
	stderr *tailBuffer
	done   chan struct{}
}

type startOption func(*process) error

// withStdin gives the caller a pipe to the program's standard input (helpers stop at EOF).
func withStdin(p *process) (err error) { p.stdin, err = p.cmd.StdinPipe(); return err }

// withStdout gives the caller a pipe from the program's standard output.
func withStdout(p *process) (err error) { p.stdout, err = p.cmd.StdoutPipe(); return err }

// withEnv adds environment variables.
func withEnv(kv ...string) startOption {
	return func(p *process) error { p.cmd.Env = append(p.cmd.Environ(), kv...); return nil }
}

// start runs argv in namespace ns. If this program dies, the kernel sends the child stop
// signal (SIGTERM lets wireguard-go remove its UAPI socket), so nothing outlives a crash.
func start(ns, name string, argv []string, opts ...startOption) (*process, error) {
	p := &process{
		name:   name,
		cmd:    exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...),
		stderr: &tailBuffer{max: 4096},
		done:   make(chan struct{}),
	}
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	for _, o := range opts {
		if err := o(p); err != nil {
			return nil, fmt.Errorf("starting %s: %w", name, err)
		}
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the program has ended, with its stderr.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%s): %s", p.name, p.cmd.ProcessState, p.stderr)
	default:
		return nil
	}
}

// stop ends the program: EOF on its stdin if it has one, else SIGTERM; SIGKILL (by PID) if it
// is still running 10 s later.
func (p *process) stop() {
	if p.stdin != nil {
		_ = p.stdin.Close()
	} else {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
		return
	case <-time.After(10 * time.Second):
	}
	progress("warning: %s (pid %d) did not stop within 10 s; killing it", p.name, p.pid())
	_ = p.cmd.Process.Kill()
	<-p.done
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(b.buf.String())
}
