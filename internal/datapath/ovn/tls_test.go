package ovn

import (
	"context"
	"crypto/tls"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/pki"
)

// tlsFixture is a CA with a server, a client of its own, and a client of another CA, as
// files.
type tlsFixture struct {
	server                  ovntest.TLSFiles
	caFile                  string
	clientCert, clientKey   string
	foreignCert, foreignKey string
	// foreignCAFile is the certificate of the CA that signed the foreign client.
	foreignCAFile string
}

func newTLSFixture(t *testing.T) tlsFixture {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, err := pki.NewCA("ovn-test", 0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("someone-else", 0)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *pki.CA, name string, l pki.Leaf) (string, string) {
		c, k, err := ca.Issue(l)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".crt", c), write(name+".key", k)
	}
	var f tlsFixture
	f.caFile = write("ca.crt", pki.CertPEM(ca.Cert))
	f.server.CA = f.caFile
	f.server.Cert, f.server.Key = issue(ca, "nb", pki.Leaf{CommonName: "ovn-central", Server: true,
		DNSNames: []string{"localhost"}, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	f.clientCert, f.clientKey = issue(ca, "ovnmaster", pki.Leaf{CommonName: "ovnmaster", Client: true})
	f.foreignCert, f.foreignKey = issue(other, "foreign", pki.Leaf{CommonName: "ovnmaster", Client: true})
	f.foreignCAFile = write("foreign-ca.crt", pki.CertPEM(other.Cert))
	return f
}

// rawConnect connects libovsdb to endpoint with cfg as it is, bypassing Connect's checks: what
// a pod with no certificate or someone else's would do.
func rawConnect(endpoint string, cfg *tls.Config) error {
	dbModel, err := model.NewClientDBModel(nbdb.Schema().Name, map[string]model.Model{nbdb.LogicalSwitchTable: &nbdb.LogicalSwitch{}})
	if err != nil {
		return err
	}
	opts := []client.Option{client.WithEndpoint(endpoint)}
	if cfg != nil {
		opts = append(opts, client.WithTLSConfig(cfg))
	}
	c, err := client.NewOVSDBClient(dbModel, opts...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		return err
	}
	defer c.Close()
	// The handshake of TLS 1.3 completes on the client's side before the server has checked
	// the client's certificate: only a request proves the server accepted it.
	_, err = c.Monitor(ctx, c.NewMonitor(client.WithTable(&nbdb.LogicalSwitch{})))
	return err
}

// TestTLSClientsAuthenticated runs the NB ovsdb-server as the member chart does, on TLS only
// for the network, and checks that the client with a certificate of the CA reads and writes,
// while a client without a certificate, one with another CA's and a plaintext one are
// refused by the server.
func TestTLSClientsAuthenticated(t *testing.T) {
	f := newTLSFixture(t)
	nb := ovntest.StartNBTLS(t, f.server)

	cfg, err := pki.ClientConfig(f.clientCert, f.clientKey, f.caFile, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, Options{Endpoint: nb.SSLEndpoint, TLS: cfg})
	if err != nil {
		t.Fatalf("the client with the CA's certificate was refused: %v", err)
	}
	defer c.Close()
	res := apply(t, c, Network{ClusterID: testCluster, CIDR: testCIDR, Pods: pods("p", 0, 2)})
	checkDB(t, nb, res)
	if len(readPorts(t, nb)) != 2 {
		t.Fatalf("ports written over TLS: %v", readPorts(t, nb))
	}

	noCert := cfg.Clone()
	noCert.GetClientCertificate = nil
	foreign, err := pki.ClientConfig(f.foreignCert, f.foreignKey, f.caFile, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		endpoint string
		cfg      *tls.Config
	}{
		{"no client certificate", nb.SSLEndpoint, noCert},
		{"a certificate of another CA", nb.SSLEndpoint, foreign},
		{"plaintext", "tcp:" + strings.TrimPrefix(nb.SSLEndpoint, "ssl:"), nil},
	} {
		if err := rawConnect(tc.endpoint, tc.cfg); err == nil {
			t.Errorf("%s: the NB database served it", tc.name)
		} else {
			t.Logf("%s: refused: %v", tc.name, err)
		}
	}
	// OVN's own client: with the client's files it reads the switch; with another CA's
	// certificate it is refused.
	for _, tc := range []struct {
		name, cert, key string
		ok              bool
	}{{"ovn-nbctl with the CA's certificate", f.clientCert, f.clientKey, true}, {"ovn-nbctl with another CA's", f.foreignCert, f.foreignKey, false}} {
		out, err := exec.Command("ovn-nbctl", "--db="+nb.SSLEndpoint, "--timeout=5", "-p", tc.key, "-c", tc.cert, "-C", f.caFile, "ls-list").CombinedOutput()
		if got := err == nil && strings.Contains(string(out), "octopus-"+testCluster); got != tc.ok {
			t.Errorf("%s: read the switch %v, want %v: %v\n%s", tc.name, got, tc.ok, err, out)
		}
	}
}

// TestConnectChecksTLS: an ssl endpoint needs a TLS configuration with a client certificate,
// and a TLS configuration needs an ssl endpoint.
func TestConnectChecksTLS(t *testing.T) {
	withCert := &tls.Config{Certificates: []tls.Certificate{{}}}
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"ssl without TLS", Options{Endpoint: "ssl:h:6641"}, "needs a TLS configuration"},
		{"ssl without certificate", Options{Endpoint: "ssl:h:6641", TLS: &tls.Config{}}, "no client certificate"},
		{"tcp with TLS", Options{Endpoint: "tcp:h:6641", TLS: withCert}, "not ssl:HOST:PORT"},
		{"ssl with certificate", Options{Endpoint: "ssl:h:6641", TLS: withCert}, ""},
		{"unix", Options{Endpoint: "unix:/x"}, ""},
	} {
		err := checkTLS(tc.opts, "NB")
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestServerTrustsEveryCAOfItsBundle: ovsdb-server given a CA file holding two CAs'
// certificates takes clients of either, and still refuses a third CA's. The member chart's SB
// database trusts the central CA and the node CA so (internal/cluster/ovncerts.go), while its
// NB database trusts the central CA alone.
func TestServerTrustsEveryCAOfItsBundle(t *testing.T) {
	f := newTLSFixture(t)
	third, err := pki.NewCA("third", 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca, err := os.ReadFile(f.caFile)
	if err != nil {
		t.Fatal(err)
	}
	foreignCA, err := os.ReadFile(f.foreignCAFile)
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "bundle.crt")
	if err := os.WriteFile(bundle, append(ca, foreignCA...), 0o600); err != nil {
		t.Fatal(err)
	}
	thirdCert, thirdKey, err := third.Issue(pki.Leaf{CommonName: "stranger", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	tc, tk := filepath.Join(dir, "third.crt"), filepath.Join(dir, "third.key")
	for p, b := range map[string][]byte{tc: thirdCert, tk: thirdKey} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	server := f.server
	server.CA = bundle
	nb := ovntest.StartNBTLS(t, server)
	for _, c := range []struct {
		name, cert, key string
		ok              bool
	}{
		{"the first CA's client", f.clientCert, f.clientKey, true},
		{"the second CA's client", f.foreignCert, f.foreignKey, true},
		{"a third CA's client", tc, tk, false},
	} {
		out, err := exec.Command("ovn-nbctl", "--db="+nb.SSLEndpoint, "--timeout=5", "-p", c.key, "-c", c.cert, "-C", f.caFile, "ls-list").CombinedOutput()
		if got := err == nil; got != c.ok {
			t.Errorf("%s: served %v, want %v: %v\n%s", c.name, got, c.ok, err, out)
		}
	}
}
