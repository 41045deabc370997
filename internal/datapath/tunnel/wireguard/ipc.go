package wireguard

import (
	"bufio"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
)

// PersistentKeepalive keeps NAT mappings on the underlay open and lets a gateway notice a dead
// peer through missing handshakes; 25 s is the value WireGuard recommends for NAT.
const PersistentKeepalive = 25

// peerState is one peer as the device reports it through IpcGet.
type peerState struct {
	key        string // hex, as the UAPI speaks
	endpoint   netip.AddrPort
	keepalive  int
	allowedIPs []netip.Prefix
	rx, tx     uint64
	handshake  time.Time
}

// deviceState is the part of IpcGet the driver reads.
type deviceState struct {
	listenPort uint16
	peers      map[string]*peerState // by hex key
}

// parseIpcGet reads the UAPI "get" format (key=value lines; a public_key line starts a peer).
func parseIpcGet(s string) (deviceState, error) {
	st := deviceState{peers: map[string]*peerState{}}
	var p *peerState
	var hsSec, hsNsec int64
	flush := func() {
		if p != nil && (hsSec != 0 || hsNsec != 0) {
			p.handshake = time.Unix(hsSec, hsNsec)
		}
		hsSec, hsNsec = 0, 0
	}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		var err error
		switch k {
		case "listen_port":
			var n uint64
			n, err = strconv.ParseUint(v, 10, 16)
			st.listenPort = uint16(n)
		case "public_key":
			flush()
			p = &peerState{key: v}
			st.peers[v] = p
		case "endpoint":
			if p != nil {
				p.endpoint, err = netip.ParseAddrPort(v)
			}
		case "persistent_keepalive_interval":
			if p != nil {
				p.keepalive, err = strconv.Atoi(v)
			}
		case "allowed_ip":
			if p != nil {
				var pr netip.Prefix
				pr, err = netip.ParsePrefix(v)
				p.allowedIPs = append(p.allowedIPs, pr)
			}
		case "rx_bytes":
			if p != nil {
				p.rx, err = strconv.ParseUint(v, 10, 64)
			}
		case "tx_bytes":
			if p != nil {
				p.tx, err = strconv.ParseUint(v, 10, 64)
			}
		case "last_handshake_time_sec":
			hsSec, err = strconv.ParseInt(v, 10, 64)
		case "last_handshake_time_nsec":
			hsNsec, err = strconv.ParseInt(v, 10, 64)
		}
		if err != nil {
			return deviceState{}, fmt.Errorf("parsing the wireguard-go state line %q: %w", sc.Text(), err)
		}
	}
	flush()
	return st, sc.Err()
}

// hexKey converts a base64 WireGuard key (what the API carries) to the UAPI's hex.
func hexKey(b64 string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 32 {
		return "", fmt.Errorf("public key %q is not a base64 WireGuard key (32 bytes)", b64)
	}
	return hex.EncodeToString(raw), nil
}

// renderIpcSet returns the UAPI "set" text that turns current into desired, touching only what
// differs: unchanged peers are not mentioned, so their sessions and counters survive an Apply.
// It returns "" when nothing differs.
func renderIpcSet(current deviceState, listenPort uint16, desired []tunnel.Peer) (string, error) {
	var b strings.Builder
	if listenPort != current.listenPort {
		fmt.Fprintf(&b, "listen_port=%d\n", listenPort)
	}
	want := map[string]bool{}
	for _, p := range desired {
		key, err := hexKey(p.PublicKey)
		if err != nil {
			return "", fmt.Errorf("peer %s: %w", p.Cluster, err)
		}
		if want[key] {
			return "", fmt.Errorf("peer %s: its public key is used by another peer too", p.Cluster)
		}
		want[key] = true
		allowed := make([]netip.Prefix, 0, len(p.Subnets))
		for _, s := range p.Subnets {
			allowed = append(allowed, s.Masked())
		}
		slices.SortFunc(allowed, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
		cur := current.peers[key]
		if cur != nil && cur.endpoint == p.Endpoint && cur.keepalive == PersistentKeepalive && equalPrefixes(cur.allowedIPs, allowed) {
			continue
		}
		fmt.Fprintf(&b, "public_key=%s\n", key)
		if cur == nil || cur.endpoint != p.Endpoint {
			fmt.Fprintf(&b, "endpoint=%s\n", p.Endpoint)
		}
		if cur == nil || cur.keepalive != PersistentKeepalive {
			fmt.Fprintf(&b, "persistent_keepalive_interval=%d\n", PersistentKeepalive)
		}
		if cur == nil || !equalPrefixes(cur.allowedIPs, allowed) {
			b.WriteString("replace_allowed_ips=true\n")
			for _, a := range allowed {
				fmt.Fprintf(&b, "allowed_ip=%s\n", a)
			}
		}
	}
	stale := make([]string, 0)
	for key := range current.peers {
		if !want[key] {
			stale = append(stale, key)
		}
	}
	slices.Sort(stale)
	for _, key := range stale {
		fmt.Fprintf(&b, "public_key=%s\nremove=true\n", key)
	}
	return b.String(), nil
}

func equalPrefixes(a, b []netip.Prefix) bool {
	a = slices.Clone(a)
	slices.SortFunc(a, func(x, y netip.Prefix) int { return strings.Compare(x.String(), y.String()) })
	return slices.Equal(a, b)
}
