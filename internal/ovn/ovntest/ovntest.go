// Package ovntest runs real OVN databases for tests: an ovsdb-server with the northbound
// schema of the installed OVN (Debian's ovn-central, see hack/install-deps.sh) on a unix
// socket in a scratch directory, and where a test needs it the southbound database and
// ovn-northd. No systemd and nothing under /var/run: every process is a child of the test,
// started in the foreground and stopped by its PID when the test ends.
package ovntest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Schemas of the installed OVN (Debian's ovn-common and ovn-central).
const (
	NBSchema = "/usr/share/ovn/ovn-nb.ovsschema"
	SBSchema = "/usr/share/ovn/ovn-sb.ovsschema"
)

// startTimeout bounds how long a server may take to listen on its socket; ovsdb-server does
// so in milliseconds, so reaching it means the server failed.
const startTimeout = 10 * time.Second

// Server is one ovsdb-server serving one database file on a unix socket.
type Server struct {
	// Socket is the path of the unix socket the server listens on.
	Socket string
	// Endpoint is Socket in OVSDB's remote syntax ("unix:PATH"), what clients connect to.
	Endpoint string

	t      testing.TB
	name   string // "nb" or "sb": names the files in dir
	dir    string
	db     string
	ctlCmd string // ovn-nbctl or ovn-sbctl
	cmd    *exec.Cmd
	done   chan struct{}
	log    *bytes.Buffer
}

// Central is OVN's central part: the NB and SB databases and ovn-northd translating one
// into the other.
type Central struct {
	NB, SB *Server
	northd *exec.Cmd
}

// StartNB starts a northbound ovsdb-server with an empty database in a new scratch
// directory. It is stopped, and the directory removed, when the test ends.
func StartNB(t testing.TB) *Server {
	t.Helper()
	return startServer(t, scratchDir(t), "nb", NBSchema, "ovn-nbctl")
}

// StartCentral starts the NB and SB databases and ovn-northd, for tests that check what OVN
// itself makes of the northbound rows (port bindings, logical flows).
func StartCentral(t testing.TB) *Central {
	t.Helper()
	dir := scratchDir(t)
	c := &Central{
		NB: startServer(t, dir, "nb", NBSchema, "ovn-nbctl"),
		SB: startServer(t, dir, "sb", SBSchema, "ovn-sbctl"),
	}
	need(t, "ovn-northd")
	c.northd = command(dir, "ovn-northd",
		"--ovnnb-db="+c.NB.Endpoint, "--ovnsb-db="+c.SB.Endpoint,
		"--unixctl="+filepath.Join(dir, "northd.ctl"), "--log-file="+filepath.Join(dir, "northd.log"))
	var log bytes.Buffer
	c.northd.Stdout, c.northd.Stderr = &log, &log
	if err := c.northd.Start(); err != nil {
		t.Fatalf("starting ovn-northd: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = c.northd.Wait(); close(done) }()
	t.Cleanup(func() {
		stopProcess(t, "ovn-northd", c.northd, done)
		if t.Failed() {
			t.Logf("ovn-northd output:\n%s", log.String())
		}
	})
	return c
}

func startServer(t testing.TB, dir, name, schema, ctl string) *Server {
	t.Helper()
	need(t, "ovsdb-server", "ovsdb-tool")
	if _, err := os.Stat(schema); err != nil {
		t.Skipf("OVN schema %s not installed (run hack/install-deps.sh): %v", schema, err)
	}
	s := &Server{
		t: t, name: name, dir: dir, ctlCmd: ctl,
		db:     filepath.Join(dir, name+".db"),
		Socket: filepath.Join(dir, name+".sock"),
	}
	s.Endpoint = "unix:" + s.Socket
	if out, err := command(dir, "ovsdb-tool", "create", s.db, schema).CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool create %s: %v\n%s", s.db, err, out)
	}
	t.Cleanup(s.Stop)
	s.Start()
	return s
}

// Start starts the server on its database file, as it was left: a restarted server serves
// everything committed before it stopped. It returns once the server accepts connections.
func (s *Server) Start() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatalf("ovsdb-server %s is already running", s.name)
	}
	s.log = &bytes.Buffer{}
	s.cmd = command(s.dir, "ovsdb-server", s.db,
		"--remote=punix:"+s.Socket,
		"--unixctl="+filepath.Join(s.dir, s.name+".ctl"),
		"--log-file="+filepath.Join(s.dir, s.name+".log"))
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting ovsdb-server %s: %v", s.name, err)
	}
	done := make(chan struct{})
	s.done = done
	go func() { _ = s.cmd.Wait(); close(done) }()
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.Dial("unix", s.Socket)
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case <-done:
			s.t.Fatalf("ovsdb-server %s exited at start: %s", s.name, s.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("ovsdb-server %s does not listen on %s after %s: %v\n%s", s.name, s.Socket, startTimeout, err, s.log.String())
		}
	}
}

// Stop stops the server (SIGTERM to its PID, then SIGKILL if it lingers) and waits for it
// to exit; connected clients see the connection drop. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	stopProcess(s.t, "ovsdb-server "+s.name, s.cmd, s.done)
	// The socket file outlives a killed server; a later Start must not mistake it for a
	// listening one.
	_ = os.Remove(s.Socket)
	s.cmd, s.done = nil, nil
}

// Ctl runs ovn-nbctl (or ovn-sbctl) against the server and returns its standard output: an
// independent reader of the database for assertions, not the code under test.
func (s *Server) Ctl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, s.ctlCmd, append([]string{"--db=" + s.Endpoint}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", s.ctlCmd, strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// command prepares a foreground OVS/OVN program whose run, log and database directories
// are dir, so nothing it writes lands in the system's /var/run or /var/log. Pdeathsig ends
// it if the test binary dies before its cleanup runs.
func command(dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+dir, "OVS_LOGDIR="+dir, "OVS_DBDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

func stopProcess(t testing.TB, what string, cmd *exec.Cmd, done <-chan struct{}) {
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("stopping %s (pid %d): %v", what, cmd.Process.Pid, err)
	}
	select {
	case <-done:
		return
	case <-time.After(5 * time.Second):
	}
	_ = cmd.Process.Kill()
	<-done
}

// scratchDir is a new short directory: unix socket paths are limited to 108 bytes, more than
// t.TempDir's names (they carry the test's name) may leave.
func scratchDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ovntest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("OVN logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// need skips the test when an OVN program is missing; in CI a skipped test fails the run.
func need(t testing.TB, programs ...string) {
	t.Helper()
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s not found (Debian's ovn-central; run hack/install-deps.sh): %v", p, err)
		}
	}
}
