package cluster

import (
	"context"
	"crypto/x509"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
	"github.com/octopus-mcs/octopus/internal/pki"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icsigner"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestInterconnectCertificateAtJoin: a joined cluster gets its OVN-IC client certificate from
// the hub's signer with its own credential, in its own name and for the key it kept; joining
// again keeps it; another cluster's credential can neither request nor replace it.
func TestInterconnectCertificateAtJoin(t *testing.T) {
	f := newFabric(t, "east", "west", "north")
	hubCfg := f.env.Cluster("hub").RESTConfig()
	if _, err := hub.Deploy(t.Context(), hubCfg, hub.DeployOptions{Interconnect: &hub.InterconnectOptions{Image: "octopus-ovn:test"}}); err != nil {
		t.Fatal(err)
	}
	caSecret := &corev1.Secret{}
	if err := f.hub.Get(t.Context(), client.ObjectKey{Namespace: f.info.Namespace, Name: render.ICCASecret}, caSecret); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCA(caSecret.Data[corev1.TLSCertKey], caSecret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- icsigner.Run(ctx, icsigner.Options{Hub: hubCfg, Namespace: f.info.Namespace, CA: ca}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the signer: %v", err)
		}
	}()

	east, west := f.join(t, "east"), f.join(t, "west")
	eastMember := testenv.Client(t, f.env.Cluster("east").RESTConfig())
	if err := RequestInterconnectCertificate(t.Context(), f.as(t, east), eastMember, f.info.Namespace, "east", 30*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: InterconnectSecret}
	if err := eastMember.Get(t.Context(), key, secret); err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCert(secret.Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || cert.Subject.CommonName != "east" {
		t.Errorf("east's certificate (CN %q): %v; want a client certificate of the hub's IC CA named east", cert.Subject.CommonName, err)
	}
	if !pki.KeyMatches(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]) {
		t.Error("the certificate is not for the key in the Secret")
	}

	if err := RequestInterconnectCertificate(t.Context(), f.as(t, east), eastMember, f.info.Namespace, "east", 30*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	again := &corev1.Secret{}
	if err := eastMember.Get(t.Context(), key, again); err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != secret.ResourceVersion {
		t.Error("joining again replaced a certificate that was good")
	}

	// West's credential asking for east's certificate: the admission policy refuses west any
	// object labelled east, so nothing is signed for it.
	westMember := testenv.Client(t, f.env.Cluster("west").RESTConfig())
	if err := RequestInterconnectCertificate(t.Context(), f.as(t, west), westMember, f.info.Namespace, "east", 5*time.Second, nil); err == nil {
		t.Error("west obtained a certificate named east")
	}
	if err := westMember.Get(t.Context(), key, &corev1.Secret{}); err == nil {
		t.Error("west stored a certificate for east")
	}

	// Join with --interconnect ovn-ic: refused without secondary addressing before anything is
	// written; with it, the member's ovn-ic-config (Kube-OVN's keys, the AZ named after the
	// cluster) and its certificate.
	ic := &icconfig.Config{DBHosts: []string{"192.0.2.10", "192.0.2.11", "192.0.2.12"}, NBPort: 6645, SBPort: 6646,
		GatewayNodes: []string{"north-gw1", "north-gw2"}, AutoRoute: true}
	opts := f.joinOptions("north")
	opts.Interconnect = ic
	if _, err := Join(t.Context(), f.env.Cluster("north").RESTConfig(), opts); err == nil || !strings.Contains(err.Error(), "needs --addressing secondary") {
		t.Fatalf("join --interconnect with direct addressing: %v; want refused", err)
	}
	if err := f.hub.Get(t.Context(), client.ObjectKey{Namespace: f.info.Namespace, Name: "north"}, &v1alpha1.Cluster{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused join: Cluster north = %v, want not found", err)
	}
	opts.Addressing = v1alpha1.AddressingSecondary
	if _, err := Join(t.Context(), f.env.Cluster("north").RESTConfig(), opts); err != nil {
		t.Fatal(err)
	}
	northMember := testenv.Client(t, f.env.Cluster("north").RESTConfig())
	cm := &corev1.ConfigMap{}
	if err := northMember.Get(t.Context(), client.ObjectKey{Namespace: icconfig.ConfigMapNamespace, Name: icconfig.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"enable-ic": "true", "az-name": "north", "ic-db-host": "192.0.2.10,192.0.2.11,192.0.2.12",
		"ic-nb-port": "6645", "ic-sb-port": "6646", "gw-nodes": "north-gw1,north-gw2", "auto-route": "true"}
	if !maps.Equal(cm.Data, want) {
		t.Errorf("north's ovn-ic-config = %v, want %v", cm.Data, want)
	}
	if err := northMember.Get(t.Context(), key, &corev1.Secret{}); err != nil {
		t.Errorf("north's interconnection certificate: %v", err)
	}
	if ic.Enabled || ic.AZName != "" {
		t.Errorf("Join changed the caller's configuration: %+v", ic)
	}
}
