package icsigner

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func errNo(key string) error { return errors.New("no " + key + " yet") }

func requestFor(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

// publicKey is the public half of a PEM private key as pki writes it.
func publicKey(t *testing.T, keyPEM []byte) crypto.PublicKey {
	t.Helper()
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		t.Fatal("no PEM key")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		ek, err2 := x509.ParseECPrivateKey(b.Bytes)
		if err2 != nil {
			t.Fatalf("parsing the key: %v; %v", err, err2)
		}
		return ek.Public()
	}
	return k.(crypto.Signer).Public()
}
