package nat

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
	"github.com/octopus-mcs/octopus/internal/ipam"
)

// The real-kernel tests build two clusters whose pod CIDRs are the same, 10.244.1.0/24, each
// behind its gateway namespace; the gateways are joined by a link (standing in for the tunnel)
// and route each other's global CIDRs over it:
//
//	client (10.244.1.10, .7) ── gwa ═══ gwb ── server (10.244.1.20, .21)
//	          cluster A, global 242.1.0.0/16      cluster B, global 242.2.0.0/16
//
// Nothing but the NAT makes the overlap work: without it the client's packets to 10.244.1.x
// never leave its own subnet, and the server could not answer a 10.244.1.x source.
var (
	globalA = netip.MustParsePrefix("242.1.0.0/16")
	globalB = netip.MustParsePrefix("242.2.0.0/16")
	egressA = rng("242.1.0.0", "242.1.0.7")
	// The client's second address has an egress range of its own (one address, to check it).
	clientSpecial = netip.MustParseAddr("10.244.1.7")
	specialEgress = rng("242.1.0.8", "242.1.0.8")

	server1 = netip.MustParseAddr("10.244.1.20")
	server2 = netip.MustParseAddr("10.244.1.21")
	echoIP  = netip.MustParseAddr("242.2.0.16") // service demo/echo: tcp 80 → both servers :8080, udp 53 → server1:5353, udp 80 → both servers :5353
	podIP   = netip.MustParseAddr("242.2.0.17") // headless pod demo/echo-1 → server2
)

type topology struct {
	client, gwa, gwb, server string
}

var namespaces atomic.Int64

// newTopology builds the namespaces above; they are deleted when the test ends.
func newTopology(t testing.TB) *topology {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces (run the tests as root; CI does)")
	}
	id := fmt.Sprintf("gn%d-%d", os.Getpid()%100000, namespaces.Add(1))
	topo := &topology{client: id + "-client", gwa: id + "-gwa", gwb: id + "-gwb", server: id + "-server"}
	for _, ns := range []string{topo.client, topo.gwa, topo.gwb, topo.server} {
		tunneltest.Run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("deleting namespace %s: %v: %s", ns, err, out)
			}
		})
		tunneltest.Run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	// Each cluster: the pod namespace's eth0 ↔ the gateway's "pods", 10.244.1.0/24 on both sides.
	for _, c := range []struct{ pod, gw string }{{topo.client, topo.gwa}, {topo.server, topo.gwb}} {
		tunneltest.Run(t, "ip", "-n", c.gw, "link", "add", "pods", "type", "veth", "peer", "name", "eth0", "netns", c.pod)
		tunneltest.Run(t, "ip", "-n", c.gw, "addr", "add", "10.244.1.1/24", "dev", "pods")
		tunneltest.Run(t, "ip", "-n", c.gw, "link", "set", "pods", "up")
		tunneltest.Run(t, "ip", "-n", c.pod, "link", "set", "eth0", "up")
		tunneltest.Run(t, "ip", "-n", c.pod, "route", "add", "default", "via", "10.244.1.1", "dev", "eth0", "onlink")
		tunneltest.Run(t, "ip", "netns", "exec", c.gw, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	}
	for _, a := range []string{"10.244.1.10/24", clientSpecial.String() + "/24"} {
		tunneltest.Run(t, "ip", "-n", topo.client, "addr", "add", a, "dev", "eth0")
	}
	for _, a := range []netip.Addr{server1, server2} {
		tunneltest.Run(t, "ip", "-n", topo.server, "addr", "add", a.String()+"/24", "dev", "eth0")
	}
	tunneltest.Run(t, "ip", "-n", topo.gwa, "link", "add", "wan", "type", "veth", "peer", "name", "wan", "netns", topo.gwb)
	for _, g := range []struct{ ns, addr, peer, remote string }{
		{topo.gwa, "192.0.2.1/30", "192.0.2.2", globalB.String()},
		{topo.gwb, "192.0.2.2/30", "192.0.2.1", globalA.String()},
	} {
		tunneltest.Run(t, "ip", "-n", g.ns, "addr", "add", g.addr, "dev", "wan")
		tunneltest.Run(t, "ip", "-n", g.ns, "link", "set", "wan", "up")
		tunneltest.Run(t, "ip", "-n", g.ns, "route", "add", g.remote, "via", g.peer)
		// A node has a default route; without one, traffic to an untranslated global address
		// would be refused by routing before the table's forward chain could refuse it.
		tunneltest.Run(t, "ip", "-n", g.ns, "link", "add", "uplink", "type", "veth", "peer", "name", "uplink-end")
		tunneltest.Run(t, "ip", "-n", g.ns, "link", "set", "uplink", "up")
		tunneltest.Run(t, "ip", "-n", g.ns, "link", "set", "uplink-end", "up")
		tunneltest.Run(t, "ip", "-n", g.ns, "route", "add", "default", "dev", "uplink")
	}
	return topo
}

