package render

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/pki"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// These tests run ICDBScript, the script of the hub's interconnection database pods, on
// real ovsdb-servers (Debian's openvswitch-common and ovn-ic-db), three members per database
// on loopback ports where the pods have their node's address: what the StatefulSet runs,
// not a copy of it.

// icMember is one running member of one database: the shell that became ovsdb-server.
type icMember struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  *bytes.Buffer
	ctl  string // unixctl socket
}

// icDBCluster is one database's three members on 127.0.0.1.
type icDBCluster struct {
	db        ICDatabase
	dir       string
	ports     []int // clients' SSL ports
	raftPorts []int
	// hosts are the members' client addresses, "" for 127.0.0.1: other loopback addresses
	// give every member the same client port, as the hub's nodes have (one ic-nb-port for
	// the whole ic-db-host list).
	hosts   []string
	members []*icMember
}

// tlsFiles are a certificate, its key and the CA to trust, as files.
type tlsFiles struct{ key, cert, ca string }

func writeTLS(t *testing.T, dir, name string, certPEM, keyPEM, caPEM []byte) tlsFiles {
	t.Helper()
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	f := tlsFiles{key: filepath.Join(d, "tls.key"), cert: filepath.Join(d, "tls.crt"), ca: filepath.Join(d, "ca.crt")}
	for path, b := range map[string][]byte{f.key: keyPEM, f.cert: certPEM, f.ca: caPEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

func needPrograms(t *testing.T, db ICDatabase) {
	t.Helper()
	for _, p := range []string{"ovsdb-server", "ovsdb-tool", "ovs-appctl", db.Ctl} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s not found (Debian's openvswitch-common, ovn-common; run hack/install-deps.sh): %v", p, err)
		}
	}
	if _, err := os.Stat(db.Schema); err != nil {
		t.Skipf("schema %s not installed (Debian's ovn-ic-db; run hack/install-deps.sh): %v", db.Schema, err)
	}
}

// startICDBCluster starts the three members of db at once, as the StatefulSet's parallel
// pod management does, each running ICDBScript with server's certificate.
func startICDBCluster(t *testing.T, dir string, db ICDatabase, server tlsFiles) *icDBCluster {
	t.Helper()
	return startICDBClusterOn(t, dir, db, server, nil)
}

// startICDBClusterOn is startICDBCluster with the members' clients served on hosts (one
// loopback address each) at one port, or on 127.0.0.1 at a port each if hosts is nil.
func startICDBClusterOn(t *testing.T, dir string, db ICDatabase, server tlsFiles, hosts []string) *icDBCluster {
	t.Helper()
	needPrograms(t, db)
	c := &icDBCluster{db: db, dir: dir, hosts: hosts}
	shared := freeLoopbackPort(t)
	for range ICDBReplicas {
		if hosts != nil {
			c.ports = append(c.ports, shared)
		} else {
			c.ports = append(c.ports, freeLoopbackPort(t))
		}
		c.raftPorts = append(c.raftPorts, freeLoopbackPort(t))
	}
	c.members = make([]*icMember, ICDBReplicas)
	for i := range ICDBReplicas {
		c.start(t, i, server)
	}
	// A leader is not enough: a member still joining (through member 0 alone, RAFT_SEED) is
	// not yet in the configuration, and a test that then kills member 0 leaves one member
	// of a two-member cluster, which never elects again.
	eventuallyIC(t, "IC database "+db.DBName+" to elect a leader with every member joined", func() error {
		if c.leader() < 0 {
			return errors.New("no leader")
		}
		for i := range c.members {
			if status := c.status(i); !strings.Contains(status, "Status: cluster member") {
				return fmt.Errorf("member %d: %s", i, status)
			}
		}
		return nil
	})
	return c
}

// status is member i's cluster/status, or why it could not be read.
func (c *icDBCluster) status(i int) string {
	m := c.members[i]
	if m == nil {
		return "not running"
	}
	out, err := exec.Command("ovs-appctl", "-t", m.ctl, "cluster/status", c.db.DBName).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("cluster/status: %v: %s", err, out)
	}
	return string(out)
}

