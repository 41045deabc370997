package podport_test

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
)

func validVpcGateway() podport.VpcGateway {
	return podport.VpcGateway{
		Node: podport.Node{Bridge: "br-int"}, Vpc: "red", Port: "octopus-east.red.gateway.port",
		MAC: net.HardwareAddr{0x0a, 0x58, 100, 127, 255, 254}, IP: netip.MustParsePrefix("100.127.255.254/30"),
		Via:     netip.MustParseAddr("100.127.255.253"),
		Subnets: []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24"), netip.MustParsePrefix("10.0.2.0/24")},
	}
}

func TestReconcileVpcGatewayRefusesIncompleteInput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*podport.VpcGateway)
		want   string
	}{
		{"no bridge", func(g *podport.VpcGateway) { g.Node.Bridge = "" }, "no integration bridge"},
		{"no VPC", func(g *podport.VpcGateway) { g.Vpc = "" }, "not an RFC 1123 label"},
		{"a path for a VPC", func(g *podport.VpcGateway) { g.Vpc = "../etc" }, "not an RFC 1123 label"},
		{"no port", func(g *podport.VpcGateway) { g.Port = "" }, "no logical port"},
		{"short MAC", func(g *podport.VpcGateway) { g.MAC = g.MAC[:4] }, "not an Ethernet address"},
		{"IPv6 address", func(g *podport.VpcGateway) { g.IP = netip.MustParsePrefix("fd00::1/64") }, "not an IPv4 prefix"},
		{"router off the link", func(g *podport.VpcGateway) { g.Via = netip.MustParseAddr("10.0.0.1") }, "not an IPv4 address on the link"},
		{"no router", func(g *podport.VpcGateway) { g.Via = netip.Addr{} }, "router address"},
		{"bad subnet", func(g *podport.VpcGateway) { g.Subnets = append(g.Subnets, netip.Prefix{}) }, "subnet"},
		{"MTU too large", func(g *podport.VpcGateway) { g.MTU = 70000 }, "MTU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := validVpcGateway()
			tc.change(&g)
			_, err := podport.ReconcileVpcGateway(context.Background(), g)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ReconcileVpcGateway = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestReconcileVpcGatewayConverges attaches a VPC's gateway to a real chassis, into a
// namespace of its own, and disturbs it the ways a node can: each ReconcileVpcGateway puts it
// right and says so, the one after it finds nothing to do. The NRI plugin's Sweep, told that
// no sandbox runs, leaves it alone; DetachVpcGateway removes the port, the veth and the
// namespace, and VpcGatewaysOnNode finds it before and not after.
func TestReconcileVpcGatewayConverges(t *testing.T) {
	central := ovntest.StartCentral(t)
	ch := ovntest.StartChassis(t, central)
	node := ch.Node()
	g := validVpcGateway()
	g.Node, g.NetnsDir, g.MTU = node, t.TempDir(), 1400
	t.Cleanup(func() { _ = podport.DetachVpcGateway(context.Background(), node, g.NetnsDir, g.Vpc) })
	hostLink := podport.VpcGatewayNodeLink(g.Vpc)

	attach := func(wantChanges bool) {
		t.Helper()
		changed, err := podport.ReconcileVpcGateway(context.Background(), g)
		if err != nil {
			t.Fatal(err)
		}
		checkVpcGateway(t, g)
		if wantChanges != (len(changed) > 0) {
			t.Errorf("ReconcileVpcGateway reported changes %q, want some: %v", changed, wantChanges)
		}
	}
	attach(true)
	index := linkIndexIn(t, g.NetnsPath(), podport.VpcGatewayInterface)
	attach(false)
	if linkIndexIn(t, g.NetnsPath(), podport.VpcGatewayInterface) != index {
		t.Error("a ReconcileVpcGateway that found everything right recreated the link")
	}

	// nsenter, as this iproute2's -n takes names in /run/netns only.
	inGw := func(args ...string) []string {
		return append([]string{"nsenter", "--net=" + g.NetnsPath(), "ip"}, args...)
	}
	inNode := func(args ...string) []string {
		return append([]string{"nsenter", "--net=" + node.Netns, "ip"}, args...)
	}
	for _, tc := range []struct {
		name    string
		disturb [][]string
	}{
		{"the address flushed", [][]string{inGw("addr", "flush", "dev", podport.VpcGatewayInterface)}},
		{"an extra address", [][]string{inGw("addr", "add", "10.99.0.1/24", "dev", podport.VpcGatewayInterface)}},
		{"a route removed", [][]string{inGw("route", "del", "10.0.2.0/24")}},
		{"a stray route", [][]string{inGw("route", "add", "10.9.0.0/16", "via", "100.127.255.253")}},
		{"another MAC", [][]string{inGw("link", "set", podport.VpcGatewayInterface, "address", "02:00:00:00:00:01")}},
		{"down", [][]string{inGw("link", "set", podport.VpcGatewayInterface, "down")}},
		{"lo down", [][]string{inGw("link", "set", "lo", "down")}},
		{"forwarding off", [][]string{{"nsenter", "--net=" + g.NetnsPath(), "sysctl", "-qw", "net.ipv4.ip_forward=0"}}},
		{"another MTU", [][]string{inNode("link", "set", hostLink, "mtu", "1500")}},
		{"the veth deleted", [][]string{inNode("link", "del", hostLink)}},
		// As a check that made the veth again and failed before re-adding the port leaves
		// it: the port is bound right, to a device that is gone.
		{remade, [][]string{{"nsenter", "--net=" + node.Netns, "sh", "-ec", `
			nsenter --net=` + g.NetnsPath() + ` sleep 60 & holder=$!
			while [ "$(readlink /proc/$holder/ns/net)" = "$(readlink /proc/self/ns/net)" ]; do sleep 0.05; done
			ip link del ` + hostLink + `
			ip link add ` + hostLink + ` mtu 1400 type veth peer name ` + podport.VpcGatewayInterface + ` mtu 1400
			ip link set ` + podport.VpcGatewayInterface + ` netns $holder
			kill $holder`}}},
		{"the OVS port deleted", [][]string{{"ovs-vsctl", "--timeout=10", "--no-wait", "--db=" + node.OVSDB, "del-port", "br-int", hostLink}}},
		{"the iface-id changed", [][]string{{"ovs-vsctl", "--timeout=10", "--no-wait", "--db=" + node.OVSDB, "set", "Interface", hostLink, "external_ids:iface-id=x"}}},
		{"ARP on the switch's end", [][]string{inNode("link", "set", hostLink, "arp", "on")}},
		// Lazily: this test holds the namespace open, which keeps it and the veth alive.
		{"the namespace unmounted", [][]string{{"umount", "-l", g.NetnsPath()}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := interfaceRow(t, node, hostLink)
			for _, cmd := range tc.disturb {
				// Bounded: a disturbance that hangs (once seen here, under load) fails the
				// subtest rather than the whole package's run.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				out, err := exec.CommandContext(ctx, cmd[0], cmd[1:]...).CombinedOutput()
				cancel()
				if err != nil {
					t.Fatalf("%v: %v: %s", cmd, err, out)
				}
			}
			attach(true)
			attach(false)
			if tc.name == remade && interfaceRow(t, node, hostLink) == row {
				t.Errorf("the OVS port of the veth made again was kept, not added again for the new device")
			}
		})
	}

	// A subnet gone: its route goes.
	g.Subnets = g.Subnets[:1]
	attach(true)
	attach(false)

	// The NRI plugin's Sweep removes every sandbox the runtime does not list: none here, yet the
	// VPC's gateway is no sandbox and stays.
	removed, _, err := podport.Sweep(context.Background(), node, map[string]bool{})
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) > 0 {
		t.Errorf("Sweep removed %v", removed)
	}
	attach(false)

	if got, err := podport.VpcGatewaysOnNode(context.Background(), node, g.NetnsDir); err != nil || !slices.Equal(got, []string{"red"}) {
		t.Errorf("VpcGatewaysOnNode = %v, %v; want [red]", got, err)
	}
	for range 2 {
		if err := podport.DetachVpcGateway(context.Background(), node, g.NetnsDir, g.Vpc); err != nil {
			t.Fatal(err)
		}
	}
	if linkExists(t, node.Netns, hostLink) || strings.Contains(listPorts(t, node), hostLink) {
		t.Error("DetachVpcGateway left the veth or the OVS port")
	}
	if got, err := podport.VpcGatewaysOnNode(context.Background(), node, g.NetnsDir); err != nil || len(got) != 0 {
		t.Errorf("VpcGatewaysOnNode after the detach = %v, %v; want none", got, err)
	}
}

// checkVpcGateway reads the VPC gateway back: in its namespace the interface with one
// address, the MAC, the MTU, up, routes to exactly the subnets via the router, lo up,
// forwarding on; in the
// node's the other end in br-int with the port's iface-id, kept off the node's stack.
func checkVpcGateway(t *testing.T, g podport.VpcGateway) {
	t.Helper()
	h := netlinkAt(t, g.NetnsPath())
	link := checkInterface(t, h, podport.VpcGatewayInterface, g.MAC, g.MTU, g.IP)
	routes, err := h.RouteList(link, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var via, want []string
	for _, r := range routes {
		if r.Gw != nil {
			via = append(via, r.Dst.String()+" via "+r.Gw.String())
		}
	}
	for _, s := range g.Subnets {
		want = append(want, s.String()+" via "+g.Via.String())
	}
	slices.Sort(via)
	slices.Sort(want)
	if !slices.Equal(via, want) {
		t.Errorf("routes via a next hop on %s: %v, want %v", podport.VpcGatewayInterface, via, want)
	}
	if lo, err := h.LinkByName("lo"); err != nil || lo.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("lo in the gateway's namespace is not up: %v", err)
	}
	if out, err := exec.Command("nsenter", "--net="+g.NetnsPath(), "sysctl", "-n", "net.ipv4.ip_forward").Output(); err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Errorf("IPv4 forwarding in the gateway's namespace: %q, %v; want 1", out, err)
	}
	hostLink := podport.VpcGatewayNodeLink(g.Vpc)
	out, err := exec.Command("ovs-vsctl", "--db="+g.Node.OVSDB, "get", "Interface", hostLink, "external_ids:iface-id").Output()
	if err != nil || strings.Trim(strings.TrimSpace(string(out)), `"`) != g.Port {
		t.Errorf("iface-id of %s: %s %v, want %s", hostLink, out, err, g.Port)
	}
	nodeH := netlinkAt(t, g.Node.Netns)
	host, err := nodeH.LinkByName(hostLink)
	if err != nil {
		t.Fatal(err)
	}
	checkPortRecordsDevice(t, g.Node, nodeH, hostLink)
	if host.Attrs().MTU != g.MTU || host.Attrs().Flags&net.FlagUp == 0 || host.Attrs().RawFlags&unix.IFF_NOARP == 0 {
		t.Errorf("%s: MTU %d, flags %v; want %d, up, no ARP", hostLink, host.Attrs().MTU, host.Attrs().Flags, g.MTU)
	}
}

func linkIndexIn(t *testing.T, nsPath, name string) int {
	t.Helper()
	link, err := netlinkAt(t, nsPath).LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return link.Attrs().Index
}