// twoClusters builds the topology, starts the servers and applies A's NAT (stateA); it
// returns B's NAT, not applied yet.
func twoClusters(t testing.TB) (*topology, *NAT) {
	t.Helper()
	topo := newTopology(t)
	serve(t, topo.server)
	apply(t, topo.gwa, newNAT(t, topo.gwa), stateA())
	return topo, newNAT(t, topo.gwb)
}

// stateA is cluster A's NAT: egress only.
func stateA() State {
	return State{
		GlobalCIDRs:   []netip.Prefix{globalA},
		RemoteCIDRs:   []netip.Prefix{globalB},
		TunnelDevice:  "wan", // the link to B, standing in for the tunnel
		ClusterEgress: []ipam.Range{egressA},
		PodEgress:     []PodEgress{{Pod: clientSpecial, Range: specialEgress}},
	}
}

// stateB is cluster B's NAT: the echo service, the headless pod, and egress of its own.
func stateB() State {
	return State{
		GlobalCIDRs:   []netip.Prefix{globalB},
		RemoteCIDRs:   []netip.Prefix{globalA},
		TunnelDevice:  "wan",
		ClusterEgress: []ipam.Range{rng("242.2.0.0", "242.2.0.7")},
		Services: []Service{{Name: "demo/echo", GlobalIP: echoIP, Ports: []Port{
			{Protocol: TCP, Port: 80, Endpoints: []netip.AddrPort{netip.AddrPortFrom(server1, 8080), netip.AddrPortFrom(server2, 8080)}},
			{Protocol: UDP, Port: 53, Endpoints: []netip.AddrPort{netip.AddrPortFrom(server1, 5353)}},
			// The port and endpoint count of the TCP port: both share a load-balancing chain.
			{Protocol: UDP, Port: 80, Endpoints: []netip.AddrPort{netip.AddrPortFrom(server1, 5353), netip.AddrPortFrom(server2, 5353)}},
		}}},
		Pods: []PodIngress{{Name: "demo/echo-1", GlobalIP: podIP, Pod: server2}},
	}
}

// apply applies s in namespace ns through n (a NAT made there).
func apply(t testing.TB, ns string, n *NAT, s State) {
	t.Helper()
	if err := tunneltest.InErr(ns, func() error { return n.Apply(context.Background(), s) }); err != nil {
		t.Fatalf("applying in %s: %v", ns, err)
	}
}

func newNAT(t testing.TB, ns string) *NAT {
	t.Helper()
	var n *NAT
	if err := tunneltest.InErr(ns, func() (err error) { n, err = New(Options{}); return err }); err != nil {
		t.Fatal(err)
	}
	return n
}

// serve starts, in the server namespace, TCP listeners on server1:8080, server2:8080 and
// server2:9000 and UDP ones on server1:5353 and server2:5353 (serveOn).
func serve(t testing.TB, ns string) {
	t.Helper()
	serveOn(t, ns,
		[]netip.AddrPort{netip.AddrPortFrom(server1, 8080), netip.AddrPortFrom(server2, 8080), netip.AddrPortFrom(server2, 9000)},
		[]netip.AddrPort{netip.AddrPortFrom(server1, 5353), netip.AddrPortFrom(server2, 5353)})
}

