// Package tunneltest builds real-kernel test topologies for the tunnel drivers: gateway network
// namespaces joined by a veth underlay, each with a "pod" namespace behind it, and the probes
// (ping, TCP echo, packet capture, kernel-state snapshot) the drivers' tests assert with. Only
// tests import it; every test using it must hold testenv.LabNetwork first.
package tunneltest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// Gateway is one gateway namespace with its pod namespace behind it.
type Gateway struct {
	NS        string       // gateway namespace name
	PodNS     string       // pod namespace name
	Underlay  netip.Addr   // 203.0.113.<i>
	UnderDev  string       // underlay link name inside NS
	PodSubnet netip.Prefix // 10.<i>.0.0/24
	PodAddr   netip.Addr   // 10.<i>.0.2
	Device    string       // a machine-unique tunnel device name for this gateway
}

// Topology is n gateways (2 or 3) on one underlay bridge namespace.
type Topology struct {
	Gateways []Gateway
	names    []string
}

var topologies atomic.Int64

// Run runs a command and fails the test with its output on error.
func Run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// New builds n gateways. The underlay is a bridge in its own namespace, so each gateway's
// underlay veth end can be captured on without seeing the others' traffic twice.
func New(t testing.TB, n int) *Topology {
	t.Helper()
	// Names are unique per process and topology: namespaces and device names are machine-wide.
	id := fmt.Sprintf("%d-%d", os.Getpid()%100000, topologies.Add(1))
	topo := &Topology{}
	ns := func(role string) string {
		name := fmt.Sprintf("tt%s-%s", id, role)
		Run(t, "ip", "netns", "add", name)
		topo.names = append(topo.names, name)
		Run(t, "ip", "-n", name, "link", "set", "lo", "up")
		return name
	}
	t.Cleanup(func() {
		for _, name := range topo.names {
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				t.Errorf("deleting namespace %s: %v: %s", name, err, out)
			}
		}
	})
	under := ns("under")
	Run(t, "ip", "-n", under, "link", "add", "br0", "type", "bridge")
	Run(t, "ip", "-n", under, "link", "set", "br0", "up")
	for i := 1; i <= n; i++ {
		g := Gateway{
			NS:        ns(fmt.Sprintf("gw%d", i)),
			PodNS:     ns(fmt.Sprintf("pod%d", i)),
			Underlay:  netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}),
			UnderDev:  "eth0",
			PodSubnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 24),
			PodAddr:   netip.AddrFrom4([4]byte{10, byte(i), 0, 2}),
			Device:    fmt.Sprintf("tt%s-t%d", id, i),
		}
		port := fmt.Sprintf("u%d", i)
		Run(t, "ip", "-n", under, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", g.NS)
		Run(t, "ip", "-n", under, "link", "set", port, "master", "br0", "up")
		Run(t, "ip", "-n", g.NS, "addr", "add", g.Underlay.String()+"/24", "dev", "eth0")
		Run(t, "ip", "-n", g.NS, "link", "set", "eth0", "up")
		Run(t, "ip", "-n", g.PodNS, "link", "add", "eth0", "type", "veth", "peer", "name", "pod", "netns", g.NS)
		Run(t, "ip", "-n", g.NS, "addr", "add", fmt.Sprintf("10.%d.0.1/24", i), "dev", "pod")
		Run(t, "ip", "-n", g.NS, "link", "set", "pod", "up")
		Run(t, "ip", "-n", g.PodNS, "addr", "add", g.PodAddr.String()+"/24", "dev", "eth0")
		Run(t, "ip", "-n", g.PodNS, "link", "set", "eth0", "up")
		Run(t, "ip", "-n", g.PodNS, "route", "add", "default", "via", fmt.Sprintf("10.%d.0.1", i))
		Run(t, "ip", "netns", "exec", g.NS, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
		topo.Gateways = append(topo.Gateways, g)
	}
	return topo
}

// In runs fn on a thread switched into namespace name. Sockets and devices fn creates stay in
// that namespace whichever thread later uses them.
func In(t testing.TB, name string, fn func()) {
	t.Helper()
	if err := InErr(name, func() error { fn(); return nil }); err != nil {
		t.Fatal(err)
	}
}

// InErr is In for callers that handle the error themselves.
func InErr(name string, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return fmt.Errorf("getting the current namespace: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("opening namespace %s: %w", name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return fmt.Errorf("entering namespace %s: %w", name, err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(fmt.Sprintf("cannot return to the original namespace, the thread is tainted: %v", err))
		}
	}()
	return fn()
}

