package pathprobe

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
)

// FuzzAnswer sends any packet, as anyone who reaches a gateway's tunnel port can, through the
// Responder's socket filter (run in x/net/bpf's interpreter, as the kernel runs it) and its
// answer. The filter passes exactly the first fragments of IPv4 datagrams to the tunnel port
// that start a probe request (requestFilter's description, written out in wantRequest), and
// never more than requestCopyLen bytes; answer answers exactly what parses as a request, with
// a reply from the tunnel port to the probe's source port that carries its nonce and the
// request's IP length, and that the Prober takes for a reply.
func FuzzAnswer(f *testing.F) {
	const port = 4500
	request := make([]byte, ipv4Header+udpHeader+messageLen+100)
	request[0] = 0x45
	binary.BigEndian.PutUint16(request[ipv4Header:], 40000)
	binary.BigEndian.PutUint16(request[ipv4Header+2:], port)
	message{typ: typeRequest, nonce: 42}.marshal(request[ipv4Header+udpHeader:])
	f.Add(request)
	fragment := append([]byte(nil), request...)
	fragment[7] = 1
	f.Add(fragment)
	withOptions := append(append(append([]byte{0x46}, request[1:ipv4Header]...), 0, 0, 0, 0), request[ipv4Header:]...)
	f.Add(withOptions)
	reply := append([]byte(nil), request...)
	reply[ipv4Header+udpHeader+4] = typeReply
	f.Add(reply)
	f.Add([]byte{0x45, 0, 0})

	vm, err := bpf.NewVM(requestFilter(port))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, packet []byte) {
		accepted, err := vm.Run(packet)
		if err != nil {
			t.Fatalf("the filter failed on %x: %v", packet, err)
		}
		if want := wantRequest(packet, port); (accepted > 0) != want {
			t.Fatalf("the filter accepted %d bytes of %x; want a request: %v", accepted, packet, want)
		}
		if accepted > requestCopyLen {
			t.Fatalf("the filter copied %d bytes, more than %d", accepted, requestCopyLen)
		}
		if accepted == 0 {
			return
		}
		// What the socket reads past the IP header.
		datagram := packet[int(packet[0]&0x0f)*4 : accepted]
		out := make([]byte, udpHeader+messageLen)
		isRequest := len(datagram) >= udpHeader && func() bool {
			m, err := parse(datagram[udpHeader:])
			return err == nil && m.typ == typeRequest
		}()
		if got := answer(datagram, len(packet), port, out); got != isRequest {
			t.Fatalf("answer(%x) = %v, want %v", datagram, got, isRequest)
		}
		if !isRequest {
			return
		}
		m, err := parse(out[udpHeader:])
		if err != nil || m.typ != typeReply || m.nonce != binary.BigEndian.Uint64(datagram[udpHeader+8:]) || m.size != uint32(len(packet)) { //nolint:gosec // fuzz inputs are small
			t.Fatalf("reply %x to %x: %+v, %v", out, datagram, m, err)
		}
		if from, to := binary.BigEndian.Uint16(out[0:2]), binary.BigEndian.Uint16(out[2:4]); from != port || to != binary.BigEndian.Uint16(datagram[0:2]) {
			t.Fatalf("reply from port %d to %d; want from %d to the probe's %d", from, to, port, binary.BigEndian.Uint16(datagram[0:2]))
		}
	})
}

// wantRequest is what requestFilter passes: the first (or only) fragment of an IPv4 packet
// whose UDP destination port is port and whose payload starts with Magic and the request type.
// Reads past the packet's end reject it, as they do in the kernel.
func wantRequest(p []byte, port uint16) bool {
	if len(p) < 8 || binary.BigEndian.Uint16(p[6:8])&0x1fff != 0 {
		return false
	}
	x := int(p[0]&0x0f) * 4
	if len(p) < x+udpHeader+len(Magic)+1 {
		return false
	}
	return binary.BigEndian.Uint16(p[x+2:]) == port && string(p[x+udpHeader:x+udpHeader+len(Magic)]) == Magic && p[x+udpHeader+len(Magic)] == typeRequest
}
