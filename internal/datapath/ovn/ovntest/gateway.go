package ovntest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
)

// What tests of the gateway's port on the secondary network need: gateway nodes that say who
// they are, and a probe that measures how long traffic stops while the port moves.

// ServeWhoAmI makes a chassis stand for a gateway node in front of another cluster: remote
// on its loopback (standing for what the tunnels reach), and servers there that answer with
// name, which tells a test which node a packet reached: TCP on port 7000 (the request back
// after "name:", see WhoAnswersTCP) and UDP on 7001 (the datagram back after "name:", see
// Probe). They stop when the test ends.
func (ch *Chassis) ServeWhoAmI(remote netip.Addr, name string) {
	t := ch.t
	t.Helper()
	ch.ip("-n", ch.Netns, "link", "set", "lo", "up")
	ch.ip("-n", ch.Netns, "addr", "add", netip.PrefixFrom(remote, remote.BitLen()).String(), "dev", "lo")
	var tcp net.Listener
	var udp net.PacketConn
	tunneltest.In(t, ch.Netns, func() {
		var err error
		if tcp, err = net.Listen("tcp", netip.AddrPortFrom(remote, 7000).String()); err != nil {
			t.Fatal(err)
		}
		if udp, err = net.ListenPacket("udp", netip.AddrPortFrom(remote, 7001).String()); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { _ = tcp.Close(); _ = udp.Close() })
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := io.ReadAll(c)
				if err == nil {
					_, _ = c.Write(append([]byte(name+":"), req...))
				}
			}()
		}
	}()
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = udp.WriteTo(append([]byte(name+":"), buf[:n]...), from)
		}
	}()
}

