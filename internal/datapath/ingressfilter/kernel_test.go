package ingressfilter

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
)

// Addresses of the kernel test's three namespaces: "remote" (a remote cluster's gateway,
// hostile), "gw" (the victim gateway node) and "pod" (a pod behind it).
//
//	remote rtun 10.99.0.2 ──── gtun 10.99.0.1 gw (the tunnel device; health check 10.1.0.1)
//	remote rul 192.168.50.2,.3 ── gul 192.168.50.1 gw (the underlay: vxlan arrives here)
//	gw gpod 10.1.1.1 (the node's address in the pod CIDR) ──── pod eth0 10.1.1.2
//	gw lo 172.31.0.1 (another node address, e.g. its InternalIP)
var (
	healthIP    = netip.MustParseAddr("10.1.0.1")
	nodeInPods  = netip.MustParseAddr("10.1.1.1")
	podIP       = netip.MustParseAddr("10.1.1.2")
	nodeIP      = netip.MustParseAddr("172.31.0.1")
	underlayGW  = netip.MustParseAddr("192.168.50.1")
	remoteGW    = netip.MustParseAddr("192.168.50.2")
	remoteRogue = netip.MustParseAddr("192.168.50.3")
)

const (
	kubeletPort = 10250
	vxlanPort   = 4789
)

func newTopology(t *testing.T) (remote, gw, pod string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces (run the tests as root; CI does)")
	}
	id := os.Getpid() % 100000
	remote, gw, pod = fmt.Sprintf("igr%d", id), fmt.Sprintf("igg%d", id), fmt.Sprintf("igp%d", id)
	for _, ns := range []string{remote, gw, pod} {
		tunneltest.Run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("deleting namespace %s: %v: %s", ns, err, out)
			}
		})
		tunneltest.Run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	r := func(ns string, args ...string) { tunneltest.Run(t, append([]string{"ip", "-n", ns}, args...)...) }
	r(remote, "link", "add", "rtun", "type", "veth", "peer", "name", "gtun", "netns", gw)
	r(remote, "link", "add", "rul", "type", "veth", "peer", "name", "gul", "netns", gw)
	r(gw, "link", "add", "gpod", "type", "veth", "peer", "name", "eth0", "netns", pod)
	r(remote, "addr", "add", "10.99.0.2/30", "dev", "rtun")
	r(remote, "addr", "add", "192.168.50.2/24", "dev", "rul")
	r(remote, "addr", "add", "192.168.50.3/24", "dev", "rul")
	r(gw, "addr", "add", "10.99.0.1/30", "dev", "gtun")
	r(gw, "addr", "add", healthIP.String()+"/32", "dev", "gtun")
	r(gw, "addr", "add", "192.168.50.1/24", "dev", "gul")
	r(gw, "addr", "add", "10.1.1.1/24", "dev", "gpod")
	r(gw, "addr", "add", nodeIP.String()+"/32", "dev", "lo")
	r(pod, "addr", "add", "10.1.1.2/24", "dev", "eth0")
	for ns, links := range map[string][]string{remote: {"rtun", "rul"}, gw: {"gtun", "gul", "gpod"}, pod: {"eth0"}} {
		for _, l := range links {
			r(ns, "link", "set", l, "up")
		}
	}
	// The remote gateway sends everything of the victim's (and the victim's node addresses,
	// which a hostile gateway can route into its own tunnel) through the tunnel.
	for _, dst := range []string{"10.1.0.0/16", nodeIP.String() + "/32"} {
		r(remote, "route", "add", dst, "via", "10.99.0.1", "dev", "rtun")
	}
	r(gw, "route", "add", "10.99.0.0/16", "via", "10.99.0.2", "dev", "gtun")
	r(pod, "route", "add", "default", "via", "10.1.1.1")
	tunneltest.Run(t, "ip", "netns", "exec", gw, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
	return remote, gw, pod
}

