package ovnic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// The interconnection databases' schemas (Debian's ovn-ic-db).
const (
	icNBSchema = "/usr/share/ovn/ovn-ic-nb.ovsschema"
	icSBSchema = "/usr/share/ovn/ovn-ic-sb.ovsschema"
)

// The AZs' own NB/SB databases and ovn-northd come from ovntest.StartCentral. What it does not
// start, the IC databases and ovn-ic, is started here the same way (foreground children of the
// test in a scratch directory, stopped by PID): ovntest's starters are unexported and its files
// are being moved; these helpers belong there once they have settled.

// daemon is an OVN program started by the test.
type daemon struct {
	what string
	cmd  *exec.Cmd
	done chan struct{}
	log  bytes.Buffer
}

// startDaemon starts name in dir, its run/log/db directory, so that nothing lands in
// /var/run or /var/log; Pdeathsig ends it if the test binary dies before its cleanup. It is
// stopped, by its PID, when the test ends.
func startDaemon(t *testing.T, dir, name string, args ...string) *daemon {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not found (Debian's ovn-ic and ovn-ic-db; run hack/install-deps.sh): %v", name, err)
	}
	d := &daemon{what: name + " " + strings.Join(args, " "), done: make(chan struct{})}
	d.cmd = exec.Command(name, args...)
	d.cmd.Dir = dir
	d.cmd.Env = append(os.Environ(), "OVS_RUNDIR="+dir, "OVS_LOGDIR="+dir, "OVS_DBDIR="+dir,
		"OVN_RUNDIR="+dir, "OVN_LOGDIR="+dir, "OVN_DBDIR="+dir)
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	d.cmd.Stdout, d.cmd.Stderr = &d.log, &d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", d.what, err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() { d.stop(t) })
	return d
}

// stop ends the daemon: SIGTERM to its PID, SIGKILL if it lingers.
func (d *daemon) stop(t *testing.T) {
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("stopping %s (pid %d): %v", d.what, d.cmd.Process.Pid, err)
	}
	select {
	case <-d.done:
		return
	case <-time.After(5 * time.Second):
	}
	_ = d.cmd.Process.Kill()
	<-d.done
}

// icDB is one interconnection database: a standalone ovsdb-server on a unix socket.
type icDB struct {
	endpoint string
	ctl      string // ovn-ic-nbctl or ovn-ic-sbctl
	// server is the ovsdb-server, started again on its file by restart with args.
	server *daemon
	dir    string
	args   []string
}

// restart starts the server again on its database file, after server.stop.
func (db *icDB) restart(t *testing.T) {
	t.Helper()
	db.server = startDaemon(t, db.dir, "ovsdb-server", db.args...)
}

func startICDB(t *testing.T, dir, name, schema, ctl string) icDB {
	t.Helper()
	if _, err := os.Stat(schema); err != nil {
		t.Skipf("OVN IC schema %s not installed (Debian's ovn-ic-db; run hack/install-deps.sh): %v", schema, err)
	}
	db, sock := filepath.Join(dir, name+".db"), filepath.Join(dir, name+".sock")
	if out, err := exec.Command("ovsdb-tool", "create", db, schema).CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool create %s: %v\n%s", db, err, out)
	}
	args := []string{db, "--remote=punix:" + sock, "--unixctl=" + filepath.Join(dir, name+".ctl"), "--log-file=" + filepath.Join(dir, name+".log")}
	d := startDaemon(t, dir, "ovsdb-server", args...)
	eventually(t, 10*time.Second, "ovsdb-server "+name+" to listen", func() error {
		select {
		case <-d.done:
			t.Fatalf("ovsdb-server %s exited: %s", name, d.log.String())
		default:
		}
		c, err := net.Dial("unix", sock)
		if err == nil {
			_ = c.Close()
		}
		return err
	})
	return icDB{endpoint: "unix:" + sock, ctl: ctl, server: d, dir: dir, args: args}
}

