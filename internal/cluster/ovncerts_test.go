package cluster

import (
	"crypto/x509"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/octopus-mcs/octopus/internal/pki"
)

// TestOVNCertificatesKeepNodesOffTheNB: the certificate every node holds (ovn-controller's) is
// one the SB database takes and the NB database refuses, while the central components'
// certificates are taken by both; every holder verifies the databases' servers; and an install
// whose ovn-controller certificate the central CA signed (before the node CA) has it issued
// again by the node CA, the rest left alone.
func TestOVNCertificatesKeepNodesOffTheNB(t *testing.T) {
	ctx := t.Context()
	cs := fake.NewClientset()
	const ns = "octopus-system"
	// An install from before the node CA: every leaf of the central CA.
	central, err := pki.EnsureCA(ctx, cs, ns, OVNCASecret, "octopus-ovn-ca")
	if err != nil {
		t.Fatal(err)
	}
	for name, leaf := range ovnLeaves(ns) {
		if _, err := pki.EnsureLeaf(ctx, cs, ns, name, central, leaf.Leaf); err != nil {
			t.Fatal(err)
		}
	}
	before := secretVersions(t, cs, ns)

	if err := ensureOVNCertificates(ctx, cs, ns, nil); err != nil {
		t.Fatal(err)
	}
	after := secretVersions(t, cs, ns)
	for name := range ovnLeaves(ns) {
		changed := before[name] != after[name]
		if want := name == OVNControllerSecret || name == OVNSouthboundSecret; changed != want {
			t.Errorf("Secret %s reissued: %t, want %t", name, changed, want)
		}
	}

	secret := func(name string) *corev1.Secret {
		s, err := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	pool := func(name string) *x509.CertPool {
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(secret(name).Data[pki.CACertKey]) {
			t.Fatalf("Secret %s has no CA certificate", name)
		}
		return p
	}
	verifies := func(certSecret string, roots *x509.CertPool, usage x509.ExtKeyUsage) bool {
		c, err := pki.ParseCert(secret(certSecret).Data[corev1.TLSCertKey])
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}})
		return err == nil
	}
	nb, sb := pool(OVNCentralSecret), pool(OVNSouthboundSecret)
	for _, tc := range []struct {
		client     string
		nbOK, sbOK bool
	}{
		{OVNControllerSecret, false, true},
		{OVNMasterSecret, true, true},
		{OVNNorthdSecret, true, true},
		{OVNInterconnectLocalSecret, true, true},
	} {
		if got := verifies(tc.client, nb, x509.ExtKeyUsageClientAuth); got != tc.nbOK {
			t.Errorf("the NB database takes %s's certificate: %t, want %t", tc.client, got, tc.nbOK)
		}
		if got := verifies(tc.client, sb, x509.ExtKeyUsageClientAuth); got != tc.sbOK {
			t.Errorf("the SB database takes %s's certificate: %t, want %t", tc.client, got, tc.sbOK)
		}
		for _, server := range []string{OVNCentralSecret, OVNSouthboundSecret} {
			if !verifies(server, pool(tc.client), x509.ExtKeyUsageServerAuth) {
				t.Errorf("%s does not verify the server certificate of %s", tc.client, server)
			}
		}
	}

	// Again: nothing is due.
	if err := ensureOVNCertificates(ctx, cs, ns, nil); err != nil {
		t.Fatal(err)
	}
	if again := secretVersions(t, cs, ns); len(again) != len(after) {
		t.Fatalf("Secrets %v, then %v", after, again)
	} else {
		for name, v := range after {
			if again[name] != v {
				t.Errorf("a second run reissued %s", name)
			}
		}
	}
}

// secretVersions is each Secret of ns by its certificate.
func secretVersions(t *testing.T, cs *fake.Clientset, ns string) map[string]string {
	t.Helper()
	l, err := cs.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range l.Items {
		out[s.Name] = string(s.Data[corev1.TLSCertKey])
	}
	return out
}