// Ping sends ICMP echo requests from namespace ns to dst until one is answered or timeout.
func Ping(ns string, dst netip.Addr, timeout time.Duration) error {
	var c *icmp.PacketConn
	if err := InErr(ns, func() (err error) { c, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0"); return err }); err != nil {
		return fmt.Errorf("opening an ICMP socket in %s: %w", ns, err)
	}
	defer c.Close()
	deadline := time.Now().Add(timeout)
	id := os.Getpid() & 0xffff
	for seq := 1; time.Now().Before(deadline); seq++ {
		msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("tunneltest")}}
		b, _ := msg.Marshal(nil)
		if _, err := c.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				break
			}
			m, err := icmp.ParseMessage(1, buf[:n])
			if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
				continue
			}
			if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id && from.String() == dst.String() {
				return nil
			}
		}
	}
	return fmt.Errorf("no ICMP echo reply from %s in namespace %s within %s", dst, ns, timeout)
}

// TCPEcho listens on server:port in serverNS, connects from clientNS, sends payload and
// returns what the server echoed.
func TCPEcho(t testing.TB, serverNS, clientNS string, server netip.AddrPort, payload []byte) []byte {
	t.Helper()
	var ln net.Listener
	In(t, serverNS, func() {
		var err error
		if ln, err = net.Listen("tcp", server.String()); err != nil {
			t.Fatalf("listening on %s in %s: %v", server, serverNS, err)
		}
	})
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.CopyN(c, c, int64(len(payload)))
	}()
	var c net.Conn
	In(t, clientNS, func() {
		var err error
		d := net.Dialer{Timeout: 10 * time.Second}
		if c, err = d.DialContext(context.Background(), "tcp", server.String()); err != nil {
			t.Fatalf("connecting from %s to %s: %v", clientNS, server, err)
		}
	})
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(payload); err != nil {
		t.Fatalf("sending to %s: %v", server, err)
	}
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading the echo from %s: %v", server, err)
	}
	return got
}

// Capture records the frames seen on a link of a namespace until Stop.
type Capture struct {
	fd     int
	mu     sync.Mutex
	frames [][]byte
	done   chan struct{}
	stopCh chan struct{}
	once   sync.Once
	err    error
}

// StartCapture opens an AF_PACKET socket on dev in namespace ns.
func StartCapture(t testing.TB, ns, dev string) *Capture {
	t.Helper()
	c := &Capture{done: make(chan struct{}), stopCh: make(chan struct{})}
	proto := int(htons(unix.ETH_P_ALL))
	In(t, ns, func() {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			t.Fatalf("capture: %s in %s: %v", dev, ns, err)
		}
		if c.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto); err != nil {
			t.Fatalf("capture: opening a packet socket: %v", err)
		}
		if err := unix.Bind(c.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			t.Fatalf("capture: binding to %s: %v", dev, err)
		}
	})
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	_ = unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	go func() {
		defer close(c.done)
		buf := make([]byte, 65536)
		for {
			n, _, err := unix.Recvfrom(c.fd, buf, 0)
			if err != nil {
				if err == unix.EAGAIN || err == unix.EINTR {
					// Stop only once the socket has gone quiet: frames still queued when Stop
					// is called (a loaded machine's reader lags) belong to the capture.
					select {
					case <-c.stopCh:
						return
					default:
					}
					continue
				}
				c.mu.Lock()
				c.err = fmt.Errorf("capture: reading: %w", err)
				c.mu.Unlock()
				return
			}
			c.mu.Lock()
			c.frames = append(c.frames, bytes.Clone(buf[:n]))
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _, _ = c.Stop() })
	return c
}

