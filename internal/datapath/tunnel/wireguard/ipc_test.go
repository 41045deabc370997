package wireguard

import (
	"encoding/base64"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
)

func key(b byte) (b64, hx string) {
	raw := make([]byte, 32)
	raw[0] = b
	return base64.StdEncoding.EncodeToString(raw), hex.EncodeToString(raw)
}

func TestParseIpcGet(t *testing.T) {
	_, hx := key(1)
	st, err := parseIpcGet("private_key=00\nlisten_port=51820\npublic_key=" + hx + "\npreshared_key=00\nprotocol_version=1\n" +
		"endpoint=203.0.113.2:51820\nlast_handshake_time_sec=1700000000\nlast_handshake_time_nsec=5\ntx_bytes=10\nrx_bytes=20\n" +
		"persistent_keepalive_interval=25\nallowed_ip=10.2.0.0/16\nallowed_ip=10.98.0.0/16\nerrno=0\n")
	if err != nil {
		t.Fatal(err)
	}
	p := st.peers[hx]
	if st.listenPort != 51820 || p == nil || p.endpoint != netip.MustParseAddrPort("203.0.113.2:51820") || p.rx != 20 || p.tx != 10 ||
		p.keepalive != 25 || len(p.allowedIPs) != 2 || !p.handshake.Equal(time.Unix(1700000000, 5)) {
		t.Fatalf("parsed %+v, peer %+v", st, p)
	}
	if _, err := parseIpcGet("listen_port=huge\n"); err == nil {
		t.Fatal("a bad listen_port parsed")
	}
}

func TestRenderIpcSet(t *testing.T) {
	b64B, hxB := key(1)
	b64C, hxC := key(2)
	ep := netip.MustParseAddrPort("203.0.113.2:51820")
	peerB := tunnel.Peer{Cluster: "b", PublicKey: b64B, Endpoint: ep,
		Subnets: []netip.Prefix{netip.MustParsePrefix("10.98.0.0/16"), netip.MustParsePrefix("10.2.1.0/16")}}
	inSync := deviceState{listenPort: 51820, peers: map[string]*peerState{hxB: {key: hxB, endpoint: ep, keepalive: 25,
		allowedIPs: []netip.Prefix{netip.MustParsePrefix("10.98.0.0/16"), netip.MustParsePrefix("10.2.0.0/16")}}}}
	tests := []struct {
		name    string
		current deviceState
		desired []tunnel.Peer
		want    string
		wantErr string
	}{
		{name: "fresh device", current: deviceState{peers: map[string]*peerState{}}, desired: []tunnel.Peer{peerB},
			want: "listen_port=51820\npublic_key=" + hxB + "\nendpoint=203.0.113.2:51820\npersistent_keepalive_interval=25\n" +
				"replace_allowed_ips=true\nallowed_ip=10.2.0.0/16\nallowed_ip=10.98.0.0/16\n"},
		{name: "in sync renders nothing", current: inSync, desired: []tunnel.Peer{peerB}, want: ""},
		{name: "endpoint moved", current: inSync, desired: []tunnel.Peer{func() tunnel.Peer {
			p := peerB
			p.Endpoint = netip.MustParseAddrPort("203.0.113.9:51820")
			return p
		}()}, want: "public_key=" + hxB + "\nendpoint=203.0.113.9:51820\n"},
		{name: "subnet removed", current: inSync, desired: []tunnel.Peer{func() tunnel.Peer {
			p := peerB
			p.Subnets = p.Subnets[1:]
			return p
		}()}, want: "public_key=" + hxB + "\nreplace_allowed_ips=true\nallowed_ip=10.2.0.0/16\n"},
		{name: "peer replaced", current: inSync, desired: []tunnel.Peer{{Cluster: "c", PublicKey: b64C, Endpoint: ep}},
			want: "public_key=" + hxC + "\nendpoint=203.0.113.2:51820\npersistent_keepalive_interval=25\nreplace_allowed_ips=true\n" +
				"public_key=" + hxB + "\nremove=true\n"},
		{name: "bad key", current: inSync, desired: []tunnel.Peer{{Cluster: "c", PublicKey: "nope"}}, wantErr: "not a base64 WireGuard key"},
		{name: "duplicate key", current: inSync, desired: []tunnel.Peer{peerB, {Cluster: "c", PublicKey: b64B, Endpoint: ep}}, wantErr: "used by another peer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := renderIpcSet(tt.current, 51820, tt.desired)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("renderIpcSet = %q, %v\nwant %q", got, err, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	b64, _ := key(1)
	ep := netip.MustParseAddrPort("203.0.113.2:51820")
	sub := []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}
	for _, tt := range []struct {
		name, wantErr string
		cfg           tunnel.Config
	}{
		{name: "ok", cfg: tunnel.Config{ListenPort: 1, Peers: []tunnel.Peer{{Cluster: "b", PublicKey: b64, Endpoint: ep, Subnets: sub}}}},
		{name: "no port", wantErr: "listen port", cfg: tunnel.Config{}},
		{name: "duplicate cluster", wantErr: "twice", cfg: tunnel.Config{ListenPort: 1, Peers: []tunnel.Peer{{Cluster: "b", Endpoint: ep}, {Cluster: "b", Endpoint: ep}}}},
		{name: "no endpoint", wantErr: "endpoint", cfg: tunnel.Config{ListenPort: 1, Peers: []tunnel.Peer{{Cluster: "b"}}}},
		{name: "shared subnet", wantErr: "claimed by peers", cfg: tunnel.Config{ListenPort: 1, Peers: []tunnel.Peer{
			{Cluster: "b", Endpoint: ep, Subnets: sub}, {Cluster: "c", Endpoint: ep, Subnets: sub}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := validate(tt.cfg)
			if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("validate = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