// start runs member i; its files are kept across starts, as the pod's host directory is.
func (c *icDBCluster) start(t *testing.T, i int, server tlsFiles) {
	t.Helper()
	memberDir := filepath.Join(c.dir, fmt.Sprintf("member%d", i), c.db.Name)
	raft := func(j int) string { return fmt.Sprintf("ssl:127.0.0.1:%d", c.raftPorts[j]) }
	env := ICDBEnv(c.db, fmt.Sprintf("%s-%d", ICDBName, i), raft(i), raft(0),
		fmt.Sprintf("pssl:%d:%s", c.ports[i], c.host(i)), memberDir, filepath.Dir(server.key), []string{DefaultTransitSwitch})
	m := &icMember{done: make(chan struct{}), log: &bytes.Buffer{}, ctl: filepath.Join(memberDir, c.db.Name+".ctl")}
	m.cmd = exec.Command("sh", "-c", ICDBScript)
	m.cmd.Env = os.Environ()
	for k, v := range env {
		m.cmd.Env = append(m.cmd.Env, k+"="+v)
	}
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	// Its own process group, so that stopping it also stops the background loop that makes
	// the transit switch; Pdeathsig ends it if the test binary dies first.
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("starting member %d of %s: %v", i, c.db.DBName, err)
	}
	go func() { _ = m.cmd.Wait(); close(m.done) }()
	c.members[i] = m
	t.Cleanup(func() {
		c.kill(i, m)
		if t.Failed() {
			t.Logf("member %d of %s:\n%s", i, c.db.DBName, m.log.String())
		}
	})
}

// kill ends member i's process group (by the PID this test started) and waits for it.
func (c *icDBCluster) kill(i int, m *icMember) {
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	<-m.done
	if c.members[i] == m {
		c.members[i] = nil
	}
}

// leader is the index of the member that says it leads, -1 if none does.
func (c *icDBCluster) leader() int {
	for i := range c.members {
		if strings.Contains(c.status(i), "Role: leader") {
			return i
		}
	}
	return -1
}

// host is member i's client address.
func (c *icDBCluster) host(i int) string {
	if c.hosts == nil {
		return "127.0.0.1"
	}
	return c.hosts[i]
}

// endpoint is every member's SSL address, the comma list ovn-ic is given.
func (c *icDBCluster) endpoint() string {
	var eps []string
	for i, p := range c.ports {
		eps = append(eps, fmt.Sprintf("ssl:%s:%d", c.host(i), p))
	}
	return strings.Join(eps, ",")
}