// serveOn starts, in the server namespace, TCP listeners on tcp and UDP ones on udp. Each
// answers "<its address> <peer address>\n" and then echoes whatever it receives.
func serveOn(t testing.TB, ns string, tcp, udp []netip.AddrPort) {
	t.Helper()
	for _, a := range tcp {
		var ln net.Listener
		tunneltest.In(t, ns, func() {
			var err error
			if ln, err = net.Listen("tcp", a.String()); err != nil {
				t.Fatal(err)
			}
		})
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					fmt.Fprintf(c, "%s %s\n", c.LocalAddr(), c.RemoteAddr())
					_, _ = io.Copy(c, c)
				}()
			}
		}()
	}
	for _, a := range udp {
		var pc net.PacketConn
		tunneltest.In(t, ns, func() {
			var err error
			if pc, err = net.ListenPacket("udp", a.String()); err != nil {
				t.Fatal(err)
			}
		})
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 1500)
			for {
				_, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo(fmt.Appendf(nil, "%s %s\n", pc.LocalAddr(), from), from)
			}
		}()
	}
}

// answer is what a server said: which of its addresses answered and whom it saw.
type answer struct {
	server netip.AddrPort
	peer   netip.AddrPort
}

func parseAnswer(line string) (answer, error) {
	f := strings.Fields(line)
	if len(f) != 2 {
		return answer{}, fmt.Errorf("unexpected answer %q", line)
	}
	s, err1 := netip.ParseAddrPort(f[0])
	p, err2 := netip.ParseAddrPort(f[1])
	return answer{s, p}, errors.Join(err1, err2)
}

// dial connects from the client namespace, from address from (any when invalid).
func dial(t testing.TB, ns, network string, from netip.Addr, to netip.AddrPort) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{Timeout: 3 * time.Second}
	if from.IsValid() {
		if network == "tcp" {
			d.LocalAddr = &net.TCPAddr{IP: from.AsSlice()}
		} else {
			d.LocalAddr = &net.UDPAddr{IP: from.AsSlice()}
		}
	}
	var c net.Conn
	err := tunneltest.InErr(ns, func() (err error) { c, err = d.Dial(network, to.String()); return err })
	return c, err
}

// ask connects, reads the server's answer and closes.
func ask(t testing.TB, ns, network string, from netip.Addr, to netip.AddrPort) (answer, error) {
	t.Helper()
	c, err := dial(t, ns, network, from, to)
	if err != nil {
		return answer{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if network == "udp" {
		if _, err := c.Write([]byte("?")); err != nil {
			return answer{}, err
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return answer{}, fmt.Errorf("reading the answer of %s: %w", to, err)
	}
	return parseAnswer(line)
}

func TestKernelTranslates(t *testing.T) {
	topo, gwb := twoClusters(t)
	apply(t, topo.gwb, gwb, stateB())

	// TCP through the service's global IP reaches both endpoints (numgen picks one per
	// connection), and each sees cluster A's egress address as the client.
	seen := map[netip.Addr]bool{}
	for i := 0; i < 40 && len(seen) < 2; i++ {
		a, err := ask(t, topo.client, "tcp", netip.Addr{}, netip.AddrPortFrom(echoIP, 80))
		if err != nil {
			t.Fatalf("TCP to %s:80: %v", echoIP, err)
		}
		if a.server.Port() != 8080 || !egressA.Contains(a.peer.Addr()) {
			t.Fatalf("TCP to %s:80 answered by %s, which saw %s; want port 8080 and a source in %s", echoIP, a.server, a.peer, egressA)
		}
		seen[a.server.Addr()] = true
	}
	if !seen[server1] || !seen[server2] {
		t.Fatalf("40 connections to %s:80 reached only %v; want both endpoints", echoIP, seen)
	}

	tests := []struct {
		name       string
		network    string
		from       netip.Addr
		to         netip.AddrPort
		wantServer netip.AddrPort // or, when wantOther is valid, that one
		wantOther  netip.AddrPort
		wantPeer   ipam.Range
	}{
		{"udp service port", "udp", netip.Addr{}, netip.AddrPortFrom(echoIP, 53), netip.AddrPortFrom(server1, 5353), netip.AddrPort{}, egressA},
		// A UDP port sharing a load-balancing chain with a TCP port: with one endpoint map typed
		// by TCP's port, nft 1.0.6 gave this chain an implicit "meta l4proto tcp" (nat.go).
		{"udp service port with the tcp port's endpoint count", "udp", netip.Addr{}, netip.AddrPortFrom(echoIP, 80),
			netip.AddrPortFrom(server1, 5353), netip.AddrPortFrom(server2, 5353), egressA},
		{"headless pod, any port", "tcp", netip.Addr{}, netip.AddrPortFrom(podIP, 9000), netip.AddrPortFrom(server2, 9000), netip.AddrPort{}, egressA},
		{"pod with its own egress range", "tcp", clientSpecial, netip.AddrPortFrom(podIP, 9000), netip.AddrPortFrom(server2, 9000), netip.AddrPort{}, specialEgress},
		{"pod with its own egress range, udp", "udp", clientSpecial, netip.AddrPortFrom(echoIP, 53), netip.AddrPortFrom(server1, 5353), netip.AddrPort{}, specialEgress},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ask(t, topo.client, tt.network, tt.from, tt.to)
			if err != nil {
				t.Fatalf("%s to %s: %v", tt.network, tt.to, err)
			}
			if (a.server != tt.wantServer && (!tt.wantOther.IsValid() || a.server != tt.wantOther)) || !tt.wantPeer.Contains(a.peer.Addr()) {
				t.Fatalf("%s to %s answered by %s seeing %s; want %s seeing a source in %s", tt.network, tt.to, a.server, a.peer, tt.wantServer, tt.wantPeer)
			}
		})
	}

	// What no ingress address translates is refused by B's gateway, not routed on.
	for _, to := range []netip.AddrPort{
		netip.AddrPortFrom(echoIP, 81),                            // a port the service does not export
		netip.AddrPortFrom(netip.MustParseAddr("242.2.0.99"), 80), // an address nobody has
	} {
		_, err := dial(t, topo.client, "tcp", netip.Addr{}, to)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("TCP to %s: %v; want connection refused", to, err)
		}
	}
}

