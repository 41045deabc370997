// Package pathprobe measures the underlay path between two gateways outside the tunnel: whether
// UDP sent to the remote gateway's tunnel port is answered, and the largest packet that reaches
// it unfragmented (packetization-layer path MTU discovery, RFC 8899, with our own probes).
//
// A probe is a UDP datagram to the remote tunnel endpoint (address and tunnel port) whose
// payload starts with Magic and a type byte. Neither tunnel protocol starts a datagram that way
// (a WireGuard message starts with its type 1..4 and three zero bytes, a VXLAN header with the
// flags byte 0x08), so the remote gateway's Responder, which sees a copy of what arrives at the
// tunnel port (responder.go), answers probes only, and the tunnel's socket drops its copy. A
// firewall that drops the tunnel port drops the probes too, since they travel to the same
// address and port and are answered from it.
//
// Probes leave from an ephemeral port rather than the tunnel's own, which the tunnel driver
// holds. A firewall keyed on the source port alone could treat probes and tunnel apart; one
// keyed on the destination port (security groups, `udp dport` rules) cannot.
//
// The package needs no Kubernetes client; the gateway (internal/gateway) runs a Responder and
// probes each remote gateway periodically, and publishes the results in its Peer's status.
package pathprobe

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"time"
)

// Magic starts every probe and reply. See the package comment for why it cannot be taken for a
// tunnel packet.
const Magic = "OCTP"

// Message types, the byte after Magic.
const (
	typeRequest byte = 1
	typeReply   byte = 2
)

// messageLen is the length of a message without padding: Magic, type, three reserved bytes,
// an 8-byte nonce and, in a reply, the 4-byte IP length of the request as it arrived.
const messageLen = len(Magic) + 4 + 8 + 4

// IP and UDP header sizes without options: a probe of IP size n carries n minus these.
const (
	udpHeader  = 8
	ipv4Header = 20
	ipv6Header = 40
)

// message is a probe or its reply.
type message struct {
	typ   byte
	nonce uint64
	// size is, in a reply, the IP length of the request as the responder received it.
	size uint32
}

// marshal writes m into b, which must hold at least messageLen bytes; the rest is padding and
// left as it is.
func (m message) marshal(b []byte) {
	copy(b, Magic)
	b[4] = m.typ
	b[5], b[6], b[7] = 0, 0, 0
	binary.BigEndian.PutUint64(b[8:], m.nonce)
	binary.BigEndian.PutUint32(b[16:], m.size)
}

var errNotProbe = errors.New("not an Octopus path probe")

// parse reads a message; padding after messageLen is ignored.
func parse(b []byte) (message, error) {
	if len(b) < messageLen || string(b[:len(Magic)]) != Magic || (b[4] != typeRequest && b[4] != typeReply) {
		return message{}, errNotProbe
	}
	return message{typ: b[4], nonce: binary.BigEndian.Uint64(b[8:]), size: binary.BigEndian.Uint32(b[16:])}, nil
}

// headers is the IP and UDP header size on the way to addr.
func headers(addr netip.Addr) int {
	if addr.Unmap().Is4() {
		return ipv4Header + udpHeader
	}
	return ipv6Header + udpHeader
}

// Result is one measurement of the path to a remote tunnel endpoint.
type Result struct {
	// Reachable is true when a probe to the tunnel port was answered.
	Reachable bool
	// Reason says why the port is unreachable ("" when it is reachable).
	Reason string
	// PathMTU is the largest IP packet, in bytes, that reached the remote port with Don't
	// Fragment set; 0 when unreachable.
	PathMTU int
	// LocalMTU is the upper bound of the search: the MTU of the route towards the remote
	// endpoint on this side (the local link's, or a smaller path MTU the kernel learned).
	LocalMTU int
	// Probes is how many probes the measurement sent.
	Probes int
	// Time is when the measurement finished.
	Time time.Time
}
