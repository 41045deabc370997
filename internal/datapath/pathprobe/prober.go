package pathprobe

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Options of a measurement.
type Options struct {
	// Timeout is how long the first probe waits for its answer; once one was answered, later
	// probes wait four round trips, within [MinWait, Timeout]. Default 1 s.
	Timeout time.Duration
	// MinWait is the shortest wait for an answer. Default 50 ms.
	MinWait time.Duration
	// Tries is how many probes of one size go unanswered before the size counts as not
	// passing, so that a lost packet does not pass for a small MTU. Default 3.
	Tries int
}

func (o *Options) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.MinWait <= 0 {
		o.MinWait = 50 * time.Millisecond
	}
	if o.Tries <= 0 {
		o.Tries = 3
	}
}

// Probe measures the path from the current network namespace to remote, a gateway's tunnel
// endpoint where a Responder runs: first whether a small probe is answered, then, if it is,
// the path MTU by a search between that size and the local route's MTU with Don't Fragment set
// (IP_PMTUDISC_PROBE: the kernel neither fragments nor caps the size by a path MTU it learned
// before, so each probe tests the path as it is now). A probe too large for the path is
// dropped on the way, whether or not a router says so: its missing answer is the signal. The
// cost is bounded: at most Tries probes for each of about log2(local MTU) sizes. An error is
// returned only when the measurement could not be made (no socket); an unreachable port is a
// Result.
func Probe(ctx context.Context, remote netip.AddrPort, o Options) (Result, error) {
	o.defaults()
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	network, level, discover, probe, mtuOpt := "udp4", unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE, unix.IP_MTU
	if remote.Addr().Is6() {
		network, level, discover, probe, mtuOpt = "udp6", unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE, unix.IPV6_MTU
	}
	c, err := net.DialUDP(network, nil, net.UDPAddrFromAddrPort(remote))
	if err != nil {
		return Result{}, fmt.Errorf("opening a UDP socket towards %s: %w", remote, err)
	}
	defer c.Close()
	// A cancelled measurement ends at once rather than after the probe in flight times out
	// (the gateway's active term waits for it before it hands over).
	defer context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })()
	var localMTU int
	rc, err := c.SyscallConn()
	if err != nil {
		return Result{}, fmt.Errorf("preparing the probe socket: %w", err)
	}
	var sockErr error
	err = rc.Control(func(fd uintptr) {
		if sockErr = unix.SetsockoptInt(int(fd), level, discover, probe); sockErr != nil {
			return
		}
		localMTU, sockErr = unix.GetsockoptInt(int(fd), level, mtuOpt)
	})
	if err = errors.Join(err, sockErr); err != nil {
		return Result{}, fmt.Errorf("setting Don't Fragment on the probe socket towards %s: %w", remote, err)
	}

	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return Result{}, fmt.Errorf("choosing a probe nonce: %w", err)
	}
	s := &session{c: c, o: o, wait: o.Timeout, hdr: headers(remote.Addr()), nonce: binary.BigEndian.Uint64(nonce[:]),
		buf: make([]byte, max(localMTU, 1500)), rbuf: make([]byte, 64)}
	res := Result{LocalMTU: localMTU}
	smallest := s.hdr + messageLen
	ok, err := s.fits(ctx, smallest)
	switch {
	case err != nil:
		return Result{}, err
	case !ok && s.blocked:
		res.Reason = fmt.Sprintf("this node's firewall drops UDP to %s: sending was refused (EPERM), an output rule drops it", remote)
	case !ok && s.refused:
		res.Reason = fmt.Sprintf("refused: %s answered that nothing listens on UDP port %d (ICMP port unreachable)", remote.Addr(), remote.Port())
	case !ok:
		res.Reason = fmt.Sprintf("no answer from UDP %s to %d probes, %s each", remote, o.Tries, o.Timeout)
	default:
		res.Reachable = true
		if res.PathMTU, err = largestFitting(smallest, localMTU, func(size int) (bool, error) { return s.fits(ctx, size) }); err != nil {
			return Result{}, err
		}
	}
	res.Probes, res.Time = s.sent, time.Now()
	return res, nil
}

// session is one measurement's socket and state.
type session struct {
	c       *net.UDPConn
	o       Options
	wait    time.Duration
	hdr     int
	nonce   uint64
	buf     []byte
	rbuf    []byte
	sent    int
	refused bool
	blocked bool
}

// fits sends probes of IP size size until one is answered (true) or Tries went unanswered.
func (s *session) fits(ctx context.Context, size int) (bool, error) {
	n := size - s.hdr
	if n > len(s.buf) {
		s.buf = make([]byte, n)
	}
	payload := s.buf[:n]
	for range s.o.Tries {
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("probing the path: %w", err)
		}
		s.nonce++
		message{typ: typeRequest, nonce: s.nonce}.marshal(payload)
		start := time.Now()
		s.sent++
		if _, err := s.c.Write(payload); err != nil {
			switch {
			case errors.Is(err, unix.EMSGSIZE):
				return false, nil // larger than the local route allows
			case errors.Is(err, syscall.ECONNREFUSED):
				s.refused = true // an earlier probe's ICMP port unreachable
				continue
			case errors.Is(err, syscall.EPERM):
				s.blocked = true // a local output rule dropped it
				continue
			}
			return false, fmt.Errorf("sending a %d-byte probe: %w", size, err)
		}
		answered, err := s.await(ctx, start)
		if err != nil {
			return false, err
		}
		if answered {
			// Later probes wait a few round trips rather than the whole timeout.
			s.wait = min(s.o.Timeout, max(s.o.MinWait, 4*time.Since(start)))
			return true, nil
		}
	}
	return false, nil
}

// await reads until the answer to the current nonce arrives (true) or the wait is over.
func (s *session) await(ctx context.Context, start time.Time) (bool, error) {
	if err := s.c.SetReadDeadline(start.Add(s.wait)); err != nil {
		return false, fmt.Errorf("setting the probe deadline: %w", err)
	}
	if err := ctx.Err(); err != nil {
		// Cancelled after Probe's AfterFunc set the deadline, which we just moved.
		return false, fmt.Errorf("probing the path: %w", err)
	}
	for {
		n, err := s.c.Read(s.rbuf)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return false, nil
		case errors.Is(err, syscall.ECONNREFUSED):
			s.refused = true
			return false, nil
		case err != nil:
			return false, fmt.Errorf("reading probe answers: %w", err)
		}
		// Late answers to earlier probes carry older nonces and are skipped.
		if m, err := parse(s.rbuf[:n]); err == nil && m.typ == typeReply && m.nonce == s.nonce {
			return true, nil
		}
	}
}
