package podport_test

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
)

func TestLinkName(t *testing.T) {
	for _, tc := range []struct{ sandbox, want string }{
		{"0123456789abcdef0123456789abcdef", "oct0123456789ab"},
		{"short", "octshort"},
	} {
		if got := podport.LinkName(tc.sandbox); got != tc.want || len(got) > 15 {
			t.Errorf("LinkName(%q) = %q, want %q (at most 15 bytes)", tc.sandbox, got, tc.want)
		}
	}
}

func TestAttachRefusesIncompleteAttachments(t *testing.T) {
	valid := podport.Attachment{
		Sandbox: "abc", PodNetns: "/proc/1/ns/net", Node: podport.Node{Bridge: "br-int"}, Port: "east_default_a",
		Interface: "net1", MAC: net.HardwareAddr{0x0a, 0x58, 10, 112, 0, 2}, IP: netip.MustParsePrefix("10.112.0.2/16"),
	}
	for _, tc := range []struct {
		name   string
		change func(*podport.Attachment)
		want   string
	}{
		{"no sandbox", func(a *podport.Attachment) { a.Sandbox = "" }, "no sandbox ID"},
		{"no bridge", func(a *podport.Attachment) { a.Node.Bridge = "" }, "no integration bridge"},
		{"short MAC", func(a *podport.Attachment) { a.MAC = a.MAC[:4] }, "not an Ethernet address"},
		{"no address", func(a *podport.Attachment) { a.IP = netip.Prefix{} }, "no address"},
		{"route without next hop", func(a *podport.Attachment) {
			a.Routes = []podport.Route{{Dst: netip.MustParsePrefix("10.113.0.0/16")}}
		}, "incomplete"},
		{"negative MTU", func(a *podport.Attachment) { a.MTU = -1 }, "MTU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := valid
			tc.change(&a)
			err := podport.Attach(context.Background(), a)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Attach = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

var (
	remote = netip.MustParsePrefix("10.113.0.0/16")
	gw     = netip.MustParseAddr("10.112.0.1")
)

// pod is a pod namespace attached through podport as logical port port.
type pod struct {
	netns, sandbox, port string
	ip                   netip.Prefix
}

func attach(t *testing.T, ch *ovntest.Chassis, c *ovntest.Central, port, ip string) pod {
	t.Helper()
	p := pod{netns: ch.NewPod(), sandbox: ovntest.SandboxID(), port: port, ip: netip.MustParsePrefix(ip)}
	a := p.attachment(ch)
	if _, err := c.NB.Ctl(context.Background(), "lsp-add", "sw", port, "--",
		"lsp-set-addresses", port, a.MAC.String()+" "+p.ip.Addr().String()); err != nil {
		t.Fatal(err)
	}
	// Attached again after a failure, as the kubelet creates a failed sandbox again: on a
	// loaded machine (CI runs the labs beside this test, load 46 once) ovs-vsctl can outrun
	// its 1 s budget (podVsctlTimeout, kept under NRI's deadline). A failed attachment leaves
	// nothing (TestFailedAttachLeavesNothing), so each try starts clean.
	var err error
	for try := 1; try <= 3; try++ {
		if err = podport.Attach(context.Background(), a); err == nil {
			break
		}
		t.Logf("attaching %s, try %d: %v", port, try, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	ch.WaitPortUp(c.NB, port)
	return p
}

func (p pod) attachment(ch *ovntest.Chassis) podport.Attachment {
	a4 := p.ip.Addr().As4()
	return podport.Attachment{
		Sandbox: p.sandbox, PodNetns: ovntest.NetnsPath(p.netns), Node: ch.Node(), Port: p.port, Interface: "net1",
		MAC: net.HardwareAddr{0x0a, 0x58, a4[0], a4[1], a4[2], a4[3]}, IP: p.ip, MTU: 1400,
		Routes: []podport.Route{{Dst: remote, Via: gw}},
	}
}

// TestAttachedPodsTalkTCPAndDetachRemovesAll attaches two pods to a real chassis (ovs-vswitchd
// on the userspace datapath, ovn-controller): OVN binds their ports, they exchange data over
// TCP, the pod has its route to the other clusters' blocks; detaching a pod removes its OVS
// port and its veth, and OVN sees the port down.
func TestAttachedPodsTalkTCPAndDetachRemovesAll(t *testing.T) {
	central := ovntest.StartCentral(t)
	ch := ovntest.StartChassis(t, central)
	if _, err := central.NB.Ctl(context.Background(), "ls-add", "sw"); err != nil {
		t.Fatal(err)
	}
	a := attach(t, ch, central, "east_default_a", "10.112.0.2/16")
	b := attach(t, ch, central, "east_default_b", "10.112.0.3/16")

	tunneltest.In(t, a.netns, func() {
		link, err := netlink.LinkByName("net1")
		if err != nil {
			t.Fatal(err)
		}
		if link.Attrs().MTU != 1400 {
			t.Errorf("net1 MTU = %d, want 1400", link.Attrs().MTU)
		}
		routes, err := netlink.RouteList(link, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range routes {
			found = found || (r.Dst != nil && r.Dst.String() == remote.String() && r.Gw.String() == gw.String())
		}
		if !found {
			t.Errorf("no route to %s via %s on net1: %v", remote, gw, routes)
		}
	})

	ovntest.ExchangeTCP(t, a.netns, b.netns, b.ip.Addr())

	node := ch.Node()
	for range 2 { // the second time finds nothing to do
		if err := podport.Detach(context.Background(), node, a.sandbox); err != nil {
			t.Fatal(err)
		}
	}
	if ports := listPorts(t, node); strings.Contains(ports, podport.LinkName(a.sandbox)) {
		t.Errorf("OVS port %s left after Detach: %s", podport.LinkName(a.sandbox), ports)
	}
	if !strings.Contains(listPorts(t, node), podport.LinkName(b.sandbox)) {
		t.Errorf("Detach of a took b's port too")
	}
	if linkExists(t, node.Netns, podport.LinkName(a.sandbox)) || linkExists(t, ovntest.NetnsPath(a.netns), "net1") {
		t.Error("the veth is left after Detach")
	}
}

// TestNodeStackStaysOffTheSwitch: a pod asking the switch for an address that the node itself
// holds gets no answer from the node, whose stack sees the pod's frames on the veth's node end
// (ovs-vswitchd reads them with a packet socket, which takes nothing from the kernel). It used
// to answer with the node end's MAC, and a gateway node's pods then sent their traffic into the
// node's stack around the switch (the node holds the gateway's address).
func TestNodeStackStaysOffTheSwitch(t *testing.T) {
	central := ovntest.StartCentral(t)
	ch := ovntest.StartChassis(t, central)
	if _, err := central.NB.Ctl(context.Background(), "ls-add", "sw"); err != nil {
		t.Fatal(err)
	}
	a := attach(t, ch, central, "east_default_a", "10.112.0.2/16")
	nodeAddr := netip.MustParseAddr("10.112.0.99")
	for _, cmd := range [][]string{
		{"addr", "add", nodeAddr.String() + "/32", "dev", "lo"},
		{"link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", ch.Netns}, cmd...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", cmd, err, out)
		}
	}
	h := netlinkAt(t, ch.Node().Netns)
	checkOffNodeStack(t, h, podport.LinkName(a.sandbox))
	nodeEnd, err := h.LinkByName(podport.LinkName(a.sandbox))
	if err != nil {
		t.Fatal(err)
	}

	tunneltest.In(t, a.netns, func() {
		// The connection attempt makes the pod ask for the address; nothing on the switch has it.
		if c, err := net.DialTimeout("tcp", netip.AddrPortFrom(nodeAddr, 9).String(), 2*time.Second); err == nil {
			_ = c.Close()
			t.Errorf("the pod reached the node's %s over net1", nodeAddr)
		}
		link, err := netlink.LinkByName("net1")
		if err != nil {
			t.Fatal(err)
		}
		neighs, err := netlink.NeighList(link.Attrs().Index, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range neighs {
			if n.IP.Equal(net.IP(nodeAddr.AsSlice())) && len(n.HardwareAddr) > 0 {
				t.Errorf("the pod resolved the node's %s to %s (the node end's MAC is %s)", nodeAddr, n.HardwareAddr, nodeEnd.Attrs().HardwareAddr)
			}
		}
	})
}

// TestPodsOnTwoChassisTalkOverGeneve attaches a pod to each of two chassis joined by an
// underlay: OVN tunnels the switch between them (Geneve on the userspace datapath), and the
// pods exchange data over TCP.
func TestPodsOnTwoChassisTalkOverGeneve(t *testing.T) {
	central := ovntest.StartCentral(t)
	ch1, ch2 := ovntest.StartChassis(t, central), ovntest.StartChassis(t, central)
	ovntest.Link(t, ch1, ch2, 251)
	if _, err := central.NB.Ctl(context.Background(), "ls-add", "sw"); err != nil {
		t.Fatal(err)
	}
	a := attach(t, ch1, central, "east_default_a", "10.112.0.2/16")
	b := attach(t, ch2, central, "east_default_b", "10.112.0.3/16")
	ovntest.ExchangeTCP(t, a.netns, b.netns, b.ip.Addr())
	ovntest.ExchangeTCP(t, b.netns, a.netns, a.ip.Addr())
}

// TestFailedAttachLeavesNothing: an attachment OVS refuses (no such bridge) fails, and the
// veth made before is gone: the pod does not start half-attached.
func TestFailedAttachLeavesNothing(t *testing.T) {
	central := ovntest.StartCentral(t)
	ch := ovntest.StartChassis(t, central)
	p := pod{netns: ch.NewPod(), sandbox: ovntest.SandboxID(), port: "east_default_x", ip: netip.MustParsePrefix("10.112.0.9/16")}
	a := p.attachment(ch)
	a.Node.Bridge = "br-missing"
	err := podport.Attach(context.Background(), a)
	if err == nil || !strings.Contains(err.Error(), "br-missing") {
		t.Fatalf("Attach to a missing bridge = %v, want an error naming it", err)
	}
	if linkExists(t, a.Node.Netns, podport.LinkName(p.sandbox)) || linkExists(t, a.PodNetns, "net1") {
		t.Error("a failed Attach left its veth")
	}

	// Attaching twice replaces the first: one OVS port, one net1.
	a.Node.Bridge = "br-int"
	for range 2 {
		if err := podport.Attach(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(listPorts(t, a.Node), podport.LinkName(p.sandbox)); n != 1 {
		t.Errorf("%d OVS ports for one sandbox attached twice, want 1", n)
	}
}

// TestSweepRemovesOnlyStaleSandboxes: of three attached sandboxes, one whose pod namespace
// took its veth away (a stop the plugin missed) is swept by a Sweep that keeps every sandbox
// the runtime knows, and one the runtime no longer knows by a Sweep given the runtime's list;
// the running one, and OVS's own ports, stay.
func TestSweepRemovesOnlyStaleSandboxes(t *testing.T) {
	central := ovntest.StartCentral(t)
	ch := ovntest.StartChassis(t, central)
	if _, err := central.NB.Ctl(context.Background(), "ls-add", "sw"); err != nil {
		t.Fatal(err)
	}
	running := attach(t, ch, central, "east_default_a", "10.112.0.2/16")
	unknown := attach(t, ch, central, "east_default_b", "10.112.0.3/16")
	stopped := attach(t, ch, central, "east_default_c", "10.112.0.4/16")
	node := ch.Node()
	// The kernel deletes both ends of a veth with either: as when the pod's namespace goes.
	if out, err := exec.Command("ip", "-n", stopped.netns, "link", "del", "net1").CombinedOutput(); err != nil {
		t.Fatalf("removing the stopped pod's net1: %v: %s", err, out)
	}

	for _, step := range []struct {
		keep map[string]bool
		want pod
	}{
		{keep: nil, want: stopped},
		{keep: map[string]bool{running.sandbox: true, stopped.sandbox: true}, want: unknown},
	} {
		removed, _, err := podport.Sweep(context.Background(), node, step.keep)
		if err != nil {
			t.Fatal(err)
		}
		if len(removed) != 1 || removed[0] != step.want.sandbox {
			t.Fatalf("Sweep(keep %v) removed %v, want only %s", step.keep, removed, step.want.sandbox)
		}
		if strings.Contains(listPorts(t, node), podport.LinkName(step.want.sandbox)) {
			t.Errorf("Sweep(keep %v) left %s's OVS port", step.keep, step.want.sandbox)
		}
	}
	ports := listPorts(t, node)
	if !strings.Contains(ports, podport.LinkName(running.sandbox)) || strings.Count(ports, "oct") != 1 {
		t.Errorf("ports after the sweeps: %s; want %s's alone", ports, running.sandbox)
	}
	if linkExists(t, node.Netns, podport.LinkName(unknown.sandbox)) || !linkExists(t, node.Netns, podport.LinkName(running.sandbox)) {
		t.Error("Sweep removed the wrong veth")
	}
}

func listPorts(t *testing.T, n podport.Node) string {
	t.Helper()
	out, err := exec.Command("ovs-vsctl", "--db="+n.OVSDB, "list-ports", n.Bridge).CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-vsctl list-ports: %v: %s", err, out)
	}
	return string(out)
}

// interfaceRow is the _uuid of the OVS Interface row of name: a new one means the port was
// removed and added again.
func interfaceRow(t *testing.T, n podport.Node, name string) string {
	t.Helper()
	out, err := exec.Command("ovs-vsctl", "--db="+n.OVSDB, "get", "Interface", name, "_uuid").Output()
	if err != nil {
		t.Fatalf("ovs-vsctl get Interface %s _uuid: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

func linkExists(t *testing.T, nsPath, name string) bool {
	t.Helper()
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, err = h.LinkByName(name)
	return err == nil
}