// TestKernelReapplyKeepsConnections: while B's gateway re-applies its NAT over and over (equal
// states, a new process's first, full Apply, another service added, the connection's own
// endpoint taken out of the service and put back), one TCP connection carries a continuous
// exchange and new connections are opened one after another. The kernel's TCP retransmission
// counters prove that no packet of either was lost: a moment without the translation (a
// flush-and-refill in two steps, a table deleted and re-created) drops the packets that
// arrive in it, which TCP then retransmits.
func TestKernelReapplyKeepsConnections(t *testing.T) {
	topo, gwb := twoClusters(t)
	apply(t, topo.gwb, gwb, stateB())
	service := netip.AddrPortFrom(echoIP, 80)

	c, err := dial(t, topo.client, "tcp", netip.Addr{}, service)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	first, err := parseAnswer(line)
	if err != nil {
		t.Fatal(err)
	}

	var exchanges, opened atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() { // the established connection
		defer wg.Done()
		buf := make([]byte, 64)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			msg := fmt.Appendf(nil, "exchange %06d\n", i)
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write(msg); err != nil {
				errs <- fmt.Errorf("exchange %d: writing: %w", i, err)
				return
			}
			if _, err := io.ReadFull(r, buf[:len(msg)]); err != nil {
				errs <- fmt.Errorf("exchange %d: reading the echo: %w", i, err)
				return
			}
			if string(buf[:len(msg)]) != string(msg) {
				errs <- fmt.Errorf("exchange %d: echo %q, want %q", i, buf[:len(msg)], msg)
				return
			}
			exchanges.Add(1)
		}
	}()
	go func() { // new connections, one after another
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			nc, err := dial(t, topo.client, "tcp", netip.Addr{}, service)
			if err != nil {
				errs <- fmt.Errorf("new connection %d: %w", opened.Load(), err)
				return
			}
			_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = bufio.NewReader(nc).ReadString('\n')
			n, rerr := retransmits(nc)
			nc.Close()
			if err = errors.Join(err, rerr); err != nil {
				errs <- fmt.Errorf("new connection %d: %w", opened.Load(), err)
				return
			}
			if n > 0 {
				errs <- fmt.Errorf("new connection %d: %d segments sent again that the peer had not received", opened.Load(), n)
				return
			}
			opened.Add(1)
		}
	}()

	withOther := stateB()
	withOther.Services = append(withOther.Services, Service{Name: "demo/other", GlobalIP: netip.MustParseAddr("242.2.0.30"),
		Ports: []Port{{Protocol: TCP, Port: 443, Endpoints: []netip.AddrPort{netip.AddrPortFrom(server1, 8443)}}}})
	withoutMine := stateB()
	var keep []netip.AddrPort
	for _, ep := range withoutMine.Services[0].Ports[0].Endpoints {
		if ep != first.server {
			keep = append(keep, ep)
		}
	}
	withoutMine.Services[0].Ports[0].Endpoints = keep
	steps := []struct {
		name  string
		nat   func() *NAT
		state State
	}{
		{"equal state", func() *NAT { return gwb }, stateB()},
		{"new process, full apply", func() *NAT { return newNAT(t, topo.gwb) }, stateB()},
		{"another service", func() *NAT { return gwb }, withOther},
		{"own endpoint removed", func() *NAT { return gwb }, withoutMine},
		{"new process, endpoint back", func() *NAT { return newNAT(t, topo.gwb) }, stateB()},
	}
	fail := func(format string, args ...any) {
		t.Helper()
		close(stop)
		wg.Wait()
		t.Fatalf(format, args...)
	}
	for round := range 4 {
		for _, s := range steps {
			apply(t, topo.gwb, s.nat(), s.state)
			time.Sleep(100 * time.Millisecond)
			select {
			case err := <-errs:
				fail("round %d, after %q: %v", round, s.name, err)
			default:
			}
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	n, err := retransmits(c)
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 || exchanges.Load() == 0 || opened.Load() == 0 {
		t.Fatalf("the connection to %s sent %d segments again that its peer had not received, in %d exchanges (%d new connections)", first.server, n, exchanges.Load(), opened.Load())
	}
	t.Logf("%d exchanges over one connection to %s and %d new connections during %d applies, no retransmission",
		exchanges.Load(), first.server, opened.Load(), 4*len(steps))
}

// retransmits is the kernel's count of the segments c sent again (SYNs included) less those
// the peer reported, by a DSACK, as received twice: a retransmission whose original had
// arrived was no loss but a late acknowledgement, which a machine at load 49 (CI runs the labs
// beside this test, its softirqs deferred to ksoftirqd) can delay past the 200 ms RTO.
func retransmits(c net.Conn) (uint32, error) {
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var info *unix.TCPInfo
	var serr error
	if err := raw.Control(func(fd uintptr) { info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("reading TCP_INFO: %w", serr)
	}
	return info.Total_retrans - min(info.Dsack_dups, info.Total_retrans), nil
}

// TestKernelUnexportLeavesNothing reads the kernel's own ruleset after a service and a pod are
// removed: no element, rule or chain may mention them, and their addresses are refused.
func TestKernelUnexportLeavesNothing(t *testing.T) {
	topo, gwb := twoClusters(t)
	apply(t, topo.gwb, gwb, stateB())
	if _, err := ask(t, topo.client, "tcp", netip.Addr{}, netip.AddrPortFrom(echoIP, 80)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(listTable(t, topo.gwb), echoIP.String()) {
		t.Fatal("the kernel's ruleset does not show the service before the unexport; the check below would prove nothing")
	}

	other := Service{Name: "demo/other", GlobalIP: netip.MustParseAddr("242.2.0.30"),
		Ports: []Port{{Protocol: TCP, Port: 443, Endpoints: []netip.AddrPort{netip.AddrPortFrom(server1, 8443)}}}}
	s := stateB()
	s.Services = []Service{other}
	s.Pods = nil
	// The second Apply deletes ingress-lb-2-v4, whose last user the first one removed.
	apply(t, topo.gwb, gwb, s)
	apply(t, topo.gwb, gwb, s)
	ruleset := listTable(t, topo.gwb)
	for _, gone := range []string{echoIP.String(), podIP.String(), server2.String(), "demo/echo", "ingress-lb-2-v4"} {
		if strings.Contains(ruleset, gone) {
			t.Errorf("the kernel's ruleset still mentions %s after the unexport:\n%s", gone, ruleset)
		}
	}
	if !strings.Contains(ruleset, "242.2.0.30") {
		t.Errorf("the remaining service 242.2.0.30 is gone from the kernel:\n%s", ruleset)
	}
	for _, to := range []netip.AddrPort{netip.AddrPortFrom(echoIP, 80), netip.AddrPortFrom(podIP, 9000)} {
		if _, err := dial(t, topo.client, "tcp", netip.Addr{}, to); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("TCP to %s after the unexport: %v; want connection refused", to, err)
		}
	}

	// Delete removes the table itself.
	if err := tunneltest.InErr(topo.gwb, func() error { return gwb.Delete(context.Background()) }); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "exec", topo.gwb, "nft", "list", "table", "inet", owner.GlobalnetNFTTable).CombinedOutput(); err == nil {
		t.Fatalf("table still there after Delete:\n%s", out)
	}
}

// listTable returns `nft -j list table` of our table in ns, checked to be JSON, as one string:
// every name, address and comment the kernel holds for it.
func listTable(t testing.TB, ns string) string {
	t.Helper()
	out := tunneltest.Run(t, "ip", "netns", "exec", ns, "nft", "-j", "list", "table", "inet", owner.GlobalnetNFTTable)
	var v struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Nftables) == 0 {
		t.Fatalf("nft -j list table: %v\n%s", err, out)
	}
	return out
}