// ctl runs the database's ctl tool as a client: with the client certificate f (none if nil).
func (c *icDBCluster) ctl(db string, f *tlsFiles, args ...string) (string, error) {
	all := []string{"--db=" + db, "--timeout=5"}
	if f != nil {
		all = append(all, "--private-key="+f.key, "--certificate="+f.cert, "--ca-cert="+f.ca)
	}
	// Only stdout is the answer: on this loaded machine the ctl tools warn on stderr
	// ("Unreasonably long poll interval"), which would read as rows.
	var stderr bytes.Buffer
	cmd := exec.Command(c.db.Ctl, append(all, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", c.db.Ctl, strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

func eventuallyIC(t *testing.T, what string, f func() error) {
	t.Helper()
	// A raft election and ovsdb-server's reconnection backoff take seconds when idle; this
	// shared two-core machine has seen a failover take 17 s (internal/datapath/ovnic), so the
	// bound is generous and only a real failure reaches it.
	testenv.EventuallyEvery(t, 50*time.Millisecond, 90*time.Second, "waiting for "+what, f)
}

// listDBs sends OVSDB's list_dbs over conn and returns the answer's first line or the
// error that ended the connection.
func listDBs(conn net.Conn) (string, error) {
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte(`{"method":"list_dbs","params":[],"id":1}`)); err != nil {
		return "", err
	}
	return bufio.NewReader(conn).ReadString('}')
}

// TestICDatabasesRefuseClientsWithoutCertificate: the interconnection databases answer only a
// client with a certificate of the hub's IC CA, on the clients' port and on the raft port.
func TestICDatabasesRefuseClientsWithoutCertificate(t *testing.T) {
	dir, ca, server, east, other := icPKI(t)
	nb := startICDBCluster(t, dir, ICDatabases[0], server)

	// The transit switch made at deploy, read with a cluster's certificate.
	eventuallyIC(t, "the transit switch "+DefaultTransitSwitch, func() error {
		out, err := nb.ctl(nb.endpoint(), &east, "ts-list")
		// One row: three members made it at once, and the name is the table's index.
		if err != nil || strings.Count(out, "\n") != 1 || !strings.HasSuffix(strings.TrimSpace(out), "("+DefaultTransitSwitch+")") {
			return fmt.Errorf("ts-list: %w: %q", err, out)
		}
		return nil
	})

	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for name, port := range map[string]int{"clients' port": nb.ports[0], "raft port": nb.raftPorts[0]} {
		addr := "127.0.0.1:" + strconv.Itoa(port)
		t.Run(name, func(t *testing.T) {
			// Sanity of the probe itself: with the cluster's certificate the same request is
			// answered, so the refusals below are the server's. Awaited, since a loaded
			// machine can drop the first connection; the refusals are tried once.
			pair, err := tls.LoadX509KeyPair(east.cert, east.key)
			if err != nil {
				t.Fatal(err)
			}
			eventuallyIC(t, "the "+name+" to serve the cluster's certificate", func() error {
				conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: "127.0.0.1"})
				if err != nil {
					return fmt.Errorf("TLS with the cluster's certificate: %w", err)
				}
				defer func() { _ = conn.Close() }()
				if port == nb.ports[0] {
					got, err := listDBs(conn)
					if err != nil {
						return fmt.Errorf("list_dbs with the cluster's certificate: %w", err)
					}
					if !strings.Contains(got, "OVN_IC_Northbound") {
						return fmt.Errorf("list_dbs with the cluster's certificate = %q; want OVN_IC_Northbound", got)
					}
				}
				return nil
			})

			otherPair, err := tls.LoadX509KeyPair(other.cert, other.key)
			if err != nil {
				t.Fatal(err)
			}
			for name, cfg := range map[string]*tls.Config{
				"no certificate":     {RootCAs: pool, ServerName: "127.0.0.1"},
				"another CA's":       {RootCAs: pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{otherPair}},
				"plaintext (no TLS)": nil,
			} {
				var conn net.Conn
				if cfg == nil {
					conn, err = net.Dial("tcp", addr)
				} else {
					conn, err = tls.Dial("tcp", addr, cfg)
				}
				if err != nil {
					continue // refused at the handshake
				}
				got, err := listDBs(conn)
				_ = conn.Close()
				if err == nil || strings.Contains(got, "OVN_IC") {
					t.Errorf("%s: list_dbs answered %q (err %v); want the connection refused", name, got, err)
				}
			}
		})
	}

	// OVN's own client, as a member's ovn-ic would be configured: another CA's certificate
	// and plaintext are refused, and nothing is written.
	if out, err := nb.ctl(nb.endpoint(), &other, "ts-add", "intruder"); err == nil {
		t.Errorf("ovn-ic-nbctl with another CA's certificate wrote: %s", out)
	}
	if out, err := nb.ctl(fmt.Sprintf("tcp:127.0.0.1:%d", nb.ports[1]), nil, "ts-add", "intruder"); err == nil {
		t.Errorf("ovn-ic-nbctl in plaintext wrote: %s", out)
	}
	if out, err := nb.ctl(nb.endpoint(), &east, "ts-list"); err != nil || strings.Contains(out, "intruder") {
		t.Errorf("ts-list = %q, %v; want only %s", out, err, DefaultTransitSwitch)
	}
}

