// Package pki issues the X.509 certificates Octopus's own TLS endpoints use, without
// cert-manager: a CA (ECDSA P-256, self-signed) and leaf certificates it signs for one
// component each, server or client or both. The first user is the secondary network's OVN
// databases (docs/secondary-network.md, "TLS of the OVN databases"); OVN-IC's databases on the
// hub are the second.
//
// The pieces:
//   - NewCA makes a CA; ParseCA reads one back from PEM; CA.PEM writes it.
//   - CA.Issue makes a key pair and a leaf for a Leaf request (one component's identity);
//     CA.SignCSR signs a leaf for a key made elsewhere (the key never leaves its owner: the
//     member that will use a certificate sends only a CSR, NewCSR makes one).
//   - Needs tells whether a stored leaf must be issued again (another CA, other names, close to
//     expiry): the whole rotation rule, so that every caller rotates the same way.
//   - EnsureCA and EnsureLeaf (secret.go) keep a CA and leaves in Kubernetes Secrets of type
//     kubernetes.io/tls ("tls.crt", "tls.key", and "ca.crt": the CA that clients and servers
//     trust), issuing only what is missing or due.
//   - ClientConfig and ServerConfig (tlsconfig.go) load such files into a tls.Config that
//     demands the peer's certificate from the same CA (mutual TLS, TLS 1.2 or later).
//
// Rotation: a leaf is issued again by EnsureLeaf once less than a third of its life is left
// (RenewBefore), when the CA changed, or when its names changed; the pods mounting the Secret
// see the new files within the kubelet's sync period (about a minute) and OVN's daemons reread
// their key and certificate files when they change. The CA itself is not rotated: it lives 10
// years (CAValidity); replacing it means a new Secret and re-issuing every leaf, with both CAs
// trusted for the overlap (ca.crt may hold several), which is not built.
package pki

