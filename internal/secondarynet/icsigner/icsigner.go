// Package icsigner is `octopus-ovn ic-signer`, on the hub: it signs each member cluster's
// OVN-IC client certificate with the hub's interconnection CA, for the cluster ID the
// request's ConfigMap is labelled with. The hub's admission policy lets a cluster's
// credential write only ConfigMaps labelled with its own ID, so a cluster obtains a
// certificate in its own name and no other; the key never leaves the member (it sends a
// certificate request). docs/secondary-network.md, "Interconnection databases on the hub".
package icsigner

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/pki"
)

// Leaf is the client certificate a cluster gets: named after the cluster, client use only
// (it cannot serve a database nor join a raft cluster).
func Leaf(clusterID string) pki.Leaf { return pki.Leaf{CommonName: clusterID, Client: true} }

// Reconciler signs one request ConfigMap.
type Reconciler struct {
	Client client.Client
	CA     *pki.CA
	Log    logr.Logger
	// Now is the clock of the renewal rule; nil: time.Now.
	Now func() time.Time
}

// Reconcile signs the request of ConfigMap req, or writes why not, unless its certificate is
// already good for that request (same key, the cluster's name, not due): running it again
// writes nothing.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var cm corev1.ConfigMap
	if err := r.Client.Get(ctx, req.NamespacedName, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading %s: %w", req.NamespacedName, err)
	}
	if cm.Labels[v1alpha1.InterconnectCSRLabel] == "" {
		return reconcile.Result{}, nil
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	certPEM, err := r.sign(&cm, now())
	want := map[string]string{}
	switch {
	case err != nil:
		want[v1alpha1.InterconnectErrorKey] = err.Error()
	case certPEM == "":
		return reconcile.Result{}, nil // good as it is
	default:
		caPEM, _, _ := r.CA.PEM()
		want[v1alpha1.InterconnectCertKey], want[v1alpha1.InterconnectCAKey] = certPEM, string(caPEM)
	}
	if sameData(cm.Data, want) {
		return reconcile.Result{}, nil
	}
	data := map[string]string{v1alpha1.InterconnectCSRKey: cm.Data[v1alpha1.InterconnectCSRKey]}
	for k, v := range want {
		data[k] = v
	}
	cm.Data = data
	// An update, not a patch: it carries the resourceVersion read, so a request replaced
	// meanwhile (a member that joined again with a new key) is read again, not overwritten.
	if err := r.Client.Update(ctx, &cm); err != nil {
		return reconcile.Result{}, fmt.Errorf("writing the certificate into %s: %w", req.NamespacedName, err)
	}
	if err != nil {
		r.Log.Info("Refused an interconnection certificate request", "configMap", req.NamespacedName, "reason", want[v1alpha1.InterconnectErrorKey])
	} else {
		r.Log.Info("Signed an interconnection client certificate", "configMap", req.NamespacedName, "cluster", cm.Labels[v1alpha1.ClusterLabel])
	}
	return reconcile.Result{}, nil
}

// sign returns a new certificate for cm's request, "" when the one it holds is good, or why it
// cannot sign: the identity is the ConfigMap's cluster label, which the admission policy
// confines to the writer's own ID, and a request naming another cluster is refused.
func (r *Reconciler) sign(cm *corev1.ConfigMap, now time.Time) (string, error) {
	id := cm.Labels[v1alpha1.ClusterLabel]
	if id == "" {
		return "", fmt.Errorf("no %s label: the request must be written with the cluster's own hub credential (octopus join --interconnect ovn-ic does)", v1alpha1.ClusterLabel)
	}
	if cm.Name != v1alpha1.InterconnectCSRName(id) {
		return "", fmt.Errorf("cluster %s's request must be the ConfigMap %s", id, v1alpha1.InterconnectCSRName(id))
	}
	csrPEM := []byte(cm.Data[v1alpha1.InterconnectCSRKey])
	csrKey, err := requestKey(csrPEM)
	if err != nil {
		return "", fmt.Errorf("key %s: %w (octopus join writes it)", v1alpha1.InterconnectCSRKey, err)
	}
	if have := []byte(cm.Data[v1alpha1.InterconnectCertKey]); len(have) > 0 && r.CA.Needs(have, Leaf(id), now) == "" && sameKey(have, csrKey) {
		return "", nil
	}
	cert, err := r.CA.SignCSR(csrPEM, Leaf(id))
	if err != nil {
		return "", fmt.Errorf("cluster %s's certificate request: %w (the request must name the cluster ID it is written by)", id, err)
	}
	return string(cert), nil
}

func requestKey(csrPEM []byte) (crypto.PublicKey, error) {
	b, _ := pem.Decode(csrPEM)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("no PEM CERTIFICATE REQUEST block")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, err
	}
	return csr.PublicKey, nil
}

// sameKey says whether certPEM certifies key: a request with a new key (the member made a new
// one) needs a new certificate even when the old one is not due.
func sameKey(certPEM []byte, key crypto.PublicKey) bool {
	cert, err := pki.ParseCert(certPEM)
	if err != nil {
		return false
	}
	k, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(key)
}

// sameData says whether data already holds want and nothing of the other outcome.
func sameData(data, want map[string]string) bool {
	for _, k := range []string{v1alpha1.InterconnectCertKey, v1alpha1.InterconnectCAKey, v1alpha1.InterconnectErrorKey} {
		if data[k] != want[k] {
			return false
		}
	}
	return true
}
