package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/pki"
	"github.com/octopus-mcs/octopus/internal/progress"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icsigner"
)

// InterconnectSecret holds, in the member's octopus-system, the cluster's OVN-IC client
// certificate: its key (made here, never sent anywhere), the certificate the hub's signer
// issued for the cluster's ID, and the interconnection CA's certificate, the only one the
// member's ovn-ic trusts.
const InterconnectSecret = "octopus-ovn-ic-tls"

// RequestInterconnectCertificate gets the cluster's OVN-IC client certificate at join: a new
// key and a request for clusterID, published on the hub with the cluster's own credential
// (hubC), whose admission policy holds it to that ID; once the hub's signer
// (`octopus-ovn ic-signer`) has written the certificate back, key, certificate and CA go into
// InterconnectSecret in the member (memberC). A Secret that already holds a certificate for
// its key, of the CA the hub answers with, not due for renewal, is kept: joining again changes
// nothing then.
func RequestInterconnectCertificate(ctx context.Context, hubC, memberC client.Client, hubNS, clusterID string, timeout time.Duration, p *progress.Reporter) error {
	existing := &corev1.Secret{}
	err := memberC.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: InterconnectSecret}, existing)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading the interconnection certificate (Secret %s/%s): %w", v1alpha1.SystemNamespace, InterconnectSecret, err)
	}
	if err == nil && current(existing, clusterID) {
		return nil
	}
	csr, key, err := pki.NewCSR(clusterID)
	if err != nil {
		return err
	}
	req := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.InterconnectCSRName(clusterID), Namespace: hubNS,
			Labels: map[string]string{v1alpha1.ClusterLabel: clusterID, v1alpha1.InterconnectCSRLabel: "true"}},
		Data: map[string]string{v1alpha1.InterconnectCSRKey: string(csr)},
	}
	// Replaced whole (the old certificate and any refusal go with it): the signer answers this
	// request, not an earlier one.
	if err := hubC.Delete(ctx, req); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("replacing the interconnection certificate request %s/%s on the hub: %w", hubNS, req.Name, err)
	}
	if err := hubC.Create(ctx, req); err != nil {
		return fmt.Errorf("publishing the interconnection certificate request %s/%s on the hub: %w", hubNS, req.Name, err)
	}
	p.Step("Requested the cluster's interconnection certificate from the hub (ConfigMap %s/%s)", hubNS, req.Name)
	var certPEM, caPEM []byte
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got := &corev1.ConfigMap{}
		if err := hubC.Get(ctx, client.ObjectKeyFromObject(req), got); err != nil {
			return false, nil //nolint:nilerr // a transient read error: poll again
		}
		if got.Data[v1alpha1.InterconnectCSRKey] != string(csr) {
			return false, errors.New("the request was replaced on the hub meanwhile (another join of this cluster?): join again")
		}
		if why := got.Data[v1alpha1.InterconnectErrorKey]; why != "" {
			return false, fmt.Errorf("the hub's signer refused the interconnection certificate request: %s", why)
		}
		certPEM, caPEM = []byte(got.Data[v1alpha1.InterconnectCertKey]), []byte(got.Data[v1alpha1.InterconnectCAKey])
		return len(certPEM) > 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting %s for the hub to sign the interconnection certificate (is the hub deployed with --interconnect, and its octopus-ic-signer running?): %w", timeout, err)
	}
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: InterconnectSecret, Namespace: v1alpha1.SystemNamespace, Labels: kube.ManagedLabels()},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSPrivateKeyKey: key, corev1.TLSCertKey: certPEM, v1alpha1.InterconnectCAKey: caPEM},
	}
	if err := kube.Apply(ctx, memberC, secret); err != nil {
		return fmt.Errorf("storing the interconnection certificate in Secret %s/%s: %w", v1alpha1.SystemNamespace, InterconnectSecret, err)
	}
	p.Step("Stored the cluster's interconnection certificate in Secret %s/%s", v1alpha1.SystemNamespace, InterconnectSecret)
	return nil
}

// current says whether s holds a certificate for clusterID, of its CA, for its key, with more
// than a third of its life left (pki's renewal rule).
func current(s *corev1.Secret, clusterID string) bool {
	ca, err := pki.ParseCert(s.Data[v1alpha1.InterconnectCAKey])
	if err != nil {
		return false
	}
	// Needs checks signature, names, usages and life; the key is checked separately, since
	// only the CA's certificate (not its key) is here.
	verifier := &pki.CA{Cert: ca}
	return verifier.Needs(s.Data[corev1.TLSCertKey], icsigner.Leaf(clusterID), time.Now()) == "" && pki.KeyMatches(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
}

// checkInterconnect refuses, before anything is written, an interconnection the join cannot
// make: OVN-IC joins the clusters' OVN networks, the secondary network's switches.
func checkInterconnect(opts *JoinOptions) error {
	if opts.Interconnect == nil {
		return nil
	}
	ic := *opts.Interconnect // the caller's stays as it gave it
	opts.Interconnect = &ic
	if opts.Addressing != v1alpha1.AddressingSecondary {
		return fmt.Errorf("--interconnect ovn-ic joins the clusters' OVN networks: it needs --addressing secondary, not %s", opts.Addressing)
	}
	if err := ic.CheckAZName(opts.ClusterID); err != nil {
		return err
	}
	if len(ic.DBHosts) == 0 {
		return fmt.Errorf("--interconnect ovn-ic: %s is required (the hub nodes' addresses, where hub deploy --interconnect runs the IC databases)", icconfig.KeyDBHost)
	}
	ic.Enabled, ic.AZName = true, opts.ClusterID
	if opts.InterconnectCertTimeout == 0 {
		opts.InterconnectCertTimeout = 60 * time.Second
	}
	return nil
}

// joinInterconnect writes the member's ovn-ic-config, which its icmaster applies, and gets the
// cluster's interconnection certificate. hubC is the cluster's own credential.
func joinInterconnect(ctx context.Context, hubC, memberC client.Client, opts JoinOptions) error {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: icconfig.ConfigMapName, Namespace: icconfig.ConfigMapNamespace, Labels: kube.ManagedLabels()},
		Data:       opts.Interconnect.Data(),
	}
	if err := kube.Apply(ctx, memberC, cm); err != nil {
		return fmt.Errorf("writing the cluster's %s/%s: %w", icconfig.ConfigMapNamespace, icconfig.ConfigMapName, err)
	}
	opts.Progress.Step("Wrote %s/%s: AZ %s, IC databases at %s", icconfig.ConfigMapNamespace, icconfig.ConfigMapName, opts.ClusterID, strings.Join(opts.Interconnect.DBHosts, ","))
	return RequestInterconnectCertificate(ctx, hubC, memberC, opts.BrokerInfo.Namespace, opts.ClusterID, opts.InterconnectCertTimeout, opts.Progress)
}
