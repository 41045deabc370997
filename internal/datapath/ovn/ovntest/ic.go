package ovntest

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Schemas of the interconnection databases (Debian's ovn-ic-db).
const (
	ICNBSchema = "/usr/share/ovn/ovn-ic-nb.ovsschema"
	ICSBSchema = "/usr/share/ovn/ovn-ic-sb.ovsschema"
)

// Interconnection is OVN-IC's pair of databases, IC NB and IC SB, each a standalone
// ovsdb-server on a unix socket and, as the hub's serve them, on an SSL port of 127.0.0.1
// that demands a client certificate of tls.CA: components that are given Kube-OVN's
// ovn-ic-config (a host and two ports) reach them there with the cluster's certificate.
type Interconnection struct {
	NB, SB *Server
	// NBPort and SBPort are the SSL ports on 127.0.0.1.
	NBPort, SBPort int
	dir            string
}

// StartInterconnection starts the IC NB and IC SB databases, empty, in a new scratch
// directory, with the server certificate tls; they are stopped when the test ends.
func StartInterconnection(t testing.TB, tls TLSFiles) *Interconnection {
	t.Helper()
	need(t, "ovn-ic-nbctl", "ovn-ic-sbctl")
	dir := scratchDir(t)
	ic := &Interconnection{dir: dir}
	ic.NB = startServerWith(t, dir, "", "icnb", ICNBSchema, "ovn-ic-nbctl", &tls, "")
	ic.SB = startServerWith(t, dir, "", "icsb", ICSBSchema, "ovn-ic-sbctl", &tls, "")
	ic.NBPort, ic.SBPort = sslPort(t, ic.NB), sslPort(t, ic.SB)
	return ic
}

func sslPort(t testing.TB, s *Server) int {
	t.Helper()
	p, err := strconv.Atoi(strings.TrimPrefix(s.SSLEndpoint, "ssl:127.0.0.1:"))
	if err != nil {
		t.Fatalf("SSL endpoint %q: %v", s.SSLEndpoint, err)
	}
	return p
}

// StartOVNIC starts ovn-ic for the AZ whose central is c, joined to ic; it is stopped when the
// test ends.
func (c *Central) StartOVNIC(t testing.TB, ic *Interconnection) {
	t.Helper()
	need(t, "ovn-ic")
	p := start(t, c.dir, "", "ovn-ic",
		"--ovnnb-db="+c.NB.Endpoint, "--ovnsb-db="+c.SB.Endpoint,
		"--ic-nb-db="+ic.NB.Endpoint, "--ic-sb-db="+ic.SB.Endpoint,
		"--unixctl="+filepath.Join(c.dir, "ic.ctl"), "--log-file="+filepath.Join(c.dir, "ovn-ic.log"))
	logOnFailure(t, filepath.Join(c.dir, "ovn-ic.log"))
	t.Cleanup(func() { p.stop(t) })
}

// freePort is a TCP port of 127.0.0.1 free a moment ago, for a server the test starts at once:
// ovsdb-server's pssl:0 or ptcp:0 would pick one, but then no one can ask it which.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	n, _ := strconv.Atoi(port)
	return n
}
