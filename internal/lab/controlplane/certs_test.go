package controlplane

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestFirstServiceIP(t *testing.T) {
	tests := []struct {
		cidr    string
		want    string
		wantErr bool
	}{
		{cidr: "10.96.0.0/12", want: "10.96.0.1"},
		{cidr: "10.200.0.0/16", want: "10.200.0.1"},
		{cidr: "10.200.3.7/16", want: "10.200.0.1"}, // host bits are ignored
		{cidr: "fd00:10:96::/108", want: "fd00:10:96::1"},
		{cidr: "192.0.2.7/32", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.cidr, func(t *testing.T) {
			got, err := firstServiceIP(netip.MustParsePrefix(tt.cidr))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("firstServiceIP(%s) = %s, want an error", tt.cidr, got)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Fatalf("firstServiceIP(%s) = %v, %v; want %s", tt.cidr, got, err, tt.want)
			}
		})
	}
	if _, err := firstServiceIP(netip.Prefix{}); err == nil {
		t.Error("firstServiceIP of an unset prefix succeeded")
	}
}

func TestAPIServerSANs(t *testing.T) {
	tests := []struct {
		name    string
		bind    string
		cidr    string
		wantIPs []string
	}{
		{name: "loopback bind", bind: "127.0.0.1", cidr: "10.200.0.0/16", wantIPs: []string{"127.0.0.1", "10.200.0.1"}},
		{name: "lab link bind", bind: "192.0.2.10", cidr: "10.201.0.0/16", wantIPs: []string{"192.0.2.10", "127.0.0.1", "10.201.0.1"}},
		{name: "mapped v4 bind", bind: "::ffff:192.0.2.10", cidr: "10.201.0.0/16", wantIPs: []string{"192.0.2.10", "127.0.0.1", "10.201.0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dns, ips, err := apiServerSANs(netip.MustParseAddr(tt.bind), netip.MustParsePrefix(tt.cidr))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ip := range ips {
				got = append(got, ip.String())
			}
			if !slices.Equal(got, tt.wantIPs) {
				t.Errorf("IPs = %v, want %v", got, tt.wantIPs)
			}
			for _, want := range []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} {
				if !slices.Contains(dns, want) {
					t.Errorf("DNS names %v lack %s", dns, want)
				}
			}
		})
	}
}

// TestIssuedCertificates checks the chain a kube-apiserver and its clients verify: the serving
// certificate for every SAN, the admin client certificate with its group.
func TestIssuedCertificates(t *testing.T) {
	now := time.Now()
	ca, err := newCA("test-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA || ca.Cert.Subject.CommonName != "test-ca" {
		t.Fatalf("CA certificate: IsCA=%v CN=%q", ca.Cert.IsCA, ca.Cert.Subject.CommonName)
	}
	if _, ok := ca.Cert.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Fatalf("CA key is %T, want ECDSA", ca.Cert.PublicKey)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)

	dns, ips, err := apiServerSANs(netip.MustParseAddr("192.0.2.10"), netip.MustParsePrefix("10.200.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.issue(servingTemplate("kube-apiserver", dns, ips, now))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append(slices.Clone(dns), "192.0.2.10", "127.0.0.1", "10.200.0.1") {
		if _, err := serving.Cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate not valid for %s: %v", name, err)
		}
	}
	if _, err := serving.Cert.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: roots}); err == nil {
		t.Error("serving certificate valid for example.com")
	}

	admin, err := ca.issue(clientTemplate("octopus-admin", []string{"system:masters"}, now))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin certificate does not verify as a client certificate: %v", err)
	}
	if _, err := admin.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("admin certificate verifies as a server certificate")
	}
	if got := admin.Cert.Subject.Organization; !slices.Equal(got, []string{"system:masters"}) {
		t.Errorf("admin groups = %v, want [system:masters]", got)
	}
	if admin.Cert.SerialNumber.Cmp(serving.Cert.SerialNumber) == 0 {
		t.Error("two certificates share a serial number")
	}

	// Valid right away (backdated) and for the documented period.
	for _, c := range []*x509.Certificate{ca.Cert, serving.Cert, admin.Cert} {
		if !c.NotBefore.Before(now) || c.NotAfter.Sub(now) < certValidity-time.Minute {
			t.Errorf("%s valid %v..%v, want from before %v for %v", c.Subject.CommonName, c.NotBefore, c.NotAfter, now, certValidity)
		}
	}

	// PEM round trips as the components read them.
	block, _ := pem.Decode(serving.CertPEM())
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("certificate PEM: %v", block)
	}
	keyPEM, err := serving.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	block, _ = pem.Decode(keyPEM)
	if block == nil || block.Type != "EC PRIVATE KEY" {
		t.Fatalf("key PEM: %v", block)
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil || !key.Equal(serving.Key) {
		t.Fatalf("key PEM does not round-trip: %v", err)
	}
}

func TestServiceAccountKey(t *testing.T) {
	privPEM, pubPEM, err := newServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(privPEM)
	if block == nil {
		t.Fatal("private key is not PEM")
	}
	priv, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	block, _ = pem.Decode(pubPEM)
	if block == nil || block.Type != "PUBLIC KEY" {
		t.Fatalf("public key PEM: %v", block)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !priv.PublicKey.Equal(pub) {
		t.Error("public key does not belong to the private key")
	}
}
