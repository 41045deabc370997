package render

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/dbproxy"
	"github.com/octopus-mcs/octopus/internal/datapath/ovnic"
	"github.com/octopus-mcs/octopus/internal/pki"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
)

// The member side of OVN-IC on real daemons: the hub's IC databases as TLS raft clusters
// (ICDBScript), and a member's ovn-ic pod as the chart runs it, its proxy and ovn-ic started
// with icconfig's command lines (the chart's test holds the chart to the same lines).

// lockedBuffer is a process's output, read while the process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// daemon is a program the test started, in its own process group.
type daemon struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

func startDaemon(t *testing.T, name string, argv []string, env ...string) *daemon {
	t.Helper()
	if _, err := exec.LookPath(argv[0]); err != nil {
		t.Skipf("%s not found (Debian's ovn-ic, openvswitch-common; run hack/install-deps.sh): %v", argv[0], err)
	}
	d := &daemon{name: name, out: &lockedBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("%s:\n%s", name, d.out.String())
		}
	})
	return d
}

// stop kills the daemon's process group (by the PID this test started) and waits for it.
func (d *daemon) stop() {
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	<-d.done
}

// localDB is one of a member cluster's own OVN databases (NB or SB), as its central pod
// serves it: TLS for the cluster's clients, a unix socket for the test's own reads.
type localDB struct{ unix, ssl string }

// startLocalDB starts it in dir, empty, with the server certificate tls (of the member's CA).
func startLocalDB(t *testing.T, dir, name, schema string, tls tlsFiles) localDB {
	t.Helper()
	if _, err := os.Stat(schema); err != nil {
		t.Skipf("schema %s not installed (run hack/install-deps.sh): %v", schema, err)
	}
	db := filepath.Join(dir, name+".db")
	if out, err := exec.Command("ovsdb-tool", "create", db, schema).CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool create %s: %v: %s", db, err, out)
	}
	sock := filepath.Join(dir, name+".sock")
	port := freeLoopbackPort(t)
	startDaemon(t, "local "+name, []string{"ovsdb-server", db, "--remote=punix:" + sock,
		fmt.Sprintf("--remote=pssl:%d:127.0.0.1", port), "--private-key=" + tls.key, "--certificate=" + tls.cert, "--ca-cert=" + tls.ca,
		"--unixctl=" + filepath.Join(dir, name+".ctl"), "--no-chdir", "-vconsole:off", "-vsyslog:off", "-vfile:off"})
	eventuallyIC(t, "local "+name+" to listen", func() error {
		_, err := os.Stat(sock)
		return err
	})
	return localDB{unix: "unix:" + sock, ssl: fmt.Sprintf("ssl:127.0.0.1:%d", port)}
}

// memberOVNIC is one replica of a member's ovn-ic pod: ovn-ic with the cluster's IC
// certificate (icTLS), and the proxy to the member's own databases with the pod's
// certificate of the member's CA (localTLS).
type memberOVNIC struct {
	ovnic     *daemon
	stopProxy func()
}

func startMemberOVNIC(t *testing.T, dir, name string, cfg icconfig.Config, icTLS, localTLS tlsFiles, nb, sb localDB) memberOVNIC {
	t.Helper()
	run := filepath.Join(dir, name)
	if err := os.MkdirAll(run, 0o700); err != nil {
		t.Fatal(err)
	}
	// The proxy as `octopus-ovn db-proxy` runs it, from the command line the chart renders.
	var routes []dbproxy.Route
	for _, arg := range icconfig.ProxyCommand(nb.ssl, sb.ssl, filepath.Dir(localTLS.key), run) {
		if v, ok := strings.CutPrefix(arg, "--route="); ok {
			r, err := dbproxy.ParseRoute(v)
			if err != nil {
				t.Fatal(err)
			}
			routes = append(routes, r)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- dbproxy.Serve(ctx, routes, func(r dbproxy.Route) *tls.Config {
			host, _, _ := net.SplitHostPort(r.Remote)
			c, err := pki.ClientConfig(localTLS.cert, localTLS.key, localTLS.ca, host)
			if err != nil {
				t.Error(err)
			}
			return c
		}, logr.Discard())
	}()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("%s proxy: %v", name, err)
		}
	})
	t.Cleanup(stop)
	eventuallyIC(t, name+"'s proxy to listen", func() error {
		for _, r := range routes {
			if _, err := os.Stat(r.Socket); err != nil {
				return err
			}
		}
		return nil
	})
	// ovn-ic as the chart's container runs it: the icmaster writes ovn-ic-config's endpoints
	// to the pod's file, and `octopus-ovn ic-supervisor` runs the line after "--" with them
	// (ovnic.Command; the supervisor itself is tested on real daemons in internal/datapath/ovnic).
	line := icconfig.SupervisorCommand(filepath.Dir(icTLS.key), run)
	dash := slices.Index(line, "--")
	if dash < 0 || !slices.Equal(line[:2], []string{"octopus-ovn", "ic-supervisor"}) ||
		!slices.Contains(line[:dash], "--endpoints-file="+icconfig.EndpointsFile(run)) {
		t.Fatalf("ovn-ic's container line %q: want octopus-ovn ic-supervisor --endpoints-file=%s -- ovn-ic ...", line, icconfig.EndpointsFile(run))
	}
	if _, err := ovnic.WriteEndpointsFile(icconfig.EndpointsFile(run), ovnic.Endpoints{NB: cfg.ICNB(), SB: cfg.ICSB()}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(icconfig.EndpointsFile(run))
	if err != nil {
		t.Fatal(err)
	}
	endpoints, err := ovnic.ParseEndpoints(data)
	if err != nil {
		t.Fatal(err)
	}
	daemon := startDaemon(t, name+" ovn-ic", ovnic.Command(line[dash+1:], endpoints), "OVS_RUNDIR="+run, "OVN_RUNDIR="+run)
	return memberOVNIC{ovnic: daemon, stopProxy: stop}
}