// TestKernelUpgradeRemovesStaleObjects starts from a table an older gateway could have left:
// its base chain's rule uses a map this version no longer has, a chain of its own uses a set,
// and a verdict map points to another chain of its own. One Apply by a new process must leave
// exactly the new ruleset (read back from the kernel) and translate.
func TestKernelUpgradeRemovesStaleObjects(t *testing.T) {
	topo, gwb := twoClusters(t)
	old := `table inet ` + owner.GlobalnetNFTTable + ` {
	map ingress-endpoints-v4 {
		type ipv4_addr . inet_service : ipv4_addr . inet_service
	}
	set egress-namespaces-v4 {
		type ipv4_addr
		flags interval
		elements = { 10.244.1.0/24 }
	}
	chain legacy-egress {
		ip saddr @egress-namespaces-v4 counter
	}
	chain legacy-target {
		counter
	}
	map legacy-vmap {
		type ipv4_addr : verdict
		elements = { 242.2.0.99 : goto legacy-target }
	}
	chain prerouting {
		type nat hook prerouting priority dstnat - 10; policy accept;
		dnat ip to ip daddr . tcp dport map @ingress-endpoints-v4
		ip daddr vmap @legacy-vmap
		jump legacy-egress
	}
}
`
	cmd := exec.Command("ip", "netns", "exec", topo.gwb, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(old)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("creating the old-shaped table: %v: %s", err, out)
	}
	apply(t, topo.gwb, gwb, stateB())
	ruleset := listTable(t, topo.gwb)
	for _, stale := range []string{`"ingress-endpoints-v4"`, "egress-namespaces-v4", "legacy-egress", "legacy-target", "legacy-vmap"} {
		if strings.Contains(ruleset, stale) {
			t.Errorf("the kernel's ruleset still holds %s after the upgrade's Apply:\n%s", stale, ruleset)
		}
	}
	if _, err := ask(t, topo.client, "tcp", netip.Addr{}, netip.AddrPortFrom(echoIP, 80)); err != nil {
		t.Errorf("the service's global IP after the upgrade: %v", err)
	}
	// A second process's Apply of the same state finds nothing to remove: the ruleset reads
	// the same (without handles: rules are rewritten).
	text := func() string {
		return tunneltest.Run(t, "ip", "netns", "exec", topo.gwb, "nft", "list", "table", "inet", owner.GlobalnetNFTTable)
	}
	before := text()
	apply(t, topo.gwb, newNAT(t, topo.gwb), stateB())
	if again := text(); again != before {
		t.Errorf("a second Apply changed the ruleset:\n%s\nthen:\n%s", before, again)
	}
}

