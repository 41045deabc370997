package health

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// ICMP is the Transport of echo requests over raw sockets of the current network namespace.
type ICMP struct {
	id      uint16 // our echo identifier: raw sockets see every echo reply of the namespace
	v4, v6  *icmp.PacketConn
	replies chan reply
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

type reply struct {
	from netip.Addr
	seq  uint16
}

var _ Transport = (*ICMP)(nil)

// NewICMP opens raw ICMP sockets (needs CAP_NET_RAW). IPv6 is optional: a namespace without
// it probes IPv4 targets only.
func NewICMP() (*ICMP, error) {
	var idb [2]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return nil, fmt.Errorf("choosing an ICMP identifier: %w", err)
	}
	t := &ICMP{id: binary.BigEndian.Uint16(idb[:]), replies: make(chan reply, 64), done: make(chan struct{})}
	var err error
	if t.v4, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0"); err != nil {
		return nil, fmt.Errorf("opening a raw ICMP socket (the prober needs root or CAP_NET_RAW): %w", err)
	}
	if t.v6, err = icmp.ListenPacket("ip6:ipv6-icmp", "::"); err != nil {
		t.v6 = nil
	}
	for _, c := range []*icmp.PacketConn{t.v4, t.v6} {
		if c != nil {
			t.wg.Add(1)
			go t.read(c)
		}
	}
	return t, nil
}

// Send sends an echo request.
func (t *ICMP) Send(dst netip.Addr, seq uint16) error {
	dst = dst.Unmap()
	c, typ := t.v4, icmp.Type(ipv4.ICMPTypeEcho)
	if dst.Is6() {
		if t.v6 == nil {
			return fmt.Errorf("no IPv6 ICMP socket to probe %s: is IPv6 enabled in this namespace?", dst)
		}
		c, typ = t.v6, ipv6.ICMPTypeEchoRequest
	}
	b, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: int(t.id), Seq: int(seq), Data: []byte("octopus-health")}}).Marshal(nil)
	if err != nil {
		return fmt.Errorf("building an echo request: %w", err)
	}
	if _, err := c.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return fmt.Errorf("sending an echo request to %s: %w", dst, err)
	}
	return nil
}

// Receive returns the next echo reply to us.
func (t *ICMP) Receive() (netip.Addr, uint16, error) {
	select {
	case r := <-t.replies:
		return r.from, r.seq, nil
	case <-t.done:
		return netip.Addr{}, 0, net.ErrClosed
	}
}

// Close closes the sockets; the readers have returned when it does.
func (t *ICMP) Close() error {
	var errs []error
	t.once.Do(func() {
		close(t.done)
		for _, c := range []*icmp.PacketConn{t.v4, t.v6} {
			if c != nil {
				errs = append(errs, c.Close())
			}
		}
		t.wg.Wait()
	})
	return errors.Join(errs...)
}

func (t *ICMP) read(c *icmp.PacketConn) {
	defer t.wg.Done()
	proto, want := 1, icmp.Type(ipv4.ICMPTypeEchoReply)
	if c == t.v6 {
		proto, want = 58, ipv6.ICMPTypeEchoReply
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || m.Type != want {
			continue
		}
		e, ok := m.Body.(*icmp.Echo)
		ipa, ok2 := from.(*net.IPAddr)
		if !ok || !ok2 || uint16(e.ID) != t.id {
			continue
		}
		addr, _ := netip.AddrFromSlice(ipa.IP)
		select {
		case t.replies <- reply{from: addr.Unmap(), seq: uint16(e.Seq)}:
		case <-t.done:
			return
		}
	}
}
