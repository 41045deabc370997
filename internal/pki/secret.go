package pki

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// CACertKey is the key of the trusted CA's certificate in every Secret of this package, next
// to corev1.TLSCertKey and corev1.TLSPrivateKeyKey (the usual layout of kubernetes.io/tls
// Secrets, which cert-manager writes too: a chart reads either).
const CACertKey = "ca.crt"

// ManagedByLabel marks the Secrets this package writes, so that people and `octopus gather`
// see where they come from (Helm does not own them: an uninstall leaves them, and a
// reinstall finds the same CA).
const ManagedByLabel = "octopus.io/issued-by"

// EnsureCA returns the CA kept in Secret namespace/name, making it (named commonName) when the
// Secret does not exist. Two installers racing both read the winner's CA.
func EnsureCA(ctx context.Context, cs kubernetes.Interface, namespace, name, commonName string) (*CA, error) {
	for range 2 {
		s, err := cs.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			ca, err := ParseCA(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
			if err != nil {
				return nil, fmt.Errorf("the CA in Secret %s/%s (delete it to make a new one, then every certificate it signed is issued again): %w", namespace, name, err)
			}
			return ca, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading the CA Secret %s/%s: %w", namespace, name, err)
		}
		ca, err := NewCA(commonName, 0)
		if err != nil {
			return nil, err
		}
		certPEM, keyPEM, err := ca.PEM()
		if err != nil {
			return nil, err
		}
		_, err = cs.CoreV1().Secrets(namespace).Create(ctx, tlsSecret(namespace, name, certPEM, keyPEM, certPEM), metav1.CreateOptions{})
		if err == nil {
			return ca, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("storing the CA in Secret %s/%s: %w", namespace, name, err)
		}
	}
	return nil, fmt.Errorf("the CA Secret %s/%s was created and deleted while being read; try again", namespace, name)
}

// EnsureLeaf keeps in Secret namespace/name a key and a certificate for l signed by ca, with
// the certificates of trust (ca's alone when none are given) as CACertKey: what its holder
// trusts needs not be what signed it, as for a client signed by a CA of its own that must
// verify a server of another. It issues a new one when the Secret is missing or Needs says so
// (or the key, the CA certificates do not match), and says why ("" when it left it alone).
func EnsureLeaf(ctx context.Context, cs kubernetes.Interface, namespace, name string, ca *CA, l Leaf, trust ...*CA) (string, error) {
	secrets := cs.CoreV1().Secrets(namespace)
	if len(trust) == 0 {
		trust = []*CA{ca}
	}
	var caPEM []byte
	for _, t := range trust {
		caPEM = append(caPEM, CertPEM(t.Cert)...)
	}
	old, err := secrets.Get(ctx, name, metav1.GetOptions{})
	why := ""
	switch {
	case apierrors.IsNotFound(err):
		why, old = "missing", nil
	case err != nil:
		return "", fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
	default:
		why = ca.Needs(old.Data[corev1.TLSCertKey], l, time.Now())
		if why == "" && !keyMatches(old.Data[corev1.TLSCertKey], old.Data[corev1.TLSPrivateKeyKey]) {
			why = "key does not match"
		}
		if why == "" && !sameBytes(old.Data[CACertKey], caPEM) {
			why = "other CA certificate"
		}
	}
	if why == "" {
		return "", nil
	}
	certPEM, keyPEM, err := ca.Issue(l)
	if err != nil {
		return "", err
	}
	s := tlsSecret(namespace, name, certPEM, keyPEM, caPEM)
	if old == nil {
		_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
	} else {
		s.ResourceVersion = old.ResourceVersion
		s.Labels, s.Annotations = mergeLabels(old.Labels, s.Labels), old.Annotations
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		return "", fmt.Errorf("storing the certificate of %q in Secret %s/%s: %w", l.CommonName, namespace, name, err)
	}
	return why, nil
}

func tlsSecret(namespace, name string, certPEM, keyPEM, caPEM []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{ManagedByLabel: "octopus"}},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       certPEM,
			corev1.TLSPrivateKeyKey: keyPEM,
			CACertKey:               caPEM,
		},
	}
}

func mergeLabels(old, add map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range old {
		out[k] = v
	}
	for k, v := range add {
		out[k] = v
	}
	return out
}
