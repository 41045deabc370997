package hub

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func testCA(t testing.TB) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func validBrokerInfo(t testing.TB) BrokerInfo {
	return BrokerInfo{
		Version: BrokerInfoVersion, HubURL: "https://192.0.2.10:6443", Namespace: "octopus-hub",
		CAData: testCA(t), JoinToken: "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln",
		Globalnet: DefaultGlobalnetPool, Secondary: DefaultSecondaryPool,
	}
}

func TestBrokerInfoRoundTripAndMode(t *testing.T) {
	b := validBrokerInfo(t)
	path := filepath.Join(t.TempDir(), "broker-info")
	if err := b.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("broker-info mode = %v, want 0600: it holds a join credential", st.Mode().Perm())
	}
	got, err := ReadBrokerInfo(path)
	if err != nil {
		t.Fatal(err)
	}
	got.Checksum = ""
	if !reflect.DeepEqual(*got, b) {
		t.Errorf("round trip changed the content:\n got %+v\nwant %+v", *got, b)
	}
}

// reencode applies edit to the decoded JSON of a valid file; with fixChecksum it recomputes the
// checksum so that validation, not the checksum, must catch the edit.
func reencode(t *testing.T, edit func(*BrokerInfo), fixChecksum bool) []byte {
	t.Helper()
	b := validBrokerInfo(t)
	data, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var m BrokerInfo
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	edit(&m)
	if fixChecksum {
		m.Checksum, _ = m.checksum()
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDecodeBrokerInfoRejects(t *testing.T) {
	valid, err := validBrokerInfo(t).Encode()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		input   []byte
		wantErr string
	}{
		{"empty", nil, "not valid broker-info JSON"},
		{"truncated", valid[:len(valid)/2], "not valid broker-info JSON"},
		{"unknown field", bytes.Replace(valid, []byte(`"version"`), []byte(`"extra": 1, "version"`), 1), "unknown field"},
		{"trailing data", append(append([]byte{}, valid...), []byte(`{}`)...), "trailing data"},
		{"too large", bytes.Repeat([]byte(" "), maxBrokerInfoSize+10), "larger than"},
		{"tampered hub URL", reencode(t, func(b *BrokerInfo) { b.HubURL = "https://198.51.100.66:6443" }, false), "checksum mismatch"},
		{"tampered token", reencode(t, func(b *BrokerInfo) { b.JoinToken = "a.b.c" }, false), "checksum mismatch"},
		{"future version", reencode(t, func(b *BrokerInfo) { b.Version = 2 }, true), "version 2 is not supported"},
		{"http URL", reencode(t, func(b *BrokerInfo) { b.HubURL = "http://192.0.2.10:6443" }, true), "hubURL"},
		{"bad namespace", reencode(t, func(b *BrokerInfo) { b.Namespace = "Octopus_Hub" }, true), "namespace"},
		{"no CA", reencode(t, func(b *BrokerInfo) { b.CAData = nil }, true), "caData: missing"},
		{"CA not PEM", reencode(t, func(b *BrokerInfo) { b.CAData = []byte("hello") }, true), "caData"},
		{"token not JWT", reencode(t, func(b *BrokerInfo) { b.JoinToken = "secret" }, true), "joinToken"},
		{"globalnet not CIDR", reencode(t, func(b *BrokerInfo) { b.Globalnet.CIDR = "242.0.0.0" }, true), "globalnet pool"},
		{"secondary block too big", reencode(t, func(b *BrokerInfo) { b.Secondary.ClusterPrefixLength = 8 }, true), "secondary pool"},
		{"pools overlap", reencode(t, func(b *BrokerInfo) { b.Secondary.CIDR = "242.16.0.0/12" }, true), "overlap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeBrokerInfo(bytes.NewReader(tt.input))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
	if _, err := DecodeBrokerInfo(bytes.NewReader(reencode(t, func(*BrokerInfo) {}, false))); err != nil {
		t.Fatalf("an unedited file must decode: %v", err)
	}
	_, err = DecodeBrokerInfo(bytes.NewReader(reencode(t, func(b *BrokerInfo) { b.HubURL += "x" }, false)))
	if !errors.Is(err, ErrBrokerInfoTampered) {
		t.Fatalf("err = %v, want ErrBrokerInfoTampered", err)
	}
}

// FuzzDecodeBrokerInfo: untrusted input never panics, and whatever decodes re-encodes to
// something that decodes to the same value.
func FuzzDecodeBrokerInfo(f *testing.F) {
	valid, err := validBrokerInfo(f).Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"version":1,"hubURL":"https://[::1]:1","caData":"","checksum":""}`))
	f.Add(valid[:40])
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBrokerInfo(bytes.NewReader(data))
		if err != nil {
			return
		}
		again, err := b.Encode()
		if err != nil {
			t.Fatalf("decoded broker-info does not re-encode: %v", err)
		}
		b2, err := DecodeBrokerInfo(bytes.NewReader(again))
		if err != nil {
			t.Fatalf("re-encoded broker-info does not decode: %v", err)
		}
		if !reflect.DeepEqual(b, b2) {
			t.Fatalf("round trip changed the content")
		}
	})
}