func (db icDB) run(t *testing.T, args ...string) string {
	t.Helper()
	// Only stdout is the answer: under load the ctl tools warn on stderr ("Unreasonably
	// long poll interval"), which would read as rows.
	var stderr bytes.Buffer
	cmd := exec.Command(db.ctl, append([]string{"--db=" + db.endpoint}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", db.ctl, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// convergeTimeout bounds every wait for the daemons: a raft election, ovn-ic reconnecting to a
// new leader (its backoff reaches 8 s), a route learned. Idle they take milliseconds to a few
// seconds; on a shared two-core machine under a load of 25 a failover took 17 s, so the bound is
// generous and only a real failure reaches it (the waits poll, so it costs nothing otherwise).
const convergeTimeout = 60 * time.Second

// eventually polls f every 20 ms until it returns nil or timeout passes: idle-fast, and the
// test reports how soon routes were learned.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	testenv.EventuallyEvery(t, 20*time.Millisecond, timeout, "waiting for "+what, f)
}

// zone is one AZ: its central (NB, SB, ovn-northd), its ovn-ic and our client.
type zone struct {
	name    string
	central *ovntest.Central
	client  *Client
}

func startZone(t *testing.T, name string, icnb, icsb icDB) *zone {
	t.Helper()
	c := ovntest.StartCentral(t)
	dir := scratch(t)
	startDaemon(t, dir, "ovn-ic",
		"--ovnnb-db="+c.NB.Endpoint, "--ovnsb-db="+c.SB.Endpoint,
		"--ic-nb-db="+icnb.endpoint, "--ic-sb-db="+icsb.endpoint,
		"--unixctl="+filepath.Join(dir, "ic.ctl"), "--log-file="+filepath.Join(dir, "ovn-ic.log"))
	cl, err := Connect(context.Background(), Options{NB: c.NB.Endpoint, ICSB: icsb.endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &zone{name: name, central: c, client: cl}
}

// scratch is a short directory for unix sockets (108-byte limit, more than t.TempDir leaves),
// logs and databases; kept for reading when the test fails.
func scratch(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ovnic-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("OVN-IC logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

func (z *zone) nbctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := z.central.NB.Ctl(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// apply applies az, waiting while the AZ is not ready (NB_Global not made by ovn-northd yet, the
// transit switch not copied by ovn-ic yet) and while the client has no IC SB leader to check
// overlaps against (a raft leader just killed: the client reconnects to the new one).
func (z *zone) apply(t *testing.T, az AZ) {
	t.Helper()
	eventually(t, convergeTimeout, "Apply of AZ "+az.Name, func() error {
		// Bounded, so that a client stuck on a dead server fails the test instead of hanging it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := z.client.Apply(ctx, az)
		if err != nil && !errors.Is(err, ErrNotReady) && !errors.Is(err, ErrICSBUnavailable) {
			t.Fatalf("Apply(%s): %v", az.Name, err)
		}
		return err
	})
}

// routes are the router's static routes, read by `ovn-nbctl lr-route-list` (an independent
// reader, what a Kube-OVN user looks at): prefix -> "nexthop manual" or "nexthop learned".
func (z *zone) routes(t *testing.T) map[string]string {
	t.Helper()
	rs := map[string]string{}
	for _, line := range strings.Split(z.nbctl(t, "lr-route-list", RouterName(z.name)), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(f[0], "/") {
			continue // headings
		}
		kind := "manual"
		if len(f) > 3 && f[3] == "(learned)" {
			kind = "learned"
		}
		rs[f[0]] = f[1] + " " + kind
	}
	return rs
}

func (z *zone) waitRoute(t *testing.T, prefix, want string) {
	t.Helper()
	eventually(t, convergeTimeout, "AZ "+z.name+" route "+prefix+" = "+want, func() error {
		if got := z.routes(t)[prefix]; got != want {
			return errors.New("routes: " + strings.TrimSpace(z.nbctl(t, "lr-route-list", RouterName(z.name))))
		}
		return nil
	})
}

func regexpMatch(s, pattern string) bool { return regexp.MustCompile(pattern).MatchString(s) }

// icCluster is one interconnection database as a 3-member raft cluster, the hub's HA setup,
// each member an ovsdb-server on unix sockets (raft between members too).
type icCluster struct {
	icDB
	dbName  string
	members []*daemon
	ctls    []string // each member's unixctl socket
}

// startICCluster creates the cluster on member 1 and joins members 2 and 3 to it, starts all
// three and returns once the cluster has a leader; endpoint lists every member.
func startICCluster(t *testing.T, dir, name, schema, dbName, ctl string) *icCluster {
	t.Helper()
	if _, err := os.Stat(schema); err != nil {
		t.Skipf("OVN IC schema %s not installed (Debian's ovn-ic-db; run hack/install-deps.sh): %v", schema, err)
	}
	c := &icCluster{dbName: dbName}
	var remotes []string
	raft := func(i int) string { return fmt.Sprintf("unix:%s/%s%d.raft", dir, name, i) }
	for i := 1; i <= 3; i++ {
		db := filepath.Join(dir, fmt.Sprintf("%s%d.db", name, i))
		args := []string{"create-cluster", db, schema, raft(i)}
		if i > 1 {
			args = []string{"join-cluster", db, dbName, raft(i), raft(1)}
		}
		if out, err := exec.Command("ovsdb-tool", args...).CombinedOutput(); err != nil {
			t.Fatalf("ovsdb-tool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		sock := filepath.Join(dir, fmt.Sprintf("%s%d.sock", name, i))
		ctlSock := filepath.Join(dir, fmt.Sprintf("%s%d.ctl", name, i))
		c.members = append(c.members, startDaemon(t, dir, "ovsdb-server", db, "--remote=punix:"+sock,
			"--unixctl="+ctlSock, "--log-file="+filepath.Join(dir, fmt.Sprintf("%s%d.log", name, i))))
		c.ctls = append(c.ctls, ctlSock)
		remotes = append(remotes, "unix:"+sock)
	}
	c.icDB = icDB{endpoint: strings.Join(remotes, ","), ctl: ctl}
	// Member 1 leads its one-member cluster at once; the others count only once joined. A
	// leader killed before they are would leave a cluster that never elects again.
	eventually(t, convergeTimeout, name+" raft cluster to elect a leader with all members", func() error {
		if c.leader(t) < 0 {
			return errors.New("no leader")
		}
		for i, ctl := range c.ctls {
			out, err := exec.Command("ovs-appctl", "-t", ctl, "cluster/status", c.dbName).CombinedOutput()
			if err != nil {
				return fmt.Errorf("member %d: cluster/status: %w: %s", i+1, err, out)
			}
			if !strings.Contains(string(out), "Status: cluster member") {
				return fmt.Errorf("member %d not yet joined: %s", i+1, out)
			}
		}
		return nil
	})
	return c
}

// leader is the index of the member that reports itself leader, -1 if none does.
func (c *icCluster) leader(t *testing.T) int {
	t.Helper()
	for i, ctl := range c.ctls {
		if c.members[i] == nil {
			continue
		}
		out, err := exec.Command("ovs-appctl", "-t", ctl, "cluster/status", c.dbName).CombinedOutput()
		if err == nil && strings.Contains(string(out), "Role: leader") {
			return i
		}
	}
	return -1
}

// killLeader stops the leader by its PID and returns once another member leads.
func (c *icCluster) killLeader(t *testing.T) {
	t.Helper()
	i := c.leader(t)
	if i < 0 {
		t.Fatalf("%s has no leader to kill", c.dbName)
	}
	_ = c.members[i].cmd.Process.Kill()
	<-c.members[i].done
	c.members[i] = nil
	eventually(t, convergeTimeout, c.dbName+" to elect a new leader", func() error {
		if c.leader(t) < 0 {
			return errors.New("no leader")
		}
		return nil
	})
}
