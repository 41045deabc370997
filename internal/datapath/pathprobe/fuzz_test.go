package pathprobe

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
)

// FuzzProbePacket feeds the responder's two gates arbitrary IPv4 packets from anyone on the
// underlay: its socket filter (run in bpf's VM, as the kernel runs it) and parse on what the
// filter lets through. The filter never lets through more than requestCopyLen bytes, never a
// packet that is not a first fragment to the tunnel port, and whatever it lets through parses
// as a request; parse never panics, and what it accepts marshals back to the same
// message.
func FuzzProbePacket(f *testing.F) {
	const port = 4500
	vm, err := bpf.NewVM(requestFilter(port))
	if err != nil {
		f.Fatal(err)
	}
	request := make([]byte, 20+udpHeader+messageLen)
	request[0], request[9] = 0x45, 17
	binary.BigEndian.PutUint16(request[22:], port)
	message{typ: typeRequest, nonce: 42}.marshal(request[20+udpHeader:])
	f.Add(request)
	f.Add(request[:30])
	f.Add([]byte{0x46, 0, 0, 0, 0, 0, 0x20, 0, 0, 17})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, packet []byte) {
		// What the kernel delivers to an ip4:udp raw socket: an IPv4 header of 5 words or
		// more, protocol UDP, a UDP header after it; nothing else reaches the filter.
		if len(packet) < 20 || packet[0]>>4 != 4 || int(packet[0]&0x0f) < 5 || packet[9] != 17 || len(packet) < int(packet[0]&0x0f)*4+udpHeader {
			return
		}
		n, err := vm.Run(packet)
		if err != nil {
			return // the kernel drops what reads past the packet, as the VM refuses it
		}
		if n == 0 {
			return
		}
		if n > requestCopyLen {
			t.Fatalf("the filter let through %d bytes, more than %d", n, requestCopyLen)
		}
		ihl := int(packet[0]&0x0f) * 4
		if binary.BigEndian.Uint16(packet[6:])&0x1fff != 0 || binary.BigEndian.Uint16(packet[ihl+2:]) != port {
			t.Fatalf("the filter let through a packet that is no first fragment to port %d: % x", port, packet)
		}
		got := packet[:min(n, len(packet))]
		m, err := parse(got[ihl+udpHeader:])
		if err != nil || m.typ != typeRequest {
			t.Fatalf("the filter let through what parse refuses (%v, type %d): % x", err, m.typ, got)
		}
	})
}

// FuzzParse: parse never panics on a datagram's payload, and a message it accepts marshals
// back to its first messageLen bytes but the three reserved ones.
func FuzzParse(f *testing.F) {
	b := make([]byte, messageLen)
	message{typ: typeReply, nonce: 9, size: 1500}.marshal(b)
	f.Add(b)
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, payload []byte) {
		m, err := parse(payload)
		if err != nil {
			return
		}
		out := make([]byte, messageLen)
		m.marshal(out)
		in := append([]byte(nil), payload[:messageLen]...)
		in[5], in[6], in[7] = 0, 0, 0
		if string(in) != string(out) {
			t.Fatalf("parse(% x) = %+v, which marshals to % x", payload, m, out)
		}
	})
}