// WhoAnswersTCP sends 64 KiB over TCP from the pod to remote:7000 (a ServeWhoAmI), retrying for up to
// 20 s, and returns the name of the gateway node that echoed it whole.
func WhoAnswersTCP(t testing.TB, podNetns string, remote netip.Addr) string {
	t.Helper()
	payload := strings.Repeat("octopus-", 8192)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got []byte
		err := tunneltest.InErr(podNetns, func() error {
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(remote, 7000).String(), 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			go func() { _, _ = io.WriteString(c, payload); _ = c.(*net.TCPConn).CloseWrite() }()
			got, err = io.ReadAll(c)
			return err
		})
		if name, rest, ok := strings.Cut(string(got), ":"); err == nil && ok && rest == payload {
			return name
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pod cannot exchange %d bytes with %s over TCP through the gateway: %v (got %d bytes)", len(payload), remote, err, len(got))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Reply is one answer to a Probe.
type Reply struct {
	At   time.Time
	From string
	Seq  uint64
}

// Probe sends a UDP datagram from a pod to remote:7001 (a ServeWhoAmI) every interval and
// records who answers, until closed.
type Probe struct {
	conn     net.Conn
	interval time.Duration
	mu       sync.Mutex
	sent     map[uint64]time.Time
	replies  []Reply
	stop     chan struct{}
	done     sync.WaitGroup
}

// StartProbe starts a Probe from podNetns to remote; it is closed when the test ends.
func StartProbe(t testing.TB, podNetns string, remote netip.Addr, interval time.Duration) *Probe {
	t.Helper()
	p := &Probe{interval: interval, sent: map[uint64]time.Time{}, stop: make(chan struct{})}
	tunneltest.In(t, podNetns, func() {
		var err error
		if p.conn, err = net.Dial("udp", netip.AddrPortFrom(remote, 7001).String()); err != nil {
			t.Fatal(err)
		}
	})
	p.done.Add(2)
	go func() {
		defer p.done.Done()
		buf := make([]byte, 64)
		for {
			n, err := p.conn.Read(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			name, seq, ok := strings.Cut(string(buf[:n]), ":")
			if err != nil || !ok || len(seq) != 8 {
				continue // an ICMP error while no gateway answers, or garbage
			}
			p.mu.Lock()
			p.replies = append(p.replies, Reply{At: time.Now(), From: name, Seq: binary.BigEndian.Uint64([]byte(seq))})
			p.mu.Unlock()
		}
	}()
	go func() {
		defer p.done.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		var seq uint64
		for {
			select {
			case <-p.stop:
				return
			case now := <-tick.C:
				seq++
				p.mu.Lock()
				p.sent[seq] = now
				p.mu.Unlock()
				_, _ = p.conn.Write(binary.BigEndian.AppendUint64(nil, seq))
			}
		}
	}()
	t.Cleanup(p.Close)
	return p
}

// Close stops the probe; closing it again does nothing.
func (p *Probe) Close() {
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	_ = p.conn.Close()
	p.done.Wait()
}

// Since returns the replies received at or after from.
func (p *Probe) Since(from time.Time) []Reply {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Reply
	for _, r := range p.replies {
		if !r.At.Before(from) {
			out = append(out, r)
		}
	}
	return out
}

// WaitFor waits up to 10 s until the last `steady` replies all came from node, and returns
// the time of the first of the run of replies from node that ends them.
func (p *Probe) WaitFor(t testing.TB, node string, from time.Time, steady int) time.Time {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rs := p.Since(from)
		if len(rs) >= steady && !slices.ContainsFunc(rs[len(rs)-steady:], func(r Reply) bool { return r.From != node }) {
			first := len(rs) - 1
			for first > 0 && rs[first-1].From == node {
				first--
			}
			return rs[first].At
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the switch the probe is not answered by %s alone; replies since: %d, last %v", node, len(rs), LastReplies(rs, 5))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Failover is what a Probe saw around one switch of the active gateway.
type Failover struct {
	// Outage is the longest time without a reply between the switch and the first reply of
	// the new gateway; Lost counts the probes sent in that time that got no reply.
	Outage time.Duration
	Lost   int
	// ToNew is from the switch to the first reply through the new gateway.
	ToNew time.Duration
	// OldAfter counts replies from the old gateway after the new one first answered.
	OldAfter int
}

// Measure is what the probe saw from the switch at `switched` to firstNew, the first reply
// through the new gateway (WaitFor), with oldNode the old gateway.
func (p *Probe) Measure(switched, firstNew time.Time, oldNode string) Failover {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := Failover{ToNew: firstNew.Sub(switched)}
	answered := map[uint64]bool{}
	last := switched
	for _, r := range p.replies {
		answered[r.Seq] = true
		if r.At.Before(switched) {
			continue
		}
		if r.From == oldNode && r.At.After(firstNew) {
			f.OldAfter++
		}
		if !r.At.After(firstNew) {
			f.Outage = max(f.Outage, r.At.Sub(last))
			last = r.At
		}
	}
	for seq, at := range p.sent {
		if !at.Before(switched) && at.Before(firstNew) && !answered[seq] {
			f.Lost++
		}
	}
	return f
}

// LastReplies names the last n replies, "node#seq", for messages.
func LastReplies(rs []Reply, n int) []string {
	var out []string
	for _, r := range rs[max(0, len(rs)-n):] {
		out = append(out, fmt.Sprintf("%s#%d", r.From, r.Seq))
	}
	return out
}

// BoundChassis is the name of the chassis the southbound database binds logical port port
// to ("" for none).
func (c *Central) BoundChassis(t testing.TB, port string) string {
	t.Helper()
	ctx := context.Background()
	out, err := c.SB.Ctl(ctx, "--bare", "--columns=chassis", "find", "Port_Binding", "logical_port="+port)
	if err != nil {
		t.Fatal(err)
	}
	uuid := strings.TrimSpace(out)
	if uuid == "" {
		return ""
	}
	out, err = c.SB.Ctl(ctx, "--bare", "--columns=name", "list", "Chassis", uuid)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}