import (
	"bytes"
	"crypto"
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

const (
	// CAValidity is a CA's life: long, because replacing it means re-issuing every leaf.
	CAValidity = 10 * 365 * 24 * time.Hour
	// LeafValidity is a leaf's default life; EnsureLeaf renews it well before the end.
	LeafValidity = 365 * 24 * time.Hour
	// clockSkew back-dates NotBefore so that a peer whose clock is a little behind accepts a
	// certificate issued a moment ago.
	clockSkew = 5 * time.Minute
)

// CA is a certificate authority: its certificate and private key.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// Leaf asks for a leaf certificate: one component's identity.
type Leaf struct {
	// CommonName names the component ("ovnmaster", "ovn-controller", a cluster ID). OVN's
	// role-based access control reads it (a chassis's certificate must be named after it).
	CommonName string
	// Server and Client are the extended key usages (at least one).
	Server, Client bool
	// DNSNames and IPs are the server's names (subject alternative names); a client needs none.
	DNSNames []string
	IPs      []netip.Addr
	// Validity is the leaf's life; zero means LeafValidity.
	Validity time.Duration
}

func (l Leaf) validate() error {
	if l.CommonName == "" {
		return errors.New("a leaf certificate needs a common name")
	}
	if !l.Server && !l.Client {
		return fmt.Errorf("leaf certificate %q: neither server nor client", l.CommonName)
	}
	return nil
}

func (l Leaf) validity() time.Duration {
	if l.Validity > 0 {
		return l.Validity
	}
	return LeafValidity
}

// NewCA makes a self-signed CA named name, valid for validity (zero: CAValidity).
func NewCA(name string, validity time.Duration) (*CA, error) {
	if validity <= 0 {
		validity = CAValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the key of CA %q: %w", name, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"octopus"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("signing CA %q: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("reading back CA %q: %w", name, err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// ParseCA reads a CA from its PEM certificate and key (as CA.PEM wrote them).
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("the CA's certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("certificate %q is not a CA", cert.Subject.CommonName)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the key of CA %q: %w", cert.Subject.CommonName, err)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, fmt.Errorf("the key of CA %q does not match its certificate", cert.Subject.CommonName)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// PEM returns the CA's certificate and key in PEM.
func (ca *CA) PEM() (certPEM, keyPEM []byte, err error) {
	keyPEM, err = encodeKey(ca.Key)
	if err != nil {
		return nil, nil, err
	}
	return CertPEM(ca.Cert), keyPEM, nil
}

// Issue makes a key pair and a certificate for l signed by the CA, both in PEM.
func (ca *CA) Issue(l Leaf) (certPEM, keyPEM []byte, err error) {
	if err := l.validate(); err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the key of %q: %w", l.CommonName, err)
	}
	certPEM, err = ca.sign(l, key.Public())
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// NewCSR makes a key pair and a certificate request for commonName, both in PEM: the side
// that will use the certificate keeps the key and sends the CSR to the CA's holder.
func NewCSR(commonName string) (csrPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the key of %q: %w", commonName, err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: commonName}}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("making the certificate request of %q: %w", commonName, err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), keyPEM, nil
}

// SignCSR signs a certificate for the key of csrPEM with what l says, in PEM. The CSR's own
// subject and extensions are ignored: the CA's holder decides the identity (l.CommonName), not
// the requester; a CSR whose common name differs is refused, so that a mix-up shows.
func (ca *CA) SignCSR(csrPEM []byte, l Leaf) ([]byte, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	b, _ := pem.Decode(csrPEM)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("no PEM CERTIFICATE REQUEST block")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("the certificate request's signature: %w", err)
	}
	if csr.Subject.CommonName != l.CommonName {
		return nil, fmt.Errorf("the certificate request names %q, not %q", csr.Subject.CommonName, l.CommonName)
	}
	return ca.sign(l, csr.PublicKey)
}

func (ca *CA) sign(l Leaf, pub crypto.PublicKey) ([]byte, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: l.CommonName, Organization: []string{"octopus"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(l.validity()),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     slices.Clone(l.DNSNames),
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	for _, ip := range l.IPs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
	}
	if l.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if l.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing the certificate of %q: %w", l.CommonName, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// RenewBefore is the share of a leaf's life left at which Needs asks for a new one.
const RenewBefore = 3

// Needs says why certPEM must be issued again for l by ca, or "" when it is good: it does not
// parse, another CA signed it (or its signature fails), its names or usages are not l's, or
// less than a third of its life is left.
func (ca *CA) Needs(certPEM []byte, l Leaf, now time.Time) string {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	if err := cert.CheckSignatureFrom(ca.Cert); err != nil {
		return "signed by another CA"
	}
	if cert.Subject.CommonName != l.CommonName {
		return fmt.Sprintf("named %q, not %q", cert.Subject.CommonName, l.CommonName)
	}
	if !slices.Equal(sorted(cert.DNSNames), sorted(l.DNSNames)) {
		return "other DNS names"
	}
	var ips []string
	for _, ip := range l.IPs {
		ips = append(ips, ip.String())
	}
	var certIPs []string
	for _, ip := range cert.IPAddresses {
		a, _ := netip.AddrFromSlice(ip)
		certIPs = append(certIPs, a.Unmap().String())
	}
	if !slices.Equal(sorted(certIPs), sorted(ips)) {
		return "other IP addresses"
	}
	if slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) != l.Server ||
		slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) != l.Client {
		return "other usages"
	}
	life := cert.NotAfter.Sub(cert.NotBefore)
	if cert.NotAfter.Sub(now) < life/RenewBefore {
		return fmt.Sprintf("expires %s", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

// ParseCert reads the first certificate of a PEM bundle.
func ParseCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return x509.ParseCertificate(b.Bytes)
}

// CertPEM encodes a certificate in PEM.
func CertPEM(cert *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
}

func parseKey(keyPEM []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		if ek, err2 := x509.ParseECPrivateKey(b.Bytes); err2 == nil {
			return ek, nil
		}
		return nil, fmt.Errorf("parsing the private key: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a private key of type %T cannot sign", k)
	}
	return s, nil
}

// encodeKey writes a key as PKCS #8 ("PRIVATE KEY"), which OpenSSL (OVN) and Go both read.
func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding the private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("drawing a serial number: %w", err)
	}
	return n, nil
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// KeyMatches says whether keyPEM is the private key of certPEM's certificate.
func KeyMatches(certPEM, keyPEM []byte) bool { return keyMatches(certPEM, keyPEM) }

// keyMatches tells whether keyPEM is the private key of certPEM's public key.
func keyMatches(certPEM, keyPEM []byte) bool {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return false
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return false
	}
	return publicKeysEqual(cert.PublicKey, key.Public())
}

// sameBytes compares PEM data ignoring a trailing newline.
func sameBytes(a, b []byte) bool { return bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b)) }