// TestKernelEgressOnlyThroughTunnel: egress is translated only for packets that leave through
// the tunnel device. A's table naming another device (as a table left on a node that is no
// longer the active gateway does: its traffic leaves by the LAN) translates nothing, so the
// client's untranslated packets are refused by B; naming the link to B again, it works.
func TestKernelEgressOnlyThroughTunnel(t *testing.T) {
	topo := newTopology(t)
	serve(t, topo.server)
	apply(t, topo.gwb, newNAT(t, topo.gwb), stateB())
	gwa := newNAT(t, topo.gwa)
	elsewhere := stateA()
	elsewhere.TunnelDevice = "octopus9"
	apply(t, topo.gwa, gwa, elsewhere)
	if a, err := ask(t, topo.client, "tcp", netip.Addr{}, netip.AddrPortFrom(echoIP, 80)); err == nil {
		t.Fatalf("answered %+v with A's egress bound to another device; want no translation, so no answer", a)
	}
	apply(t, topo.gwa, gwa, stateA())
	if a, err := ask(t, topo.client, "tcp", netip.Addr{}, netip.AddrPortFrom(echoIP, 80)); err != nil || !egressA.Contains(a.peer.Addr()) {
		t.Fatalf("through the tunnel device: %+v, %v; want an answer to an address of %s", a, err, egressA)
	}
}