// listen accepts TCP connections on port in ns (every address) until the test ends.
func listen(t *testing.T, ns string, port int) {
	t.Helper()
	var l net.Listener
	tunneltest.In(t, ns, func() {
		var err error
		if l, err = net.Listen("tcp4", fmt.Sprintf(":%d", port)); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
}

// connects tells whether a TCP connection from ns to dst succeeds within a second.
func connects(t *testing.T, ns string, dst netip.AddrPort) bool {
	t.Helper()
	var err error
	tunneltest.In(t, ns, func() {
		var c net.Conn
		if c, err = net.DialTimeout("tcp4", dst.String(), time.Second); err == nil {
			_ = c.Close()
		}
	})
	return err == nil
}

// soon tells whether ok holds within 10 s, trying again every 100 ms: for what must get
// through, whose first try a loaded machine (CI runs the labs beside this test) can time out
// while the first packets wait for neighbour resolution. What must be dropped is tried once.
func soon(ok func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// udpDelivered tells whether a datagram from src in ns reaches a socket on dst in gwNS.
func udpDelivered(t *testing.T, ns, gwNS string, src netip.Addr, dst netip.AddrPort) bool {
	t.Helper()
	var l *net.UDPConn
	tunneltest.In(t, gwNS, func() {
		var err error
		if l, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(dst)); err != nil {
			t.Fatal(err)
		}
	})
	defer l.Close()
	tunneltest.In(t, ns, func() {
		c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), net.UDPAddrFromAddrPort(dst))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("forged vxlan")); err != nil {
			t.Fatal(err)
		}
	})
	_ = l.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, _, err := l.ReadFromUDP(make([]byte, 64))
	return err == nil
}

// TestKernelFilter installs the table in a real kernel and sends what a hostile remote gateway
// would: connections to the gateway node's own addresses (kubelet's port), to a pod that is not
// advertised (the globalnet case, where only the global CIDR is), and vxlan datagrams from an
// address that is no gateway. Each case is checked without the table first, so the test shows
// that the table, not the topology, stops it.
func TestKernelFilter(t *testing.T) {
	remote, gw, pod := newTopology(t)
	ctx := context.Background()
	listen(t, gw, kubeletPort)
	listen(t, pod, 8080)
	listen(t, remote, 9090)
	kubelet := []netip.AddrPort{
		netip.AddrPortFrom(healthIP, kubeletPort), netip.AddrPortFrom(nodeInPods, kubeletPort), netip.AddrPortFrom(nodeIP, kubeletPort),
	}
	podSvc := netip.AddrPortFrom(podIP, 8080)
	vx := netip.AddrPortFrom(underlayGW, vxlanPort)

	// Unfiltered, everything gets through: the attack works on a gateway without the table.
	for _, dst := range kubelet {
		if !soon(func() bool { return connects(t, remote, dst) }) {
			t.Fatalf("without the filter, %s is unreachable from the remote gateway: the topology is broken", dst)
		}
	}
	if !soon(func() bool { return connects(t, remote, podSvc) }) || !soon(func() bool { return udpDelivered(t, remote, gw, remoteRogue, vx) }) {
		t.Fatal("without the filter, the pod or the vxlan port is unreachable: the topology is broken")
	}

	var f *Filter
	apply := func(s State) {
		t.Helper()
		if err := tunneltest.InErr(gw, func() (err error) {
			if f == nil {
				if f, err = New(); err != nil {
					return err
				}
			}
			return f.Apply(ctx, s)
		}); err != nil {
			t.Fatal(err)
		}
	}
	direct := State{
		Tunnels: []string{"gtun"}, Destinations: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")},
		HealthCheck: []netip.Addr{healthIP}, VXLANPort: vxlanPort, VXLANSources: []netip.Addr{remoteGW},
	}
	apply(direct)
	t.Run("node addresses are refused, also inside the advertised prefixes", func(t *testing.T) {
		for _, dst := range kubelet {
			if connects(t, remote, dst) {
				t.Errorf("the remote gateway reached the node at %s", dst)
			}
		}
	})
	t.Run("the health-check address answers echo", func(t *testing.T) {
		if err := tunneltest.Ping(remote, healthIP, 2*time.Second); err != nil {
			t.Error(err)
		}
	})
	t.Run("advertised pods are reachable", func(t *testing.T) {
		if !soon(func() bool { return connects(t, remote, podSvc) }) {
			t.Errorf("%s in the advertised pod CIDR is unreachable", podSvc)
		}
	})
	t.Run("replies to what this cluster opened pass", func(t *testing.T) {
		if !soon(func() bool { return connects(t, pod, netip.MustParseAddrPort("10.99.0.2:9090")) }) {
			t.Error("a pod's connection to the remote cluster got no reply through the filter")
		}
	})
	t.Run("vxlan only from the remote gateways", func(t *testing.T) {
		if !soon(func() bool { return udpDelivered(t, remote, gw, remoteGW, vx) }) {
			t.Error("a datagram from the remote gateway's endpoint was dropped")
		}
		if udpDelivered(t, remote, gw, remoteRogue, vx) {
			t.Error("a forged datagram from a non-gateway address was delivered")
		}
		if n := counted(t, gw, "vxlan from a non-gateway"); n != 1 {
			t.Errorf("the vxlan drop counted %d packets, want 1", n)
		}
	})

	// Under globalnet only the global CIDR is advertised: the private pod address is refused.
	globalnet := direct
	globalnet.Destinations = []netip.Prefix{netip.MustParsePrefix("242.1.0.0/16")}
	apply(globalnet)
	t.Run("globalnet: private pod addresses are refused", func(t *testing.T) {
		if connects(t, remote, podSvc) {
			t.Errorf("the remote gateway reached the private pod address %s", podSvc)
		}
		if n := counted(t, gw, "not advertised"); n < 1 {
			t.Errorf("the not-advertised drop counted %d packets", n)
		}
	})

	if err := tunneltest.InErr(gw, func() error { return f.Delete(ctx) }); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "exec", gw, "nft", "list", "table", "inet", owner.IngressFilterNFTTable).CombinedOutput(); err == nil {
		t.Fatalf("table still there after Delete:\n%s", out)
	}
}