// Stop ends the capture and returns the frames (Ethernet headers included) and any error
// that ended it early.
func (c *Capture) Stop() ([][]byte, error) {
	c.once.Do(func() {
		close(c.stopCh)
		<-c.done
		_ = unix.Close(c.fd)
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames, c.err
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// udpOf returns the UDP ports and payload of an Ethernet/IPv4/UDP frame; ipv4 says whether
// the frame is IPv4 at all.
func udpOf(frame []byte) (sport, dport uint16, payload []byte, ipv4, ok bool) {
	if len(frame) < 14+20 || frame[12] != 0x08 || frame[13] != 0x00 {
		return 0, 0, nil, false, false
	}
	sport, dport, payload, ok = udpIn(frame[14:])
	return sport, dport, payload, true, ok
}

// udpIn returns the UDP ports and payload of an IPv4 packet (at least its header and the UDP
// header, as an ICMP error quotes it); ok is false for any other packet.
func udpIn(ip []byte) (sport, dport uint16, payload []byte, ok bool) {
	if len(ip) < 20 {
		return 0, 0, nil, false
	}
	ihl := int(ip[0]&0x0f) * 4
	if ip[9] != unix.IPPROTO_UDP || len(ip) < ihl+8 {
		return 0, 0, nil, false
	}
	udp := ip[ihl:]
	return uint16(udp[0])<<8 | uint16(udp[1]), uint16(udp[2])<<8 | uint16(udp[3]), udp[8:], true
}

// tunnelControl reports whether an IPv4 frame that is not the tunnel's UDP still belongs to the
// underlay's own operation rather than to traffic that bypassed the tunnel: an IGMP report
// (the kernel announces multicast memberships when an interface comes up), or an ICMP error
// about the tunnel's own UDP (a handshake sent before the peer's socket was open), which
// quotes that datagram.
func tunnelControl(frame []byte, port uint16) bool {
	ip := frame[14:]
	ihl := int(ip[0]&0x0f) * 4
	if len(ip) < ihl {
		return false
	}
	switch ip[9] {
	case unix.IPPROTO_IGMP:
		return true
	case unix.IPPROTO_ICMP:
		// type(1) code(1) checksum(2) unused(4), then the original IPv4 header and 8 bytes.
		icmp := ip[ihl:]
		if len(icmp) < 8+20 || (icmp[0] != 3 && icmp[0] != 11) {
			return false // not destination unreachable or time exceeded
		}
		sport, dport, _, ok := udpIn(icmp[8:])
		return ok && (sport == port || dport == port)
	}
	return false
}

// CheckWire asserts what an underlay capture carried while canary crossed a tunnel on UDP
// port. Encrypted: IPv4 only as UDP to or from port, and the canary nowhere. Not encrypted
// (vxlan): the canary, and only inside VXLAN frames with vni, which also proves the capture
// saw the transfer at all.
func CheckWire(t testing.TB, frames [][]byte, port uint16, vni int, canary []byte, encrypted bool) {
	t.Helper()
	var tunnelFrames, otherIPv4, plaintextFrames, vxlanPlaintext int
	for _, f := range frames {
		sport, dport, payload, ipv4, ok := udpOf(f)
		switch {
		case ok && (dport == port || sport == port):
			tunnelFrames++
			if dport == port && len(payload) >= 8 && payload[0] == 0x08 && int(payload[4])<<16|int(payload[5])<<8|int(payload[6]) == vni &&
				bytes.Contains(payload, canary) {
				vxlanPlaintext++
			}
		case ipv4 && !tunnelControl(f, port):
			otherIPv4++
			t.Logf("underlay IPv4 frame that is not the tunnel's: protocol %d, %d bytes", f[14+9], len(f))
		}
		if bytes.Contains(f, canary) {
			plaintextFrames++
		}
	}
	t.Logf("captured %d frames: %d UDP to or from port %d, %d other IPv4, %d with the plaintext, %d of those VXLAN with VNI %d",
		len(frames), tunnelFrames, port, otherIPv4, plaintextFrames, vxlanPlaintext, vni)
	if tunnelFrames == 0 {
		t.Fatalf("no UDP frames to or from port %d on the underlay", port)
	}
	if encrypted && plaintextFrames > 0 {
		t.Fatalf("%d underlay frames carry the plaintext: the tunnel does not encrypt (or is bypassed)", plaintextFrames)
	}
	if encrypted && otherIPv4 > 0 {
		t.Fatalf("%d IPv4 frames on the underlay are not the tunnel's UDP: traffic bypasses the tunnel", otherIPv4)
	}
	if !encrypted && (vxlanPlaintext == 0 || vxlanPlaintext != plaintextFrames) {
		t.Fatalf("plaintext in %d frames, %d of them VXLAN-encapsulated with VNI %d: want all, and at least one", plaintextFrames, vxlanPlaintext, vni)
	}
}

// SYNMSS returns the MSS option of the first TCP SYN to dst among Ethernet/IPv4 frames.
func SYNMSS(frames [][]byte, dst netip.AddrPort) (uint16, bool) {
	for _, f := range frames {
		if len(f) < 14+20 || f[12] != 0x08 || f[13] != 0x00 {
			continue
		}
		ip := f[14:]
		ihl := int(ip[0]&0x0f) * 4
		if ip[9] != unix.IPPROTO_TCP || len(ip) < ihl+20 || netip.AddrFrom4([4]byte(ip[16:20])) != dst.Addr() {
			continue
		}
		tcp := ip[ihl:]
		doff := int(tcp[12]>>4) * 4
		if uint16(tcp[2])<<8|uint16(tcp[3]) != dst.Port() || tcp[13]&0x12 != 0x02 || len(tcp) < doff {
			continue
		}
		for opts := tcp[20:doff]; len(opts) > 0; {
			switch kind := opts[0]; {
			case kind == 0:
				opts = nil
			case kind == 1:
				opts = opts[1:]
			case len(opts) < 2 || int(opts[1]) < 2 || int(opts[1]) > len(opts):
				opts = nil
			case kind == 2 && opts[1] == 4:
				return uint16(opts[2])<<8 | uint16(opts[3]), true
			default:
				opts = opts[opts[1]:]
			}
		}
	}
	return 0, false
}
