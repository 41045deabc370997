package hub

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/octopus-mcs/octopus/internal/ipam"
)

// BrokerInfoVersion is the format version written by this build.
const BrokerInfoVersion = 1

// maxBrokerInfoSize bounds what Decode reads: a real file is a few KiB, and the input is untrusted.
const maxBrokerInfoSize = 1 << 20

// Default address pools handed out per cluster (docs/architecture.md §5).
var (
	DefaultGlobalnetPool = PoolConfig{CIDR: "242.0.0.0/8", ClusterPrefixLength: 16}
	DefaultSecondaryPool = PoolConfig{CIDR: "10.112.0.0/12", ClusterPrefixLength: 16}
)

// PoolConfig is an address pool as written in broker-info.
type PoolConfig struct {
	CIDR                string `json:"cidr"`
	ClusterPrefixLength int    `json:"clusterPrefixLength"`
}

// Pool parses the pool.
func (p PoolConfig) Pool() (ipam.Pool, error) { return ipam.ParsePool(p.CIDR, p.ClusterPrefixLength) }

// BrokerInfo is everything a cluster needs to join the hub. It holds a join credential, so the
// file is written with mode 0600 and must be handled like a password.
type BrokerInfo struct {
	Version   int    `json:"version"`
	HubURL    string `json:"hubURL"`
	Namespace string `json:"namespace"`
	// CAData is the PEM bundle that verifies the hub API server's certificate.
	CAData    []byte     `json:"caData"`
	JoinToken string     `json:"joinToken"`
	Globalnet PoolConfig `json:"globalnet"`
	Secondary PoolConfig `json:"secondary"`
	// Checksum is the SHA-256 of the file with this field empty. It catches truncation and
	// hand edits before a join acts on them; it is not a signature.
	Checksum string `json:"checksum"`
}

// Encode renders the broker-info file, checksum included.
func (b BrokerInfo) Encode() ([]byte, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	b.Checksum = ""
	sum, err := b.checksum()
	if err != nil {
		return nil, err
	}
	b.Checksum = sum
	out, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding broker-info: %w", err)
	}
	return append(out, '\n'), nil
}

func (b BrokerInfo) checksum() (string, error) {
	b.Checksum = ""
	canonical, err := json.Marshal(b)
	if err != nil {
		return "", fmt.Errorf("encoding broker-info: %w", err)
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:]), nil
}

// WriteFile writes the broker-info to path with mode 0600, replacing it atomically.
func (b BrokerInfo) WriteFile(path string) error {
	data, err := b.Encode()
	if err != nil {
		return err
	}
	// CreateTemp makes a new file with mode 0600 that no one else can have opened or linked.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".broker-info-*")
	if err != nil {
		return fmt.Errorf("writing broker-info: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing broker-info: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing broker-info: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing broker-info: %w", err)
	}
	return nil
}

// ReadBrokerInfo reads and validates a broker-info file.
func ReadBrokerInfo(path string) (*BrokerInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading broker-info: %w (it is written by `octopus hub deploy`)", err)
	}
	defer f.Close()
	b, err := DecodeBrokerInfo(f)
	if err != nil {
		return nil, fmt.Errorf("broker-info %s: %w", path, err)
	}
	return b, nil
}

// ErrBrokerInfoTampered means the content does not match its checksum.
var ErrBrokerInfoTampered = errors.New("checksum mismatch: the file was truncated or edited; copy it again from the output of `octopus hub deploy`")

// DecodeBrokerInfo parses untrusted broker-info and rejects anything malformed, unknown,
// tampered with or invalid, naming the field at fault.
func DecodeBrokerInfo(r io.Reader) (*BrokerInfo, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxBrokerInfoSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	if len(data) > maxBrokerInfoSize {
		return nil, fmt.Errorf("larger than %d bytes; this is not a broker-info file", maxBrokerInfoSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	b := &BrokerInfo{}
	if err := dec.Decode(b); err != nil {
		return nil, fmt.Errorf("not valid broker-info JSON (truncated or corrupted?): %w", err)
	}
	if dec.More() {
		return nil, errors.New("trailing data after the broker-info JSON object")
	}
	if b.Version != BrokerInfoVersion {
		return nil, fmt.Errorf("version %d is not supported (this octopus reads version %d); use the octopus release that deployed the hub", b.Version, BrokerInfoVersion)
	}
	want, err := b.checksum()
	if err != nil {
		return nil, err
	}
	if b.Checksum != want {
		return nil, ErrBrokerInfoTampered
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b, nil
}

// Validate checks every field, naming the first one at fault.
func (b BrokerInfo) Validate() error {
	u, err := url.Parse(b.HubURL)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		return fmt.Errorf("hubURL %q must be an https:// URL of the hub's API server", b.HubURL)
	}
	if errs := validation.IsDNS1123Label(b.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", b.Namespace, strings.Join(errs, "; "))
	}
	if err := validateCABundle(b.CAData); err != nil {
		return fmt.Errorf("caData: %w", err)
	}
	if err := validateToken(b.JoinToken); err != nil {
		return fmt.Errorf("joinToken: %w", err)
	}
	global, err := b.Globalnet.Pool()
	if err != nil {
		return fmt.Errorf("globalnet pool: %w", err)
	}
	secondary, err := b.Secondary.Pool()
	if err != nil {
		return fmt.Errorf("secondary pool: %w", err)
	}
	if global.CIDR.Overlaps(secondary.CIDR) {
		return fmt.Errorf("globalnet pool %s and secondary pool %s overlap; choose disjoint ranges", global.CIDR, secondary.CIDR)
	}
	return nil
}

func validateCABundle(data []byte) error {
	if len(data) == 0 {
		return errors.New("missing the hub's CA certificate")
	}
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				return errors.New("contains data that is not PEM")
			}
			break
		}
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("contains a PEM block of type %q, want CERTIFICATE", block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Errorf("certificate %d does not parse: %w", n+1, err)
		}
		n++
	}
	if n == 0 {
		return errors.New("no PEM certificate found")
	}
	return nil
}

// validateToken accepts what the hub issues: a ServiceAccount JWT (three base64url parts).
func validateToken(tok string) error {
	if tok == "" {
		return errors.New("missing")
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return errors.New("not a ServiceAccount token (want three dot-separated parts)")
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return errors.New("not a ServiceAccount token (parts must be base64url)")
		}
	}
	return nil
}
