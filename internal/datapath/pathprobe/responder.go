package pathprobe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv4"
)

// Responder answers the probes that arrive at this gateway's tunnel port, from the tunnel port.
//
// It reads them from a raw IPv4 UDP socket, which the kernel hands a copy of every UDP datagram
// delivered locally after the input hooks: a probe reaches the Responder only when the
// firewall lets it through to the tunnel port, exactly like the tunnel's own packets, whoever
// owns the port's socket (wireguard-go, or the kernel for VXLAN, both of which drop the copy
// they get since it is not theirs). A socket filter keeps everything but probe requests to the
// tunnel port in the kernel, so the tunnel's traffic costs a few filter instructions per packet.
// Replies are written with our own IP header from the tunnel port, so that they pass the
// output hooks as the tunnel's packets do.
//
// IPv6 underlays are not answered yet (a probe to an IPv6 endpoint gets no reply).
type Responder struct {
	conn *ipv4.RawConn
	port uint16
	log  logr.Logger
	// limit answers at most burst replies and then one per interval, so that the tunnel port
	// cannot be used to make this node send more than a trickle.
	limit *tokenBucket
	wg    sync.WaitGroup
	once  sync.Once
}

// Replies the Responder sends at most: a burst, then one every replyInterval. A measurement
// sends one probe at a time, so this serves several remote gateways probing at once.
const (
	replyBurst    = 64
	replyInterval = 5 * time.Millisecond
)

// NewResponder starts answering probes to tunnelPort in the current network namespace (it
// needs CAP_NET_RAW). Close stops it.
func NewResponder(tunnelPort uint16, log logr.Logger) (*Responder, error) {
	c, err := net.ListenPacket("ip4:udp", "0.0.0.0")
	if err != nil {
		return nil, fmt.Errorf("opening a raw UDP socket to answer path probes on port %d (needs root or CAP_NET_RAW): %w", tunnelPort, err)
	}
	raw, err := ipv4.NewRawConn(c)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("preparing the raw UDP socket of the path probe responder: %w", err)
	}
	prog, err := bpf.Assemble(requestFilter(tunnelPort))
	if err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("assembling the path probe filter: %w", err)
	}
	if err := raw.SetBPF(prog); err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("attaching the path probe filter to the raw UDP socket: %w", err)
	}
	r := &Responder{conn: raw, port: tunnelPort, log: log, limit: newTokenBucket(replyBurst, replyInterval)}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

// requestCopyLen is how much of a request the filter copies to the socket: the IPv4 header
// (at most 60 bytes with options), the UDP header and the message; the padding is not needed,
// since the size the reply reports comes from the IP header.
const requestCopyLen = 60 + udpHeader + messageLen

// requestFilter is the socket filter of the raw socket, which sees IPv4 packets from their IP
// header: it accepts (the first requestCopyLen bytes of) probe requests to port, and nothing
// else.
func requestFilter(port uint16) []bpf.Instruction {
	magic := binary.BigEndian.Uint32([]byte(Magic))
	return []bpf.Instruction{
		// Fragments other than the first carry no UDP header; the kernel reassembles before
		// local delivery, but the filter must not read payload bytes as ports.
		bpf.LoadAbsolute{Off: 6, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: 8},
		bpf.LoadMemShift{Off: 0}, // X = IP header length
		bpf.LoadIndirect{Off: 2, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(port), SkipTrue: 5},
		bpf.LoadIndirect{Off: udpHeader, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: magic, SkipTrue: 3},
		bpf.LoadIndirect{Off: udpHeader + 4, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(typeRequest), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(requestCopyLen)},
		bpf.RetConstant{Val: 0},
	}
}

func (r *Responder) serve() {
	defer r.wg.Done()
	buf := make([]byte, requestCopyLen)
	reply := make([]byte, udpHeader+messageLen)
	for {
		h, p, _, err := r.conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			r.log.V(1).Info("Reading a path probe", "error", err.Error())
			continue
		}
		if !answer(p, h.TotalLen, r.port, reply) || !r.limit.take(time.Now()) {
			continue
		}
		out := &ipv4.Header{Version: ipv4.Version, Len: ipv4.HeaderLen, TotalLen: ipv4.HeaderLen + len(reply),
			TTL: 64, Protocol: 17, Src: h.Dst, Dst: h.Src}
		if err := r.conn.WriteTo(out, reply, nil); err != nil {
			r.log.V(1).Info("Answering a path probe", "to", h.Src.String(), "error", err.Error())
		}
	}
}

// answer writes into reply (udpHeader+messageLen bytes) the UDP datagram that answers
// datagram, a UDP header and payload that arrived in an IP packet of totalLen bytes, from the
// tunnel port; false, with reply untouched, when datagram is not a probe request. The reply
// goes back to the probe's source port without a UDP checksum (optional over IPv4), in a
// small packet whatever the request's size: each gateway measures its own direction.
// datagram comes from anyone who can reach the tunnel port (FuzzAnswer).
func answer(datagram []byte, totalLen int, port uint16, reply []byte) bool {
	if len(datagram) < udpHeader {
		return false
	}
	m, err := parse(datagram[udpHeader:])
	if err != nil || m.typ != typeRequest {
		return false
	}
	srcPort := binary.BigEndian.Uint16(datagram[0:2])
	binary.BigEndian.PutUint16(reply[0:2], port)
	binary.BigEndian.PutUint16(reply[2:4], srcPort)
	binary.BigEndian.PutUint16(reply[4:6], uint16(udpHeader+messageLen))
	binary.BigEndian.PutUint16(reply[6:8], 0)
	message{typ: typeReply, nonce: m.nonce, size: uint32(max(totalLen, 0))}.marshal(reply[udpHeader:]) //nolint:gosec // an IPv4 length fits
	return true
}

// Close stops answering.
func (r *Responder) Close() error {
	var err error
	r.once.Do(func() {
		err = r.conn.Close()
		r.wg.Wait()
	})
	return err
}

// tokenBucket allows burst events and then one per interval.
type tokenBucket struct {
	mu       sync.Mutex
	tokens   float64
	burst    float64
	interval time.Duration
	last     time.Time
}

func newTokenBucket(burst int, interval time.Duration) *tokenBucket {
	return &tokenBucket{tokens: float64(burst), burst: float64(burst), interval: interval}
}

func (b *tokenBucket) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+float64(now.Sub(b.last))/float64(b.interval))
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
