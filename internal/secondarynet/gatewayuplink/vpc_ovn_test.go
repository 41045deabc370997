package gatewayuplink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/netnsrun"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestVpcLoopKeepsVpcGatewaysOnRealOVN runs the VPC gateway loop on two gateway chassis, A and
// B, A reading the SB bindings ovn-northd makes of the rows ApplyVpc writes (as the member chart
// runs it) and B the NB rows themselves (real OVN daemons: a pod chassis and the two gateway
// chassis on a Geneve underlay). Red and blue, VPCs with identical subnets, have their gateway
// on A: A's loop makes a namespace for each, B's none. Red's pod reaches an address only red's
// gateway namespace holds (outside the VPC's subnets: the router's default route), blue's pod
// reaches blue's and not red's. The veth deleted and the address flushed are repaired and
// logged, and red's traffic flows again. Red's gateway moved to B: A's loop removes its copy, B's
// makes one, and red's traffic answers from B while blue's stays on A. Red's gateway removed,
// B's loop removes the namespace; blue deleted, A's removes blue's.
func TestVpcLoopKeepsVpcGatewaysOnRealOVN(t *testing.T) {
	central := ovntest.StartCentral(t)
	podNode := ovntest.StartChassis(t, central)
	gwA, gwB := ovntest.StartChassis(t, central), ovntest.StartChassis(t, central)
	ovntest.Underlay(t, 246, podNode, gwA, gwB)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	connect := func() *ovn.Client {
		c, err := ovn.Connect(ctx, ovn.Options{Endpoint: central.NB.Endpoint})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	master := connect() // as the ovnmaster writes the rows

	subnets := []ovn.Subnet{{Name: "a", CIDR: netip.MustParsePrefix("10.112.0.0/24")}, {Name: "b", CIDR: netip.MustParsePrefix("10.112.1.0/24")}}
	p1 := ovn.VpcPod{Pod: ovn.Pod{Namespace: "apps", Name: "p1", UID: "p1"}, Subnet: "a"}
	red := ovn.Vpc{ClusterID: "east", Name: "red", Subnets: subnets, Pods: []ovn.VpcPod{p1}, Gateway: &ovn.VpcGateway{Chassis: gwA.Name()}}
	blue := ovn.Vpc{ClusterID: "east", Name: "blue", Subnets: subnets, Pods: []ovn.VpcPod{p1}, Gateway: &ovn.VpcGateway{Chassis: gwA.Name()}}
	apply := func(v ovn.Vpc) ovn.VpcResult {
		t.Helper()
		res, err := master.ApplyVpc(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	key := ovn.PodKey{Namespace: "apps", Name: "p1"}
	redPod := attachPod(t, podNode, central, apply(red).Attached[key])
	bluePod := attachPod(t, podNode, central, apply(blue).Attached[key])

	type node struct {
		ch   *ovntest.Chassis
		dir  string
		loop *VpcLoop
		logs *logLines
	}
	start := func(ch *ovntest.Chassis, southbound bool) *node {
		n := &node{ch: ch, dir: t.TempDir(), logs: &logLines{}}
		endpoint := central.NB.Endpoint
		if southbound {
			endpoint = central.SB.Endpoint
		}
		l, err := NewVpcLoop(VpcOptions{ClusterID: "east", Chassis: ch.Name(), Node: ch.Node(), NetnsDir: n.dir, MTU: 1400,
			Source:   &DBSource{Endpoint: endpoint, Southbound: southbound},
			Interval: 200 * time.Millisecond, Log: n.logs.logger()})
		if err != nil {
			t.Fatal(err)
		}
		n.loop = l
		loopCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- l.Run(loopCtx) }()
		// Registered after TempDir's removal, so run before it: the mounts go first.
		t.Cleanup(func() {
			defer l.o.Source.(*DBSource).Close()
			stop()
			if err := <-done; err != nil {
				t.Errorf("Run on %s = %v", ch.Name(), err)
			}
			for _, vpc := range []string{"red", "blue"} {
				_ = podport.DetachVpcGateway(context.Background(), ch.Node(), n.dir, vpc)
			}
		})
		return n
	}
	a, b := start(gwA, true), start(gwB, false)
	netnsOf := func(n *node, vpc string) string { return podport.VpcGateway{NetnsDir: n.dir, Vpc: vpc}.NetnsPath() }
	present := func(n *node, vpc string) bool {
		_, err := os.Stat(netnsOf(n, vpc))
		return err == nil
	}
	// attached waits until n's loop is ready with vpc's gateway there, then puts beyond on the
	// gateway namespace's loopback, answering TCP on 7003 with name.
	attached := func(n *node, vpc string, beyond netip.Addr, name string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, vpc+"'s gateway on "+n.ch.Name(), func() error {
			if err := n.loop.Ready(); err != nil {
				return err
			}
			if !present(n, vpc) {
				return errors.New("no namespace")
			}
			return nil
		})
		ns := netnsOf(n, vpc)
		if out, err := exec.Command("nsenter", "--net="+ns, "ip", "addr", "add", netip.PrefixFrom(beyond, 32).String(), "dev", "lo").CombinedOutput(); err != nil {
			t.Fatalf("adding %s in %s: %v: %s", beyond, ns, err, out)
		}
		serveIn(t, ns, beyond, name)
	}
	gone := func(n *node, vpc string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, vpc+"'s gateway gone from "+n.ch.Name(), func() error {
			if present(n, vpc) {
				return errors.New("its namespace is still there")
			}
			if exists(t, n.ch.Node().Netns, podport.VpcGatewayNodeLink(vpc)) {
				return errors.New("its veth is still there")
			}
			if got, err := podport.VpcGatewaysOnNode(ctx, n.ch.Node(), n.dir); err != nil || strings.Contains(strings.Join(got, " "), vpc) {
				return fmt.Errorf("on the node: %v, %w", got, err)
			}
			return nil
		})
	}
	redBeyond, blueBeyond := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.20")
	attached(a, "red", redBeyond, "red on A")
	attached(a, "blue", blueBeyond, "blue on A")
	reaches := func(from string, to netip.Addr, want string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, want, func() error {
			got, err := dial(from, to)
			if err != nil || got != want {
				return fmt.Errorf("%s -> %s: %q, %w", from, to, got, err)
			}
			return nil
		})
	}
	reaches(redPod, redBeyond, "red on A")
	reaches(bluePod, blueBeyond, "blue on A")
	if got, err := dial(bluePod, redBeyond); err == nil {
		t.Errorf("blue's pod reaches %s, behind red's gateway: %q", redBeyond, got)
	}
	if got, err := podport.VpcGatewaysOnNode(ctx, gwB.Node(), b.dir); err != nil || len(got) != 0 {
		t.Errorf("B, where no gateway is requested, has %v, %v", got, err)
	}
	if n := a.logs.count("Attached the VPC gateway"); n != 2 {
		t.Errorf("A logged %d attaches, want 2: %q", n, a.logs.all())
	}

	for _, tc := range []struct {
		name    string
		disturb []string
	}{
		{"the veth deleted", []string{"nsenter", "--net=" + gwA.Node().Netns, "ip", "link", "del", podport.VpcGatewayNodeLink("red")}},
		{"the address flushed", []string{"nsenter", "--net=" + netnsOf(a, "red"), "ip", "addr", "flush", "dev", podport.VpcGatewayInterface}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.logs.count("Repaired the VPC gateway")
			if out, err := exec.Command(tc.disturb[0], tc.disturb[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %v: %s", tc.disturb, err, out)
			}
			testenv.Eventually(t, 20*time.Second, "the repair logged", func() error {
				if a.logs.count("Repaired the VPC gateway") == before {
					return errors.New("no line")
				}
				return nil
			})
			reaches(redPod, redBeyond, "red on A")
		})
	}

	// Red's gateway moves to B: A lets it go, B makes it, red's traffic follows; blue's stays.
	red.Gateway = &ovn.VpcGateway{Chassis: gwB.Name()}
	apply(red)
	gone(a, "red")
	attached(b, "red", redBeyond, "red on B")
	reaches(redPod, redBeyond, "red on B")
	reaches(bluePod, blueBeyond, "blue on A")
	if !present(a, "blue") {
		t.Error("moving red's gateway removed blue's from A")
	}

	// No gateway for red, and blue deleted: each loop removes what it kept.
	red.Gateway = nil
	apply(red)
	gone(b, "red")
	if err := master.DeleteVpc(ctx, "east", "blue"); err != nil {
		t.Fatal(err)
	}
	gone(a, "blue")
	if got, err := dial(redPod, redBeyond); err == nil {
		t.Errorf("red's pod without a gateway reaches %s: %q", redBeyond, got)
	}
	// A check may fail on the way and be retried (a disturbance landing mid-check, a starved
	// ovsdb-server): the loop is built for that, and the waits above prove each recovery. What
	// must hold is that both loops end ready.
	for _, n := range []*node{a, b} {
		testenv.Eventually(t, 20*time.Second, n.ch.Name()+"'s loop ready at the end", func() error { return n.loop.Ready() })
	}
	if a.logs.count("Failed") != 0 || b.logs.count("Failed") != 0 {
		t.Logf("the loops logged failures and recovered:\nA %q\nB %q", a.logs.all(), b.logs.all())
	}
}

