package hub

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
	"github.com/octopus-mcs/octopus/internal/pki"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icsigner"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestDeployInterconnect: hub deploy with interconnect issues the CA and the databases'
// certificate before it applies the databases, which listen on SSL only; a second deploy
// keeps both certificates; a hub deployed without it has none of it.
func TestDeployInterconnect(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "plain")
	ns := v1alpha1.DefaultHubNamespace
	addr := netip.MustParseAddr("192.0.2.10")
	opts := DeployOptions{Interconnect: &InterconnectOptions{Image: "octopus-ovn:test", Addresses: []netip.Addr{addr}}}

	if _, err := Deploy(t.Context(), env.Cluster("hub").RESTConfig(), DeployOptions{Interconnect: &InterconnectOptions{}}); err == nil || !strings.Contains(err.Error(), "--interconnect-image") {
		t.Errorf("deploy without an image = %v, want an error naming --interconnect-image", err)
	}
	if _, err := Deploy(t.Context(), env.Cluster("hub").RESTConfig(), opts); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Cluster("hub").RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	caSecret, dbSecret := &corev1.Secret{}, &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: render.ICCASecret}, caSecret); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: render.ICDBSecret}, dbSecret); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCA(caSecret.Data[corev1.TLSCertKey], caSecret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCert(dbSecret.Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	// Raft members are clients of each other with the same certificate: both usages.
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: addr.String()}); err != nil {
			t.Errorf("the databases' certificate for usage %v at %s: %v", usage, addr, err)
		}
	}

	sts := &appsv1.StatefulSet{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: render.ICDBName}, sts); err != nil {
		t.Fatal(err)
	}
	if *sts.Spec.Replicas != render.ICDBReplicas || len(sts.Spec.Template.Spec.Containers) != 2 {
		t.Errorf("StatefulSet: %d replicas, %d containers; want %d and 2", *sts.Spec.Replicas, len(sts.Spec.Template.Spec.Containers), render.ICDBReplicas)
	}
	for _, ctr := range sts.Spec.Template.Spec.Containers {
		for _, e := range ctr.Env {
			if e.Name == "LISTEN" && !strings.HasPrefix(e.Value, "pssl:") || e.Name == "RAFT_SELF" && !strings.HasPrefix(e.Value, "ssl:") {
				t.Errorf("container %s: %s=%s, want SSL only", ctr.Name, e.Name, e.Value)
			}
		}
	}
	if !slices.ContainsFunc(sts.Spec.Template.Spec.Containers[0].Env, func(e corev1.EnvVar) bool {
		return e.Name == "TRANSIT_SWITCHES" && e.Value == render.DefaultTransitSwitch
	}) {
		t.Errorf("IC NB's container does not make the transit switch %s: %v", render.DefaultTransitSwitch, sts.Spec.Template.Spec.Containers[0].Env)
	}

	// The signer, as its ServiceAccount with nothing but the Role deploy bound to it, signs a
	// cluster's request with the CA deploy made.
	signerCfg := rest.CopyConfig(env.Cluster("hub").RESTConfig())
	signerCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + render.ICSignerName}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- icsigner.Run(ctx, icsigner.Options{Hub: signerCfg, Namespace: ns, CA: ca}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the signer: %v", err)
		}
	}()
	csr, _, err := pki.NewCSR("east")
	if err != nil {
		t.Fatal(err)
	}
	req := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.InterconnectCSRName("east"), Namespace: ns,
			Labels: map[string]string{v1alpha1.ClusterLabel: "east", v1alpha1.InterconnectCSRLabel: "true"}},
		Data: map[string]string{v1alpha1.InterconnectCSRKey: string(csr)},
	}
	if err := c.Create(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyEvery(t, 20*time.Millisecond, 30*time.Second, "the signer with its generated RBAC to sign east's request", func() error {
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(req), req); err != nil {
			return err
		}
		if req.Data[v1alpha1.InterconnectCertKey] == "" {
			return fmt.Errorf("not signed: %v", req.Data)
		}
		return nil
	})

	if _, err := Deploy(t.Context(), env.Cluster("hub").RESTConfig(), opts); err != nil {
		t.Fatal(err)
	}
	again := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: render.ICDBSecret}, again); err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != dbSecret.ResourceVersion {
		t.Error("a second deploy issued the databases' certificate again")
	}

	if _, err := Deploy(t.Context(), env.Cluster("plain").RESTConfig(), DeployOptions{}); err != nil {
		t.Fatal(err)
	}
	pc, err := client.New(env.Cluster("plain").RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: render.ICDBName}, &appsv1.StatefulSet{}); err == nil {
		t.Error("a hub deployed without interconnect has the databases")
	}
}
