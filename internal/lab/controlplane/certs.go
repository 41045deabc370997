package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"slices"
	"time"
)

// certValidity is long enough for any lab or test run and short enough that a leaked key from
// a forgotten state directory stops being useful.
const certValidity = 365 * 24 * time.Hour

// clockSkew backdates NotBefore so that a certificate is valid immediately even if a child
// process reads the clock a little earlier than we did.
const clockSkew = time.Hour

// keyPair is a certificate together with its private key.
type keyPair struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// CertPEM returns the certificate PEM-encoded.
func (k keyPair) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.Cert.Raw})
}

// KeyPEM returns the private key PEM-encoded in SEC 1 form, which every Kubernetes component
// accepts for ECDSA keys.
func (k keyPair) KeyPEM() ([]byte, error) {
	return encodeECKey(k.Key)
}

// newCA returns a self-signed ECDSA P-256 certificate authority.
func newCA(commonName string, now time.Time) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generating CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return keyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return keyPair{}, fmt.Errorf("creating CA certificate %q: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return keyPair{}, fmt.Errorf("parsing CA certificate %q: %w", commonName, err)
	}
	return keyPair{Cert: cert, Key: key}, nil
}

// issue signs a certificate for a fresh ECDSA P-256 key with the CA. The template supplies
// subject, usages and SANs; serial and key are filled in here.
func (ca keyPair) issue(tmpl *x509.Certificate) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generating key for %q: %w", tmpl.Subject.CommonName, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return keyPair{}, err
	}
	t := *tmpl
	t.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, &t, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return keyPair{}, fmt.Errorf("signing certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return keyPair{}, fmt.Errorf("parsing certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	return keyPair{Cert: cert, Key: key}, nil
}

// servingTemplate describes a TLS server certificate valid for the given names and addresses.
func servingTemplate(commonName string, dnsNames []string, ips []netip.Addr, now time.Time) *x509.Certificate {
	netIPs := make([]net.IP, 0, len(ips))
	for _, ip := range ips {
		netIPs = append(netIPs, net.IP(ip.Unmap().AsSlice()))
	}
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		NotBefore:   now.Add(-clockSkew),
		NotAfter:    now.Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    dnsNames,
		IPAddresses: netIPs,
	}
}

// clientTemplate describes a TLS client certificate. Kubernetes maps CommonName to the user
// name and each Organization to a group.
func clientTemplate(commonName string, groups []string, now time.Time) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName, Organization: groups},
		NotBefore:   now.Add(-clockSkew),
		NotAfter:    now.Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// apiServerSANs returns the names and addresses a kube-apiserver serving certificate must
// cover: the bind address (clients outside use it), loopback (local tools), the in-cluster
// names of the kubernetes Service and its ClusterIP (pods use those).
func apiServerSANs(bind netip.Addr, serviceCIDR netip.Prefix) ([]string, []netip.Addr, error) {
	svcIP, err := firstServiceIP(serviceCIDR)
	if err != nil {
		return nil, nil, err
	}
	dns := []string{
		"localhost",
		"kubernetes",
		"kubernetes.default",
		"kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local",
	}
	var ips []netip.Addr
	for _, ip := range []netip.Addr{bind.Unmap(), netip.MustParseAddr("127.0.0.1"), svcIP} {
		if ip.IsValid() && !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	return dns, ips, nil
}

// firstServiceIP returns the address kube-apiserver gives the default/kubernetes Service: the
// first address after the network address of the service CIDR.
func firstServiceIP(serviceCIDR netip.Prefix) (netip.Addr, error) {
	if !serviceCIDR.IsValid() {
		return netip.Addr{}, errors.New("service CIDR is not set")
	}
	p := serviceCIDR.Masked()
	first := p.Addr().Next()
	if !first.IsValid() || !p.Contains(first) {
		return netip.Addr{}, fmt.Errorf("service CIDR %s has no usable address", serviceCIDR)
	}
	return first, nil
}

// newServiceAccountKey returns a P-256 key pair for signing ServiceAccount tokens: the private
// key for kube-apiserver --service-account-signing-key-file and kube-controller-manager
// --service-account-private-key-file, the public key for --service-account-key-file.
func newServiceAccountKey() (privatePEM, publicPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating service account key: %w", err)
	}
	privatePEM, err = encodeECKey(key)
	if err != nil {
		return nil, nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("encoding service account public key: %w", err)
	}
	return privatePEM, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), nil
}

func encodeECKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding EC private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating certificate serial number: %w", err)
	}
	return serial, nil
}
