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
	"strconv"
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
	// SSLEndpoint is "ssl:127.0.0.1:PORT" for a server started with TLS (StartNBTLS), where
	// it demands a client certificate from TLS.CA; "" otherwise. Endpoint stays open to the
	// test's own readers (Ctl).
	SSLEndpoint string

	t      testing.TB
	name   string // "nb" or "sb": names the files in dir
	dir    string
	netns  string // "" for the test's own
	db     string
	ctlCmd string // ovn-nbctl or ovn-sbctl
	tls    *TLSFiles
	tcp    string // "" or an extra "ptcp:PORT:ADDR" remote
	proc   *process
}

// TLSFiles are the PEM files of a server's TLS: its key and certificate, and the CA
// certificate(s) its clients' certificates must be signed by.
type TLSFiles struct {
	Key, Cert, CA string
}

// process is a foreground OVS/OVN program started by a test.
type process struct {
	what string
	cmd  *exec.Cmd
	done chan struct{}
	log  bytes.Buffer
}

// start starts name in dir (its run, log and database directory, so nothing it writes lands
// in the system's /var/run or /var/log), inside network namespace netns unless that is "".
// Pdeathsig ends it if the test binary dies before its cleanup runs; `ip netns exec` execs
// the program, so the PID is the program's.
func start(t testing.TB, dir, netns, name string, args ...string) *process {
	t.Helper()
	if netns != "" {
		args = append([]string{"netns", "exec", netns, name}, args...)
		name = "ip"
	}
	p := &process{what: strings.Join(append([]string{name}, args...), " "), done: make(chan struct{})}
	p.cmd = command(dir, name, args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", p.what, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p
}

// stop ends the process: SIGTERM to its PID, then SIGKILL if it lingers.
func (p *process) stop(t testing.TB) {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("stopping %s (pid %d): %v", p.what, p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
		return
	case <-time.After(5 * time.Second):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Central is OVN's central part: the NB and SB databases and ovn-northd translating one
// into the other.
type Central struct {
	NB, SB *Server
	dir    string
}

// StartNB starts a northbound ovsdb-server with an empty database in a new scratch
// directory. It is stopped, and the directory removed, when the test ends.
func StartNB(t testing.TB) *Server {
	t.Helper()
	return startServer(t, scratchDir(t), "", "nb", NBSchema, "ovn-nbctl")
}

// StartCentral starts the NB and SB databases and ovn-northd, for tests that check what OVN
// itself makes of the northbound rows (port bindings, logical flows).
func StartCentral(t testing.TB) *Central {
	t.Helper()
	dir := scratchDir(t)
	c := &Central{
		NB:  startServer(t, dir, "", "nb", NBSchema, "ovn-nbctl"),
		SB:  startServer(t, dir, "", "sb", SBSchema, "ovn-sbctl"),
		dir: dir,
	}
	need(t, "ovn-northd")
	northd := start(t, dir, "", "ovn-northd",
		"--ovnnb-db="+c.NB.Endpoint, "--ovnsb-db="+c.SB.Endpoint,
		"--unixctl="+filepath.Join(dir, "northd.ctl"), "--log-file="+filepath.Join(dir, "northd.log"))
	logOnFailure(t, filepath.Join(dir, "northd.log"))
	t.Cleanup(func() { northd.stop(t) })
	return c
}

// logOnFailure logs the end of a daemon's log file when the test has failed, once the daemon
// is stopped (register it before the stop: cleanups run last first): the scratch directory
// goes with the test, and with it the only account of what the daemon did.
func logOnFailure(t testing.TB, file string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Logf("%s: %v", file, err)
			return
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		const keep = 60
		if len(lines) > keep {
			lines = lines[len(lines)-keep:]
		}
		t.Logf("the last %d lines of %s:\n%s", len(lines), filepath.Base(file), strings.Join(lines, "\n"))
	})
}

// StartNBTLS is StartNB with the server also listening on SSLEndpoint with tls: there, as
// the member chart's databases do, it accepts only clients with a certificate signed by
// tls.CA (ovsdb-server's SSL always asks for the peer's certificate and refuses a client
// without one).
func StartNBTLS(t testing.TB, tls TLSFiles) *Server {
	t.Helper()
	return startServerTLS(t, scratchDir(t), "", "nb", NBSchema, "ovn-nbctl", &tls)
}

func startServer(t testing.TB, dir, netns, name, schema, ctl string) *Server {
	t.Helper()
	return startServerTLS(t, dir, netns, name, schema, ctl, nil)
}

func startServerTLS(t testing.TB, dir, netns, name, schema, ctl string, tls *TLSFiles) *Server {
	t.Helper()
	return startServerWith(t, dir, netns, name, schema, ctl, tls, "")
}

// startServerWith starts a server with, optionally, an SSL remote (tls) and an extra TCP one.
func startServerWith(t testing.TB, dir, netns, name, schema, ctl string, tls *TLSFiles, tcp string) *Server {
	t.Helper()
	need(t, "ovsdb-server", "ovsdb-tool")
	if _, err := os.Stat(schema); err != nil {
		t.Skipf("OVN schema %s not installed (run hack/install-deps.sh): %v", schema, err)
	}
	s := &Server{
		t: t, name: name, dir: dir, netns: netns, ctlCmd: ctl, tls: tls, tcp: tcp,
		db:     filepath.Join(dir, name+".db"),
		Socket: filepath.Join(dir, name+".sock"),
	}
	s.Endpoint = "unix:" + s.Socket
	if tls != nil {
		s.SSLEndpoint = "ssl:127.0.0.1:" + strconv.Itoa(freePort(t))
	}
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
	if s.proc != nil {
		s.t.Fatalf("ovsdb-server %s is already running", s.name)
	}
	args := []string{s.db,
		"--remote=punix:" + s.Socket,
		"--unixctl=" + filepath.Join(s.dir, s.name+".ctl"),
		"--log-file=" + filepath.Join(s.dir, s.name+".log")}
	if s.tls != nil {
		port := strings.TrimPrefix(s.SSLEndpoint, "ssl:127.0.0.1:")
		args = append(args, "--remote=pssl:"+port+":127.0.0.1",
			"--private-key="+s.tls.Key, "--certificate="+s.tls.Cert, "--ca-cert="+s.tls.CA)
	}
	if s.tcp != "" {
		args = append(args, "--remote="+s.tcp)
	}
	s.proc = start(s.t, s.dir, s.netns, "ovsdb-server", args...)
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.Dial("unix", s.Socket)
		if err == nil && s.tls != nil {
			_ = c.Close()
			c, err = net.Dial("tcp", strings.TrimPrefix(s.SSLEndpoint, "ssl:"))
		}
		if err == nil {
			_ = c.Close()
			return
		}
		if s.proc.exited() {
			s.t.Fatalf("ovsdb-server %s exited at start: %s", s.name, s.proc.log.String())
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("ovsdb-server %s does not listen on %s after %s: %v\n%s", s.name, s.Socket, startTimeout, err, s.proc.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the server (SIGTERM to its PID, then SIGKILL if it lingers) and waits for it
// to exit; connected clients see the connection drop. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if s.proc == nil {
		return
	}
	s.proc.stop(s.t)
	// The socket file outlives a killed server; a later Start must not mistake it for a
	// listening one.
	_ = os.Remove(s.Socket)
	s.proc = nil
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

// command prepares an OVS/OVN program whose run, log and database directories are dir.
func command(dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+dir, "OVS_LOGDIR="+dir, "OVS_DBDIR="+dir,
		"OVN_RUNDIR="+dir, "OVN_LOGDIR="+dir, "OVN_DBDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
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