// TestICDatabasesSurviveLeaderLoss: with the raft leader of IC NB and of IC SB killed, both
// keep serving the comma list of members a member cluster's ovn-ic is given (reads and
// writes), and the killed member, restarted on its files, rejoins rather than making a
// cluster of its own.
func TestICDatabasesSurviveLeaderLoss(t *testing.T) {
	dir, _, server, east, _ := icPKI(t)
	nb := startICDBCluster(t, dir, ICDatabases[0], server)
	sb := startICDBCluster(t, dir, ICDatabases[1], server)
	eventuallyIC(t, "the transit switch", func() error {
		out, err := nb.ctl(nb.endpoint(), &east, "ts-list")
		if err != nil || !strings.Contains(out, DefaultTransitSwitch) {
			return fmt.Errorf("ts-list: %w: %q", err, out)
		}
		return nil
	})

	for _, c := range []*icDBCluster{nb, sb} {
		t.Run(c.db.DBName, func(t *testing.T) {
			i := c.leader()
			if i < 0 {
				t.Fatal("no leader")
			}
			start := time.Now()
			c.kill(i, c.members[i])
			eventuallyIC(t, c.db.DBName+" to serve a write without its old leader", func() error {
				var err error
				var out string
				if c == nb {
					out, err = c.ctl(c.endpoint(), &east, "--may-exist", "ts-add", "after-loss")
				} else {
					out, err = c.ctl(c.endpoint(), &east, "set", "IC_SB_Global", ".", "options:probe=after-loss")
				}
				if err != nil {
					return fmt.Errorf("%w: %s", err, out)
				}
				return nil
			})
			t.Logf("MEASURED %s served a write %s after its leader was killed", c.db.DBName, time.Since(start).Round(time.Millisecond))
			if c.leader() == i || c.leader() < 0 {
				t.Errorf("leader = %d after killing member %d", c.leader(), i)
			}
			if c == nb {
				if out, err := c.ctl(c.endpoint(), &east, "ts-list"); err != nil || !strings.Contains(out, DefaultTransitSwitch) || !strings.Contains(out, "after-loss") {
					t.Errorf("ts-list after the loss = %q, %v; want %s and after-loss", out, err, DefaultTransitSwitch)
				}
			}

			// The killed member restarts on its file and rejoins the same cluster.
			c.start(t, i, server)
			eventuallyIC(t, "the restarted member to rejoin", func() error {
				if status := c.status(i); !strings.Contains(status, "Status: cluster member") || !strings.Contains(status, "Leader: ") || strings.Contains(status, "Leader: unknown") {
					return fmt.Errorf("member %d: %s", i, status)
				}
				return nil
			})
			if c == nb {
				// Read from the restarted member alone: it has the write made while it was down.
				eventuallyIC(t, "the restarted member to hold the write made without it", func() error {
					out, err := c.ctl(fmt.Sprintf("ssl:127.0.0.1:%d", c.ports[i]), &east, "--no-leader-only", "ts-list")
					if err != nil || !strings.Contains(out, "after-loss") {
						return fmt.Errorf("ts-list on member %d: %w: %q", i, err, out)
					}
					return nil
				})
			}
		})
	}
}

// icPKI makes the hub's IC CA, the databases' certificate (as hub deploy issues it), a
// member cluster's client certificate signed from its CSR (the key never leaves the member)
// and a certificate of another CA.
func icPKI(t *testing.T) (dir string, ca *pki.CA, server, east, other tlsFiles) {
	t.Helper()
	dir, err := os.MkdirTemp("", "icdb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("IC database files kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	ca, err = pki.NewCA(ICCASecret, 0)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _, err := ca.PEM()
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue(ICDBLeaf(DefaultNamespaceForTest, []netip.Addr{netip.MustParseAddr("127.0.0.1")}))
	if err != nil {
		t.Fatal(err)
	}
	server = writeTLS(t, dir, "server", cert, key, caPEM)
	csr, key, err := pki.NewCSR("east")
	if err != nil {
		t.Fatal(err)
	}
	cert, err = ca.SignCSR(csr, pki.Leaf{CommonName: "east", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	east = writeTLS(t, dir, "east", cert, key, caPEM)
	otherCA, err := pki.NewCA("another", 0)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err = otherCA.Issue(pki.Leaf{CommonName: "east", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	other = writeTLS(t, dir, "other", cert, key, caPEM)
	return dir, ca, server, east, other
}

// DefaultNamespaceForTest is the hub namespace the test's server certificate names.
const DefaultNamespaceForTest = "octopus-hub"