// The IPv6 side of the real-kernel topology: the same two clusters, dual-stack, whose IPv6 pod
// CIDRs are the same too (documentation prefix 2001:db8::/32, like every IPv6 address of the lab).
var (
	globalA6 = netip.MustParsePrefix("2001:db8:242:1::/64")
	globalB6 = netip.MustParsePrefix("2001:db8:242:2::/64")
	egressA6 = rng("2001:db8:242:1::", "2001:db8:242:1::7")

	client6  = netip.MustParseAddr("2001:db8:244:1::10")
	server16 = netip.MustParseAddr("2001:db8:244:1::20")
	server26 = netip.MustParseAddr("2001:db8:244:1::21")
	echoIP6  = netip.MustParseAddr("2001:db8:242:2::16") // demo/echo: tcp 80 → both servers :8080
	podIP6   = netip.MustParseAddr("2001:db8:242:2::17") // demo/echo-1 → server26
)

// addIPv6 gives the topology its IPv6 half: pod CIDR 2001:db8:244:1::/64 in both clusters, the
// gateways' link, routes to each other's global prefix and a default route, like the IPv4 half.
func addIPv6(t testing.TB, topo *topology) {
	t.Helper()
	for _, c := range []struct{ pod, gw string }{{topo.client, topo.gwa}, {topo.server, topo.gwb}} {
		tunneltest.Run(t, "ip", "netns", "exec", c.gw, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
		tunneltest.Run(t, "ip", "-n", c.gw, "addr", "add", "2001:db8:244:1::1/64", "dev", "pods", "nodad")
		tunneltest.Run(t, "ip", "-n", c.pod, "-6", "route", "add", "default", "via", "2001:db8:244:1::1", "dev", "eth0", "onlink")
	}
	tunneltest.Run(t, "ip", "-n", topo.client, "addr", "add", client6.String()+"/64", "dev", "eth0", "nodad")
	for _, a := range []netip.Addr{server16, server26} {
		tunneltest.Run(t, "ip", "-n", topo.server, "addr", "add", a.String()+"/64", "dev", "eth0", "nodad")
	}
	for _, g := range []struct{ ns, addr, peer, remote string }{
		{topo.gwa, "2001:db8:ffff::1/126", "2001:db8:ffff::2", globalB6.String()},
		{topo.gwb, "2001:db8:ffff::2/126", "2001:db8:ffff::1", globalA6.String()},
	} {
		tunneltest.Run(t, "ip", "-n", g.ns, "addr", "add", g.addr, "dev", "wan", "nodad")
		tunneltest.Run(t, "ip", "-n", g.ns, "-6", "route", "add", g.remote, "via", g.peer)
		tunneltest.Run(t, "ip", "-n", g.ns, "-6", "route", "add", "default", "dev", "uplink")
	}
}

// serve6 starts serveOn's listeners on server16:8080, server26:8080, server26:9000 (TCP) and
// server16:5353 (UDP).
func serve6(t testing.TB, ns string) {
	t.Helper()
	serveOn(t, ns,
		[]netip.AddrPort{netip.AddrPortFrom(server16, 8080), netip.AddrPortFrom(server26, 8080), netip.AddrPortFrom(server26, 9000)},
		[]netip.AddrPort{netip.AddrPortFrom(server16, 5353)})
}

// TestKernelTranslatesDualStack: two dual-stack clusters whose pod CIDRs are the same in both
// families, each gateway with one table holding both families' translations. Over IPv6 a
// service's global address reaches both endpoints over TCP and one over UDP, a headless pod's
// global address reaches the pod on any port, each server sees cluster A's IPv6 egress
// address, and what nothing translates is refused; over IPv4 the same table keeps working.
func TestKernelTranslatesDualStack(t *testing.T) {
	topo := newTopology(t)
	addIPv6(t, topo)
	serve(t, topo.server)
	serve6(t, topo.server)
	a := stateA()
	a.GlobalCIDRs = append(a.GlobalCIDRs, globalA6)
	a.RemoteCIDRs = append(a.RemoteCIDRs, globalB6)
	a.ClusterEgress = append(a.ClusterEgress, egressA6)
	apply(t, topo.gwa, newNAT(t, topo.gwa), a)
	b := stateB()
	b.GlobalCIDRs = append(b.GlobalCIDRs, globalB6)
	b.RemoteCIDRs = append(b.RemoteCIDRs, globalA6)
	b.Services = append(b.Services, Service{Name: "demo/echo", GlobalIP: echoIP6, Ports: []Port{
		{Protocol: TCP, Port: 80, Endpoints: []netip.AddrPort{netip.AddrPortFrom(server16, 8080), netip.AddrPortFrom(server26, 8080)}},
		{Protocol: UDP, Port: 53, Endpoints: []netip.AddrPort{netip.AddrPortFrom(server16, 5353)}},
	}})
	b.Pods = append(b.Pods, PodIngress{Name: "demo/echo-1", GlobalIP: podIP6, Pod: server26})
	apply(t, topo.gwb, newNAT(t, topo.gwb), b)

	seen := map[netip.Addr]bool{}
	for i := 0; i < 40 && len(seen) < 2; i++ {
		got, err := ask(t, topo.client, "tcp", netip.Addr{}, netip.AddrPortFrom(echoIP6, 80))
		if err != nil {
			t.Fatalf("TCP to [%s]:80: %v", echoIP6, err)
		}
		if got.server.Port() != 8080 || !egressA6.Contains(got.peer.Addr()) {
			t.Fatalf("TCP to [%s]:80 answered by %s, which saw %s; want port 8080 and a source in %s", echoIP6, got.server, got.peer, egressA6)
		}
		seen[got.server.Addr()] = true
	}
	if !seen[server16] || !seen[server26] {
		t.Fatalf("40 connections to [%s]:80 reached only %v; want both endpoints", echoIP6, seen)
	}
	for _, tt := range []struct {
		network    string
		to, server netip.AddrPort
		egress     ipam.Range
	}{
		{"udp", netip.AddrPortFrom(echoIP6, 53), netip.AddrPortFrom(server16, 5353), egressA6},
		{"tcp", netip.AddrPortFrom(podIP6, 9000), netip.AddrPortFrom(server26, 9000), egressA6},
		{"tcp", netip.AddrPortFrom(podIP, 9000), netip.AddrPortFrom(server2, 9000), egressA}, // IPv4, same table
	} {
		got, err := ask(t, topo.client, tt.network, netip.Addr{}, tt.to)
		if err != nil {
			t.Fatalf("%s to %s: %v", tt.network, tt.to, err)
		}
		if got.server != tt.server || !tt.egress.Contains(got.peer.Addr()) {
			t.Errorf("%s to %s answered by %s seeing %s; want %s seeing a source in %s", tt.network, tt.to, got.server, got.peer, tt.server, tt.egress)
		}
	}
	for _, to := range []netip.AddrPort{
		netip.AddrPortFrom(echoIP6, 81), // a port the service does not export
		netip.AddrPortFrom(netip.MustParseAddr("2001:db8:242:2::99"), 80),
	} {
		if _, err := dial(t, topo.client, "tcp", netip.Addr{}, to); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("TCP to %s: %v; want connection refused", to, err)
		}
	}
	// Without its IPv6 global CIDR, the cluster's table drops the IPv6 family whole.
	apply(t, topo.gwb, newNAT(t, topo.gwb), b.only(ipv4))
	if _, err := ask(t, topo.client, "tcp", netip.Addr{}, netip.AddrPortFrom(echoIP6, 80)); err == nil {
		t.Error("TCP to the IPv6 service still answered after its family was removed")
	}
	if _, err := ask(t, topo.client, "tcp", netip.Addr{}, netip.AddrPortFrom(podIP, 9000)); err != nil {
		t.Errorf("IPv4 after the IPv6 family was removed: %v", err)
	}
}