// attachPod joins a pod namespace on ch to its VPC port, routing the VPC's other subnet and
// everything outside it (192.0.2.0/24) through its router, and returns the namespace's path.
func attachPod(t *testing.T, ch *ovntest.Chassis, central *ovntest.Central, a ovn.Attachment) string {
	t.Helper()
	pod := ch.NewPod()
	att := podport.Attachment{
		Sandbox: ovntest.SandboxID(), PodNetns: ovntest.NetnsPath(pod), Node: ch.Node(),
		Port: a.Port, Interface: "net1", MAC: a.MAC, IP: a.IP, MTU: 1400,
		Routes: []podport.Route{{Dst: netip.MustParsePrefix("192.0.2.0/24"), Via: a.Gateway}},
	}
	if err := podport.Attach(context.Background(), att); err != nil {
		t.Fatal(err)
	}
	ch.WaitPortUp(central.NB, a.Port)
	return ovntest.NetnsPath(pod)
}

// serveIn answers every TCP connection to ip:7003 in the namespace at path with name.
func serveIn(t *testing.T, path string, ip netip.Addr, name string) {
	t.Helper()
	serve(t, path, ip, func(net.Conn) string { return name })
}

// serve answers every TCP connection to ip:7003 in the namespace at path with answer(conn).
func serve(t *testing.T, path string, ip netip.Addr, answer func(net.Conn) string) {
	t.Helper()
	var ln net.Listener
	if err := netnsrun.In(path, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(ip, 7003).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(answer(c)))
			_ = c.Close()
		}
	}()
}

