package podport_test

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
)

func TestAttachGatewayRefusesIncompleteInput(t *testing.T) {
	valid := podport.Gateway{
		Node: podport.Node{Bridge: "br-int"}, Port: "east_gateway",
		MAC: net.HardwareAddr{0x0a, 0x58, 10, 112, 0, 1}, IP: netip.MustParsePrefix("10.112.0.1/16"),
	}
	for _, tc := range []struct {
		name   string
		change func(*podport.Gateway)
		want   string
	}{
		{"no bridge", func(g *podport.Gateway) { g.Node.Bridge = "" }, "no integration bridge"},
		{"no port", func(g *podport.Gateway) { g.Port = "" }, "no logical port"},
		{"short MAC", func(g *podport.Gateway) { g.MAC = g.MAC[:4] }, "not an Ethernet address"},
		{"no address", func(g *podport.Gateway) { g.IP = netip.Prefix{} }, "not an IPv4 prefix"},
		{"IPv6 address", func(g *podport.Gateway) { g.IP = netip.MustParsePrefix("fd00::1/64") }, "not an IPv4 prefix"},
		{"MTU too large", func(g *podport.Gateway) { g.MTU = 70000 }, "MTU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := valid
			tc.change(&g)
			err := podport.AttachGateway(context.Background(), g)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("AttachGateway = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestAttachGatewayConverges attaches the gateway interface to a real chassis and then
// disturbs it the ways a node can (another address, another MAC, the OVS port deleted, half
// the veth gone, a new block): each AttachGateway puts it right, and one that finds it right
// leaves the link as it was (same ifindex: the active gateway's traffic is not interrupted).
// remade is the subtest that makes a gateway's veth again behind its OVS port: the port must be
// added again for the new device.
const remade = "the veth made again behind the OVS port"

func TestAttachGatewayConverges(t *testing.T) {
	central := ovntest.StartCentral(t)
	ch := ovntest.StartChassis(t, central)
	node := ch.Node()
	g := podport.Gateway{Node: node, Port: "east_gateway", MAC: net.HardwareAddr{0x0a, 0x58, 10, 112, 0, 1},
		IP: netip.MustParsePrefix("10.112.0.1/16"), MTU: 1400}
	// attach reconciles and checks the result, and whether it said it changed something.
	attach := func(wantChanges bool) {
		t.Helper()
		changed, err := podport.ReconcileGateway(context.Background(), g)
		if err != nil {
			t.Fatal(err)
		}
		checkGateway(t, node, g)
		if wantChanges != (len(changed) > 0) {
			t.Errorf("ReconcileGateway reported changes %q, want some: %v", changed, wantChanges)
		}
	}
	attach(true)
	index := gatewayIndex(t, node)
	attach(false)
	if gatewayIndex(t, node) != index {
		t.Error("an AttachGateway that found everything right recreated the link")
	}

	for _, tc := range []struct {
		name    string
		disturb []string // an ip, ovs-vsctl or sh command (the first word says which; ip runs in the node's namespace)
	}{
		{"an extra address", []string{"ip", "addr", "add", "10.99.0.1/24", "dev", podport.GatewayLink}},
		{"the address removed", []string{"ip", "addr", "flush", "dev", podport.GatewayLink}},
		{"another MAC", []string{"ip", "link", "set", podport.GatewayLink, "address", "02:00:00:00:00:01"}},
		{"down", []string{"ip", "link", "set", podport.GatewayLink, "down"}},
		{"another MTU", []string{"ip", "link", "set", podport.GatewayLink, "mtu", "1500"}},
		{"the OVS port deleted", []string{"ovs-vsctl", "--db=" + node.OVSDB, "del-port", "br-int", podport.GatewayBridgePort}},
		{"the iface-id changed", []string{"ovs-vsctl", "--db=" + node.OVSDB, "set", "Interface", podport.GatewayBridgePort, "external_ids:iface-id=x"}},
		{"the veth deleted", []string{"ip", "link", "del", podport.GatewayLink}},
		// As a check that made the veth again and failed before re-adding the port leaves
		// it: the port is bound right, to a device that is gone.
		{remade, []string{"sh", "-ec", "ip -n " + ch.Netns + " link del " + podport.GatewayLink +
			"; ip -n " + ch.Netns + " link add " + podport.GatewayLink + " type veth peer name " + podport.GatewayBridgePort}},
		{"ARP on the switch's end", []string{"ip", "link", "set", podport.GatewayBridgePort, "arp", "on"}},
		{"an IPv6 address on the switch's end", []string{"ip", "addr", "add", "fe80::1/64", "dev", podport.GatewayBridgePort}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := tc.disturb
			if cmd[0] == "ip" {
				cmd = append([]string{"ip", "-n", ch.Netns}, cmd[1:]...)
			}
			row := interfaceRow(t, node, podport.GatewayBridgePort)
			if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %v: %s", cmd, err, out)
			}
			attach(true)
			attach(false)
			if tc.name == remade && interfaceRow(t, node, podport.GatewayBridgePort) == row {
				t.Errorf("the OVS port of the veth made again was kept, not added again for the new device")
			}
		})
	}

	// A new block: the old address goes, so the old block is no longer routed into the switch.
	g.IP, g.MAC = netip.MustParsePrefix("10.114.0.1/16"), net.HardwareAddr{0x0a, 0x58, 10, 114, 0, 1}
	attach(true)
	attach(false)

	for range 2 {
		if err := podport.DetachGateway(context.Background(), node); err != nil {
			t.Fatal(err)
		}
	}
	if linkExists(t, node.Netns, podport.GatewayLink) || linkExists(t, node.Netns, podport.GatewayBridgePort) ||
		strings.Contains(listPorts(t, node), podport.GatewayBridgePort) {
		t.Error("DetachGateway left the veth or the OVS port")
	}
}

// checkGateway reads the gateway interface back: one address, the MAC, the MTU, up, in br-int
// with the logical port's iface-id.
func checkGateway(t *testing.T, node podport.Node, g podport.Gateway) {
	t.Helper()
	h := netlinkAt(t, node.Netns)
	checkInterface(t, h, podport.GatewayLink, g.MAC, g.MTU, g.IP)
	out, err := exec.Command("ovs-vsctl", "--db="+node.OVSDB, "get", "Interface", podport.GatewayBridgePort, "external_ids:iface-id").Output() // stdout only: stderr may carry poll-interval warnings under load
	if err != nil || strings.Trim(strings.TrimSpace(string(out)), `"`) != g.Port {
		t.Errorf("iface-id of %s: %s %v, want %s", podport.GatewayBridgePort, out, err, g.Port)
	}
	if !strings.Contains(listPorts(t, node), podport.GatewayBridgePort) {
		t.Errorf("%s is not a port of br-int", podport.GatewayBridgePort)
	}
	checkOffNodeStack(t, h, podport.GatewayBridgePort)
	checkPortRecordsDevice(t, node, h, podport.GatewayBridgePort)
}

// checkInterface checks the link name in h: the MAC, the MTU, up, and ip as its only IPv4
// address; it returns the link for further checks.
func checkInterface(t *testing.T, h *netlink.Handle, name string, mac net.HardwareAddr, mtu int, ip netip.Prefix) netlink.Link {
	t.Helper()
	link, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	a := link.Attrs()
	if a.HardwareAddr.String() != mac.String() || a.MTU != mtu || a.Flags&net.FlagUp == 0 {
		t.Errorf("%s: MAC %s, MTU %d, flags %v; want %s, %d, up", name, a.HardwareAddr, a.MTU, a.Flags, mac, mtu)
	}
	addrs, err := h.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ad := range addrs {
		got = append(got, ad.IPNet.String())
	}
	if !slices.Equal(got, []string{ip.String()}) {
		t.Errorf("%s has addresses %v, want only %s", name, got, ip)
	}
	return link
}

// checkPortRecordsDevice checks that the OVS port name was added for the device of that name in
// h's namespace: one added for a device since made again carries nothing (ensureOVSPort).
func checkPortRecordsDevice(t *testing.T, node podport.Node, h *netlink.Handle, name string) {
	t.Helper()
	link, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ovs-vsctl", "--db="+node.OVSDB, "get", "Interface", name, "external_ids:octopus-ifindex").Output()
	if want := strconv.Itoa(link.Attrs().Index); err != nil || strings.Trim(strings.TrimSpace(string(out)), `"`) != want {
		t.Errorf("the OVS port %s records the device %s %v, want %s (the veth's index)", name, out, err, want)
	}
}

// checkOffNodeStack checks that the node's stack takes no part on a switch port's veth end:
// no ARP, no IPv6 address.
func checkOffNodeStack(t *testing.T, h *netlink.Handle, name string) {
	t.Helper()
	link, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if link.Attrs().RawFlags&unix.IFF_NOARP == 0 {
		t.Errorf("%s does ARP: the node's stack answers the switch's ARP requests for its own addresses there", name)
	}
	addrs, err := h.AddrList(link, netlink.FAMILY_V6)
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) > 0 {
		t.Errorf("%s has IPv6 addresses %v: the node's stack sends into the switch", name, addrs)
	}
}

func gatewayIndex(t *testing.T, node podport.Node) int {
	t.Helper()
	link, err := netlinkAt(t, node.Netns).LinkByName(podport.GatewayLink)
	if err != nil {
		t.Fatal(err)
	}
	return link.Attrs().Index
}

func netlinkAt(t *testing.T, nsPath string) *netlink.Handle {
	t.Helper()
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}
