package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func mustCA(t *testing.T, name string) *CA {
	t.Helper()
	ca, err := NewCA(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestIssueVerifies: a leaf verifies against its CA with the usages asked for, not against
// another CA; a CA survives PEM and back.
func TestIssueVerifies(t *testing.T) {
	ca, other := mustCA(t, "a"), mustCA(t, "b")
	certPEM, keyPEM, err := ca.Issue(Leaf{CommonName: "db", Server: true, DNSNames: []string{"db.ns.svc"}, IPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	if !keyMatches(certPEM, keyPEM) {
		t.Fatal("key does not match its certificate")
	}
	cert, _ := ParseCert(certPEM)
	for _, tc := range []struct {
		ca    *CA
		usage x509.ExtKeyUsage
		ok    bool
	}{{ca, x509.ExtKeyUsageServerAuth, true}, {ca, x509.ExtKeyUsageClientAuth, false}, {other, x509.ExtKeyUsageServerAuth, false}} {
		pool := x509.NewCertPool()
		pool.AddCert(tc.ca.Cert)
		_, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "db.ns.svc", KeyUsages: []x509.ExtKeyUsage{tc.usage}})
		if (err == nil) != tc.ok {
			t.Errorf("verify with CA %s usage %v: err %v, want ok %v", tc.ca.Cert.Subject.CommonName, tc.usage, err, tc.ok)
		}
	}
	c, k, err := ca.PEM()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseCA(c, k)
	if err != nil || !back.Cert.Equal(ca.Cert) {
		t.Fatalf("ParseCA(PEM()) = %v, %v", back, err)
	}
	if _, err := ParseCA(c, mustKey(t, other)); err == nil {
		t.Error("ParseCA accepted another CA's key")
	}
	if _, _, err := ca.Issue(Leaf{CommonName: "x"}); err == nil {
		t.Error("a leaf with no usage was issued")
	}
}

func mustKey(t *testing.T, ca *CA) []byte {
	_, k, err := ca.PEM()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSignCSR: the CA's holder signs the requester's key under the name it decides; a CSR
// naming someone else is refused.
func TestSignCSR(t *testing.T) {
	ca := mustCA(t, "ic")
	csr, keyPEM, err := NewCSR("east")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignCSR(csr, Leaf{CommonName: "east", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	if !keyMatches(certPEM, keyPEM) {
		t.Error("the signed certificate is not for the CSR's key")
	}
	if _, err := ca.SignCSR(csr, Leaf{CommonName: "west", Client: true}); err == nil || !strings.Contains(err.Error(), `names "east"`) {
		t.Errorf("a CSR for east signed as west: %v", err)
	}
}

// TestNeeds is the rotation rule.
func TestNeeds(t *testing.T) {
	ca, other := mustCA(t, "a"), mustCA(t, "b")
	l := Leaf{CommonName: "db", Server: true, DNSNames: []string{"x", "y"}, Validity: 30 * 24 * time.Hour}
	good, _, _ := ca.Issue(l)
	foreign, _, _ := other.Issue(l)
	now := time.Now()
	for _, tc := range []struct {
		name string
		cert []byte
		l    Leaf
		now  time.Time
		want string
	}{
		{"good", good, l, now, ""},
		{"names in another order", good, Leaf{CommonName: "db", Server: true, DNSNames: []string{"y", "x"}}, now, ""},
		{"garbage", []byte("x"), l, now, "unreadable"},
		{"other CA", foreign, l, now, "another CA"},
		{"other name", good, Leaf{CommonName: "dc", Server: true, DNSNames: l.DNSNames}, now, "named"},
		{"other DNS", good, Leaf{CommonName: "db", Server: true, DNSNames: []string{"x"}}, now, "DNS"},
		{"other IPs", good, Leaf{CommonName: "db", Server: true, DNSNames: l.DNSNames, IPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}, now, "IP"},
		{"other usage", good, Leaf{CommonName: "db", Client: true, DNSNames: l.DNSNames}, now, "usages"},
		{"two thirds gone", good, l, now.Add(19 * 24 * time.Hour), ""},
		{"less than a third left", good, l, now.Add(21 * 24 * time.Hour), "expires"},
	} {
		got := ca.Needs(tc.cert, tc.l, tc.now)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: Needs = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestEnsureSecrets: the CA is made once and read back; a leaf is issued when missing, left
// alone when good, issued again when the CA, the names or the CAs it trusts change.
func TestEnsureSecrets(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	ca, err := EnsureCA(ctx, cs, "ns", "ca", "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	again, err := EnsureCA(ctx, cs, "ns", "ca", "test-ca")
	if err != nil || !again.Cert.Equal(ca.Cert) {
		t.Fatalf("second EnsureCA made another CA (%v)", err)
	}
	l := Leaf{CommonName: "db", Server: true, DNSNames: []string{"db"}}
	l2 := Leaf{CommonName: "db", Server: true, DNSNames: []string{"db", "db2"}}
	newCA, peer := mustCA(t, "new"), mustCA(t, "peer")
	steps := []struct {
		ca    *CA
		l     Leaf
		trust []*CA
		want  string
	}{
		{ca, l, nil, "missing"},
		{ca, l, nil, ""},
		{ca, l2, nil, "DNS"},
		{newCA, l2, nil, "another CA"},
		{newCA, l2, []*CA{newCA}, ""},
		{newCA, l2, []*CA{newCA, peer}, "other CA certificate"},
		{newCA, l2, []*CA{newCA, peer}, ""},
		{newCA, l2, []*CA{peer}, "other CA certificate"},
	}
	for i, st := range steps {
		why, err := EnsureLeaf(ctx, cs, "ns", "leaf", st.ca, st.l, st.trust...)
		if err != nil {
			t.Fatal(err)
		}
		if (st.want == "") != (why == "") || !strings.Contains(why, st.want) {
			t.Errorf("step %d: EnsureLeaf said %q, want %q", i, why, st.want)
		}
		s, err := cs.CoreV1().Secrets("ns").Get(ctx, "leaf", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		trusted := CertPEM(st.ca.Cert)
		if st.trust != nil {
			trusted = nil
			for _, c := range st.trust {
				trusted = append(trusted, CertPEM(c.Cert)...)
			}
		}
		if s.Type != corev1.SecretTypeTLS || st.ca.Needs(s.Data[corev1.TLSCertKey], st.l, time.Now()) != "" ||
			!sameBytes(s.Data[CACertKey], trusted) || s.Labels[ManagedByLabel] == "" {
			t.Errorf("step %d: Secret not right: %+v", i, s)
		}
	}
}

// TestMutualTLS: with ServerConfig and ClientConfig, a client with a certificate of the CA
// connects; one without a certificate, or with another CA's, is refused by the server.
func TestMutualTLS(t *testing.T) {
	ca, other := mustCA(t, "a"), mustCA(t, "b")
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	issue := func(ca *CA, prefix string, l Leaf) (string, string) {
		c, k, err := ca.Issue(l)
		if err != nil {
			t.Fatal(err)
		}
		return write(prefix+".crt", c), write(prefix+".key", k)
	}
	caFile := write("ca.crt", CertPEM(ca.Cert))
	sc, sk := issue(ca, "server", Leaf{CommonName: "db", Server: true, DNSNames: []string{"db.test"}})
	cc, ck := issue(ca, "client", Leaf{CommonName: "good", Client: true})
	fc, fk := issue(other, "foreign", Leaf{CommonName: "bad", Client: true})
	srv, err := ServerConfig(sc, sk, caFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err == nil {
					_, _ = c.Write([]byte("ok"))
				}
			}()
		}
	}()
	for _, tc := range []struct {
		name         string
		cert, key    string
		dropCert, ok bool
	}{
		{"our client", cc, ck, false, true},
		{"no certificate", cc, ck, true, false},
		{"another CA's certificate", fc, fk, false, false},
	} {
		cfg, err := ClientConfig(tc.cert, tc.key, caFile, "db.test")
		if err != nil {
			t.Fatal(err)
		}
		if tc.dropCert {
			cfg.GetClientCertificate = nil
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
		got := false
		if err == nil {
			buf := make([]byte, 2)
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, _ := conn.Read(buf)
			got = string(buf[:n]) == "ok"
			conn.Close()
		}
		if got != tc.ok {
			t.Errorf("%s: served %v, want %v (dial error %v)", tc.name, got, tc.ok, err)
		}
	}
}
