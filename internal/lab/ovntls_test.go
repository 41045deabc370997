package lab_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/pki"
)

// ovnCentralName is the name the member chart's OVN databases serve under (their Service).
const ovnCentralName = "octopus-ovn-central." + v1alpha1.SystemNamespace + ".svc"

// labCA reads the secondary network's CA of a cluster from its Secret (the test holds the
// cluster's admin credential, as join did when it made it).
func labCA(ctx context.Context, t *testing.T, cs kubernetes.Interface) *pki.CA {
	t.Helper()
	s, err := cs.CoreV1().Secrets(v1alpha1.SystemNamespace).Get(ctx, cluster.OVNCASecret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the OVN CA Secret: %v", err)
	}
	ca, err := pki.ParseCA(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// nbctlDB are ovn-nbctl's options to reach the NB database at ip:6641 as a client the test
// authenticates with a certificate it issues from the cluster's CA: the databases take no
// other client.
func nbctlDB(ctx context.Context, t *testing.T, cs kubernetes.Interface, ip string) []string {
	t.Helper()
	ca := labCA(ctx, t, cs)
	certPEM, keyPEM, err := ca.Issue(pki.Leaf{CommonName: "lab-test", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": pki.CertPEM(ca.Cert)}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"--db=ssl:" + net.JoinHostPort(ip, "6641"),
		"-p", filepath.Join(dir, "tls.key"), "-c", filepath.Join(dir, "tls.crt"), "-C", filepath.Join(dir, "ca.crt")}
}

// ovsdbCall sends one JSON-RPC request to the OVSDB server at addr from network namespace
// netns (a pod's), over TLS when cfg is set, and returns the reply's result; an error when the
// server does not answer within 5 s, closes the connection or refuses the handshake.
func ovsdbCall(netns, addr string, cfg *tls.Config, method string, params ...any) (json.RawMessage, error) {
	var conn net.Conn
	if err := tunneltest.InErr(netns, func() error {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		conn = c
		return err
	}); err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if cfg != nil {
		tc := tls.Client(conn, cfg)
		if err := tc.Handshake(); err != nil {
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		conn = tc
	}
	if params == nil {
		params = []any{}
	}
	if err := json.NewEncoder(conn).Encode(map[string]any{"method": method, "params": params, "id": 1}); err != nil {
		return nil, fmt.Errorf("sending %s: %w", method, err)
	}
	var reply struct {
		Result json.RawMessage `json:"result"`
		Error  any             `json:"error"`
	}
	if err := json.NewDecoder(conn).Decode(&reply); err != nil {
		return nil, fmt.Errorf("reading the answer to %s: %w", method, err)
	}
	if reply.Error != nil {
		return nil, fmt.Errorf("%s: %v", method, reply.Error)
	}
	return reply.Result, nil
}

// checkOVNDatabasesRefuseStrangers checks, from pod (an ordinary pod of the cluster, in its own
// network namespace, reaching the databases' Service as any pod does), that neither the NB
// nor the SB database answers a plaintext client, a TLS client without a certificate, or one
// with a certificate of another CA: list_dbs (a read) and a transact inserting a switch (a
// write) go unanswered, and the NB database holds no such switch afterwards. A client with a
// certificate of the cluster's CA is answered from the same pod, so the path is open and it is
// the databases that refuse. With the certificate every node holds (ovn-controller's, of the
// node CA) the SB answers and the NB neither reads nor writes.
func checkOVNDatabasesRefuseStrangers(ctx context.Context, t *testing.T, l *lab.Lab, pod xpod) {
	cs := clientset(t, l.Env.Cluster(pod.cluster).Kubeconfig)
	svc, err := cs.CoreV1().Services(v1alpha1.SystemNamespace).Get(ctx, "octopus-ovn-central", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the OVN central Service: %v", err)
	}
	other, err := pki.NewCA("someone-else", 0)
	if err != nil {
		t.Fatal(err)
	}
	// sending presents cert whatever CAs the server names in its request: with Certificates
	// instead, Go's client sends no certificate the server's CA did not sign, and the foreign
	// case would be the certificate-less one again.
	sending := func(cert tls.Certificate, roots *x509.CertPool) *tls.Config {
		return &tls.Config{
			RootCAs: roots, ServerName: ovnCentralName, MinVersion: tls.VersionTLS12,
			// A stranger does not check whom it talks to; it wants to be answered.
			InsecureSkipVerify:   roots == nil, //nolint:gosec // the attacker's side
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
		}
	}
	issue := func(ca *pki.CA) tls.Certificate {
		certPEM, keyPEM, err := ca.Issue(pki.Leaf{CommonName: "ovnmaster", Client: true})
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	foreign := sending(issue(other), nil)
	noCert := &tls.Config{ServerName: ovnCentralName, MinVersion: tls.VersionTLS12, InsecureSkipVerify: true} //nolint:gosec // the attacker's side

	dbs := []struct{ name, port, table string }{{"OVN_Northbound", "6641", "Logical_Switch"}, {"OVN_Southbound", "6642", "Chassis_Private"}}
	for _, db := range dbs {
		addr := net.JoinHostPort(svc.Spec.ClusterIP, db.port)
		insert := []any{db.name, map[string]any{"op": "insert", "table": db.table, "row": map[string]any{"name": "intruder"}}}
		for _, c := range []struct {
			who string
			cfg *tls.Config
		}{{"plaintext", nil}, {"TLS without a client certificate", noCert}, {"a certificate of another CA", foreign}} {
			for _, call := range []struct {
				what, method string
				params       []any
			}{{"read", "list_dbs", nil}, {"write", "transact", insert}} {
				if res, err := ovsdbCall(pod.netns, addr, c.cfg, call.method, call.params...); err == nil {
					t.Errorf("%s from pod %s, %s: the %s (%s) was answered: %s", db.name, pod.name, c.who, call.what, call.method, res)
				} else {
					t.Logf("%s from pod %s, %s: %s refused: %v", db.name, pod.name, c.who, call.what, err)
				}
			}
		}
	}
	// The path from the pod is open: a client with a certificate of the cluster's CA is
	// answered, so it is the databases that refused the others.
	ca := labCA(ctx, t, cs)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	ours := sending(issue(ca), roots)
	for _, db := range dbs {
		res, err := ovsdbCall(pod.netns, net.JoinHostPort(svc.Spec.ClusterIP, db.port), ours, "list_dbs")
		if err != nil || !strings.Contains(string(res), db.name) {
			t.Errorf("%s from pod %s with a certificate of the cluster's CA: %s, %v (the path to the database is broken, so the refusals prove nothing)", db.name, pod.name, res, err)
		}
	}
	// The certificate every node holds (ovn-controller's, of the node CA) is the SB's client
	// and no NB client: a node taken over cannot rewrite the cluster's switches and ports.
	node, err := cs.CoreV1().Secrets(v1alpha1.SystemNamespace).Get(ctx, cluster.OVNControllerSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeCert, err := tls.X509KeyPair(node.Data[corev1.TLSCertKey], node.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	nodeRoots := x509.NewCertPool()
	if !nodeRoots.AppendCertsFromPEM(node.Data[pki.CACertKey]) {
		t.Fatalf("Secret %s has no CA certificate", cluster.OVNControllerSecret)
	}
	asNode := sending(nodeCert, nodeRoots)
	nbInsert := []any{dbs[0].name, map[string]any{"op": "insert", "table": dbs[0].table, "row": map[string]any{"name": "intruder"}}}
	for _, call := range []struct {
		what, method string
		params       []any
	}{{"read", "list_dbs", nil}, {"write", "transact", nbInsert}} {
		if res, err := ovsdbCall(pod.netns, net.JoinHostPort(svc.Spec.ClusterIP, dbs[0].port), asNode, call.method, call.params...); err == nil {
			t.Errorf("OVN_Northbound with the nodes' ovn-controller certificate: the %s (%s) was answered: %s", call.what, call.method, res)
		} else {
			t.Logf("OVN_Northbound with the nodes' ovn-controller certificate: %s refused: %v", call.what, err)
		}
	}
	if res, err := ovsdbCall(pod.netns, net.JoinHostPort(svc.Spec.ClusterIP, dbs[1].port), asNode, "list_dbs"); err != nil || !strings.Contains(string(res), dbs[1].name) {
		t.Errorf("OVN_Southbound with the nodes' ovn-controller certificate: %s, %v; want it served", res, err)
	}
	nb := centralNBOf(ctx, t, cs, pod.netns)
	out, err := nb(ctx, "--bare", "--columns=name", "find", "Logical_Switch", "name=intruder")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "" {
		t.Errorf("a stranger wrote the NB database: switch %q", out)
	}
}