// dial connects from the namespace at path to ip:7003 and returns what the server wrote.
func dial(path string, ip netip.Addr) (string, error) {
	var got []byte
	err := netnsrun.In(path, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(ip, 7003).String(), 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		got = buf[:n]
		return err
	})
	return string(got), err
}

// exists says whether the namespace at path has a link of that name.
func exists(t *testing.T, path, name string) bool {
	t.Helper()
	err := exec.Command("nsenter", "--net="+path, "ip", "link", "show", name).Run()
	return err == nil
}

// serveSourceIn answers every TCP connection to ip:7003 in the namespace at path with the
// source address it came from.
func serveSourceIn(t *testing.T, path string, ip netip.Addr) {
	t.Helper()
	serve(t, path, ip, func(c net.Conn) string { return c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap().String() })
}

// TestVpcGatewayEgressOnRealOVN runs the loop on a gateway chassis for a VPC whose gateway has
// an external address (real OVN daemons, a pod chassis and the gateway chassis on an
// underlay): the VPC's pod reaches a listener beyond the gateway node, through the gateway
// namespace's outside veth and the node's forwarding, and the listener sees the external
// address (the SNAT in the gateway's namespace), not the pod's; a listener on the node itself
// it does not reach (the node's podfence table); the address removed from the NB row takes the
// outside veth and the SNAT table, and the pod reaches beyond the node no more.
func TestVpcGatewayEgressOnRealOVN(t *testing.T) {
	central := ovntest.StartCentral(t)
	podNode, gw := ovntest.StartChassis(t, central), ovntest.StartChassis(t, central)
	ovntest.Underlay(t, 247, podNode, gw)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	master, err := ovn.Connect(ctx, ovn.Options{Endpoint: central.NB.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(master.Close)
	external := netip.MustParseAddr("242.1.0.9")
	p1 := ovn.VpcPod{Pod: ovn.Pod{Namespace: "apps", Name: "p1", UID: "p1"}, Subnet: "a"}
	red := ovn.Vpc{ClusterID: "east", Name: "red", Subnets: []ovn.Subnet{{Name: "a", CIDR: netip.MustParsePrefix("10.112.0.0/24")}},
		Pods: []ovn.VpcPod{p1}, Gateway: &ovn.VpcGateway{Chassis: gw.Name(), ExternalIP: external}}
	res, err := master.ApplyVpc(ctx, red)
	if err != nil {
		t.Fatal(err)
	}
	att := res.Attached[ovn.PodKey{Namespace: "apps", Name: "p1"}]
	redPod := attachPod(t, podNode, central, att)

	dir := t.TempDir()
	var logs logLines
	l, err := NewVpcLoop(VpcOptions{ClusterID: "east", Chassis: gw.Name(), Node: gw.Node(), NetnsDir: dir, MTU: 1400,
		Source: &DBSource{Endpoint: central.NB.Endpoint}, Interval: 200 * time.Millisecond, Log: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	loopCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(loopCtx) }()
	t.Cleanup(func() {
		defer l.o.Source.(*DBSource).Close()
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
		_ = podport.DetachVpcGateway(context.Background(), gw.Node(), dir, "red")
	})

	// The listener beyond the gateway node, in a namespace the node routes to (the world
	// outside the VPC), and one on the node itself: the node forwards the VPC's traffic and
	// its podfence table keeps the VPC off the node's own services.
	outside, nodeAddr, listener := gw.NewPod(), netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.30")
	for _, args := range [][]string{
		{"-n", gw.Netns, "link", "add", "gwo", "type", "veth", "peer", "name", "eth0", "netns", outside},
		{"-n", gw.Netns, "addr", "add", nodeAddr.String() + "/24", "dev", "gwo"},
		{"-n", gw.Netns, "link", "set", "gwo", "up"},
		{"-n", outside, "addr", "add", listener.String() + "/24", "dev", "eth0"},
		{"-n", outside, "link", "set", "eth0", "up"},
		{"-n", outside, "route", "add", external.String() + "/32", "via", nodeAddr.String()},
		{"netns", "exec", gw.Netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	serveSourceIn(t, ovntest.NetnsPath(outside), listener)
	serveSourceIn(t, gw.Node().Netns, nodeAddr)
	testenv.Eventually(t, 30*time.Second, "red's pod reaching beyond the gateway node as "+external.String(), func() error {
		got, err := dial(redPod, listener)
		if err != nil || got != external.String() {
			return fmt.Errorf("the listener saw %q, want %s (the pod is %s): %w", got, external, att.IP.Addr(), err)
		}
		return nil
	})
	if got, err := dial(redPod, nodeAddr); err == nil {
		t.Errorf("red's pod reaches the gateway node's own service through the outside veth (it saw %q)", got)
	}
	gwNetns := podport.VpcGateway{NetnsDir: dir, Vpc: "red"}.NetnsPath()
	table := func() error {
		return exec.Command("nsenter", "--net="+gwNetns, "nft", "list", "table", "inet", owner.VpcGatewayNFTTable).Run()
	}
	if err := table(); err != nil {
		t.Errorf("no SNAT table in the gateway's namespace: %v", err)
	}

	// No external address any more: the outside veth and the SNAT go, the node is out of reach.
	red.Gateway.ExternalIP = netip.Addr{}
	if _, err := master.ApplyVpc(ctx, red); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the outside veth and the SNAT gone", func() error {
		if exists(t, gw.Node().Netns, podport.VpcGatewayOutsideNodeLink("red")) {
			return errors.New("the outside veth is still there")
		}
		if table() == nil {
			return errors.New("the SNAT table is still there")
		}
		return nil
	})
	if got, err := dial(redPod, listener); err == nil {
		t.Errorf("red's pod reaches the gateway node without an external address: %q", got)
	}
	if n := logs.count("Failed"); n != 0 {
		t.Errorf("the loop logged %d failures: %q", n, logs.all())
	}
}