// availabilityZones are the AZ names in IC SB, read with the certificate f.
func availabilityZones(sb *icDBCluster, f tlsFiles) (string, error) {
	out, err := sb.ctl(sb.endpoint(), &f, "--bare", "--columns=name", "list", "Availability_Zone")
	return strings.Join(strings.Fields(out), ","), err
}

// TestMemberOVNICOverTLS: a member's ovn-ic, started with the command lines the member chart
// renders and the ovn-ic-config endpoints (ssl:, every hub node at the same ports), registers
// its AZ in the hub's TLS-only raft IC SB with the cluster's certificate, learns the transit
// switch from IC NB, and one of its two replicas is active (the other takes over when it
// dies); a member whose certificate is another CA's gets nowhere.
func TestMemberOVNICOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts OVN daemons")
	}
	dir, _, server, east, other := icPKI(t)
	hosts := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	nb := startICDBClusterOn(t, dir, ICDatabases[0], server, hosts)
	sb := startICDBClusterOn(t, dir, ICDatabases[1], server, hosts)
	cfg := icconfig.Config{Enabled: true, DBHosts: hosts, NBPort: nb.ports[0], SBPort: sb.ports[0], AutoRoute: true}
	if got := cfg.ICSB(); got != sb.endpoint() {
		t.Fatalf("ovn-ic-config's IC SB endpoint %q, the databases listen at %q", got, sb.endpoint())
	}

	// The member's own CA: its central's server certificate and the ovn-ic pod's client one.
	localCA, err := pki.NewCA("octopus-ovn-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	localCAPEM, _, err := localCA.PEM()
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string, leaf pki.Leaf) tlsFiles {
		cert, key, err := localCA.Issue(leaf)
		if err != nil {
			t.Fatal(err)
		}
		return writeTLS(t, dir, name, cert, key, localCAPEM)
	}
	centralTLS := issue("central", pki.Leaf{CommonName: "ovn-central", Server: true, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	localTLS := issue("ovn-ic-local", pki.Leaf{CommonName: "ovn-ic", Client: true})

	az := func(name string) (nb, sb localDB) {
		local := filepath.Join(dir, name)
		if err := os.MkdirAll(local, 0o700); err != nil {
			t.Fatal(err)
		}
		nb = startLocalDB(t, local, "nb", "/usr/share/ovn/ovn-nb.ovsschema", centralTLS)
		sb = startLocalDB(t, local, "sb", "/usr/share/ovn/ovn-sb.ovsschema", centralTLS)
		// NB_Global with the AZ's name: the icmaster's first write (ovnic.Apply).
		if out, err := exec.Command("ovn-nbctl", "--db="+nb.unix, "set", "NB_Global", ".", "name="+name).CombinedOutput(); err != nil {
			t.Fatalf("naming AZ %s: %v: %s", name, err, out)
		}
		return nb, sb
	}

	eastNB, eastSB := az("east")
	replicas := []memberOVNIC{
		startMemberOVNIC(t, dir, "east-0", cfg, east, localTLS, eastNB, eastSB),
		startMemberOVNIC(t, dir, "east-1", cfg, east, localTLS, eastNB, eastSB),
	}
	eventuallyIC(t, "AZ east in IC SB", func() error {
		got, err := availabilityZones(sb, east)
		if err != nil || got != "east" {
			return fmt.Errorf("availability zones %q: %w", got, err)
		}
		return nil
	})
	eventuallyIC(t, "the transit switch in east's NB", func() error {
		out, err := exec.Command("ovn-nbctl", "--db="+eastNB.unix, "ls-list").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "("+DefaultTransitSwitch+")") {
			return fmt.Errorf("ls-list: %w: %s", err, out)
		}
		return nil
	})

	// One active replica by the lock on the AZ's own SB; the other takes over.
	const active = "This ovn-ic instance is now active"
	var activeIdx int
	eventuallyIC(t, "one active ovn-ic", func() error {
		n := 0
		for i, r := range replicas {
			if strings.Contains(r.ovnic.out.String(), active) {
				n, activeIdx = n+1, i
			}
		}
		if n != 1 {
			return fmt.Errorf("%d replicas say they are active", n)
		}
		return nil
	})
	replicas[activeIdx].ovnic.stop()
	replicas[activeIdx].stopProxy()
	standby := replicas[1-activeIdx]
	eventuallyIC(t, "the standby ovn-ic to take over", func() error {
		if !strings.Contains(standby.ovnic.out.String(), active) {
			return errors.New("not active")
		}
		return nil
	})

	// Another CA's certificate: the databases refuse west's ovn-ic, and it never registers.
	westNB, westSB := az("west")
	bad := startMemberOVNIC(t, dir, "west-0", cfg, other, localTLS, westNB, westSB)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if got, err := availabilityZones(sb, east); err != nil || got != "east" {
			t.Fatalf("availability zones with a foreign certificate's member running: %q, %v; want only east", got, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if out, err := exec.Command("ovn-nbctl", "--db="+westNB.unix, "ls-list").CombinedOutput(); err != nil || strings.Contains(string(out), DefaultTransitSwitch) {
		t.Errorf("west's NB with another CA's certificate: %q, %v; want no transit switch", out, err)
	}
	t.Logf("ovn-ic with another CA's certificate said:\n%s", bad.ovnic.out.String())
	// And a client without any certificate is refused outright.
	if out, err := sb.ctl(sb.endpoint(), nil, "list", "Availability_Zone"); err == nil {
		t.Errorf("ovn-ic-sbctl without a certificate read IC SB: %s", out)
	}
}
