package tunneltest

import (
	"testing"

	"golang.org/x/sys/unix"
)

// ipv4Frame is an Ethernet frame with an IPv4 header (no options) of protocol proto and payload.
func ipv4Frame(proto byte, payload []byte) []byte {
	f := make([]byte, 14+20, 14+20+len(payload))
	f[12], f[13] = 0x08, 0x00
	f[14] = 0x45
	f[14+9] = proto
	return append(f, payload...)
}

func TestTunnelControl(t *testing.T) {
	const port = 51820
	quoted := func(sport, dport uint16) []byte {
		orig := make([]byte, 20+8)
		orig[0], orig[9] = 0x45, unix.IPPROTO_UDP
		orig[20], orig[21], orig[22], orig[23] = byte(sport>>8), byte(sport), byte(dport>>8), byte(dport)
		return orig
	}
	icmp := func(typ byte, orig []byte) []byte { return append([]byte{typ, 3, 0, 0, 0, 0, 0, 0}, orig...) }
	for _, tc := range []struct {
		name  string
		frame []byte
		want  bool
	}{
		{"IGMP report", ipv4Frame(unix.IPPROTO_IGMP, make([]byte, 8)), true},
		{"port unreachable about the tunnel's UDP", ipv4Frame(unix.IPPROTO_ICMP, icmp(3, quoted(40000, port))), true},
		{"port unreachable about other UDP", ipv4Frame(unix.IPPROTO_ICMP, icmp(3, quoted(40000, 53))), false},
		{"echo request (a ping that bypassed the tunnel)", ipv4Frame(unix.IPPROTO_ICMP, icmp(8, quoted(40000, port))), false},
		{"TCP", ipv4Frame(unix.IPPROTO_TCP, make([]byte, 20)), false},
		{"truncated ICMP", ipv4Frame(unix.IPPROTO_ICMP, []byte{3, 3, 0, 0}), false},
	} {
		if got := tunnelControl(tc.frame, port); got != tc.want {
			t.Errorf("%s: tunnelControl = %v, want %v", tc.name, got, tc.want)
		}
	}
}
