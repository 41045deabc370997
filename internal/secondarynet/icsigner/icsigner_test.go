package icsigner

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/pki"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

const ns = "octopus-hub"

func request(t *testing.T, name, label, commonName string) (*corev1.ConfigMap, []byte) {
	t.Helper()
	csr, key, err := pki.NewCSR(commonName)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{v1alpha1.ClusterLabel: label, v1alpha1.InterconnectCSRLabel: "true"}},
		Data: map[string]string{v1alpha1.InterconnectCSRKey: string(csr)},
	}, key
}

// TestSignerSignsEachClusterInItsOwnName runs the signer against a real API server: a
// cluster's request is signed for the ID of its label, a client certificate of the hub's CA
// for the request's key; a request naming another cluster is refused with the reason, and no
// certificate; signing again writes nothing; a new key gets a new certificate.
func TestSignerSignsEachClusterInItsOwnName(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub")
	cfg := env.Cluster("hub").RESTConfig()
	c := testenv.Client(t, cfg)
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("octopus-ic-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- Run(ctx, Options{Hub: cfg, Namespace: ns, CA: ca, Log: testr.New(t)}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	east, eastKey := request(t, v1alpha1.InterconnectCSRName("east"), "east", "east")
	// Another cluster's name in the request of south: the label decides, and they differ.
	south, _ := request(t, v1alpha1.InterconnectCSRName("south"), "south", "east")
	// A ConfigMap of east that is not its request's name.
	stray, _ := request(t, "interconnect-csr-other", "east", "east")
	for _, cm := range []*corev1.ConfigMap{east, south, stray} {
		if err := c.Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(name, key string) *corev1.ConfigMap {
		t.Helper()
		got := &corev1.ConfigMap{}
		testenv.EventuallyEvery(t, 20*time.Millisecond, 30*time.Second, "the signer's answer in "+name, func() error {
			if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, got); err != nil {
				return err
			}
			if got.Data[key] == "" {
				return errNo(key)
			}
			return nil
		})
		return got
	}

	signed := wait(east.Name, v1alpha1.InterconnectCertKey)
	cert, err := pki.ParseCert([]byte(signed.Data[v1alpha1.InterconnectCertKey]))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("east's certificate: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("east's certificate serves: a cluster could stand in for the databases")
	}
	if cert.Subject.CommonName != "east" || !sameKey([]byte(signed.Data[v1alpha1.InterconnectCertKey]), publicKey(t, eastKey)) {
		t.Errorf("east's certificate names %q; want east, for the key east kept", cert.Subject.CommonName)
	}
	if caPEM, _, _ := ca.PEM(); signed.Data[v1alpha1.InterconnectCAKey] != string(caPEM) {
		t.Error("east's request does not carry the CA's certificate")
	}

	for name, want := range map[string]string{south.Name: `names "east", not "south"`, stray.Name: "must be the ConfigMap interconnect-csr-east"} {
		refused := wait(name, v1alpha1.InterconnectErrorKey)
		if !strings.Contains(refused.Data[v1alpha1.InterconnectErrorKey], want) || refused.Data[v1alpha1.InterconnectCertKey] != "" {
			t.Errorf("%s: %v; want refused with %q and no certificate", name, refused.Data, want)
		}
	}

	// Nothing more to do: the signer's next look writes nothing.
	r := &Reconciler{Client: c, CA: ca, Log: testr.New(t)}
	if _, err := r.Reconcile(t.Context(), requestFor(east.Name)); err != nil {
		t.Fatal(err)
	}
	again := &corev1.ConfigMap{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(east), again); err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != signed.ResourceVersion {
		t.Error("signing a signed request again wrote it")
	}

	// A new key (the member joined again): a new certificate, for it.
	csr, newKey, err := pki.NewCSR("east")
	if err != nil {
		t.Fatal(err)
	}
	again.Data = map[string]string{v1alpha1.InterconnectCSRKey: string(csr)}
	if err := c.Update(t.Context(), again); err != nil {
		t.Fatal(err)
	}
	renewed := wait(east.Name, v1alpha1.InterconnectCertKey)
	if !sameKey([]byte(renewed.Data[v1alpha1.InterconnectCertKey]), publicKey(t, newKey)) {
		t.Error("the certificate after a new request is not for the new key")
	}
}
