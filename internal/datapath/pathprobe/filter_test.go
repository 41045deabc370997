package pathprobe

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
)

// TestRequestFilter runs the responder's socket filter on packets as the raw socket sees them
// (from the IPv4 header): only probe requests to the tunnel port get through, truncated.
func TestRequestFilter(t *testing.T) {
	vm, err := bpf.NewVM(requestFilter(4500))
	if err != nil {
		t.Fatal(err)
	}
	packet := func(ihl int, fragOff uint16, dport uint16, payload []byte) []byte {
		b := make([]byte, ihl+udpHeader+len(payload))
		b[0] = 0x40 | byte(ihl/4)
		binary.BigEndian.PutUint16(b[6:], fragOff)
		b[9] = 17
		binary.BigEndian.PutUint16(b[ihl:], 40000)
		binary.BigEndian.PutUint16(b[ihl+2:], dport)
		copy(b[ihl+udpHeader:], payload)
		return b
	}
	request := make([]byte, 1400)
	message{typ: typeRequest, nonce: 7}.marshal(request)
	reply := make([]byte, messageLen)
	message{typ: typeReply, nonce: 7}.marshal(reply)
	wireguard := append([]byte{1, 0, 0, 0}, make([]byte, 144)...)
	tests := []struct {
		name   string
		packet []byte
		want   int
	}{
		{"probe request to the tunnel port", packet(20, 0, 4500, request), requestCopyLen},
		{"probe request with IP options", packet(24, 0, 4500, request), requestCopyLen},
		{"probe request with DF set", packet(20, 0x4000, 4500, request), requestCopyLen},
		{"probe request to another port", packet(20, 0, 4501, request), 0},
		{"probe reply to the tunnel port", packet(20, 0, 4500, reply), 0},
		{"WireGuard handshake", packet(20, 0, 4500, wireguard), 0},
		{"non-first fragment", packet(20, 0x0010, 4500, request), 0},
		{"too short for a message", packet(20, 0, 4500, []byte(Magic)), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := vm.Run(tt.packet)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("filter accepted %d bytes, want %d", got, tt.want)
			}
		})
	}
}