// counted is the packet count of the rule with comment in the table in ns (the first such).
func counted(t *testing.T, ns, comment string) int {
	t.Helper()
	listed := tunneltest.Run(t, "ip", "netns", "exec", ns, "nft", "list", "table", "inet", owner.IngressFilterNFTTable)
	for _, line := range strings.Split(listed, "\n") {
		if !strings.Contains(line, `comment "`+comment+`"`) {
			continue
		}
		i := strings.Index(line, "counter packets ")
		var n int
		if i < 0 {
			t.Fatalf("no counter in %q", line)
		}
		if _, err := fmt.Sscanf(line[i:], "counter packets %d", &n); err != nil {
			t.Fatalf("reading the counter of %q: %v", line, err)
		}
		return n
	}
	t.Fatalf("no rule with comment %q in:\n%s", comment, listed)
	return 0
}

// TestApplyWithoutProtocolsFile writes the table with an nft that cannot read /etc/protocols,
// as in the gateway's image, which has none: a rule naming a protocol nft must look up there
// (ipv6-icmp) failed the whole transaction, and the fail-closed gateway exited at every start.
func TestApplyWithoutProtocolsFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network and a mount namespace")
	}
	nftPath, err := exec.LookPath("nft")
	if err != nil {
		t.Fatal(err)
	}
	// An nft that runs the real one in a mount namespace where /etc/protocols is empty.
	dir := t.TempDir()
	wrapper := "#!/bin/sh\nexec unshare --mount sh -c 'mount --bind /dev/null /etc/protocols && exec " + nftPath + " \"$@\"' nft \"$@\"\n"
	if err := os.WriteFile(dir+"/nft", []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	ns := fmt.Sprintf("igproto%d", os.Getpid()%100000)
	tunneltest.Run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	s := State{
		Tunnels: []string{"octopus0"}, Destinations: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd01::/48")},
		HealthCheck: []netip.Addr{healthIP, netip.MustParseAddr("fd01::1")}, VXLANPort: vxlanPort, VXLANSources: []netip.Addr{remoteGW},
	}
	if err := tunneltest.InErr(ns, func() error {
		f, err := New()
		if err != nil {
			return err
		}
		return f.Apply(context.Background(), s)
	}); err != nil {
		t.Fatalf("without /etc/protocols: %v", err)
	}
}
