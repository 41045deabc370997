package podport_test

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/netnsrun"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
)

// sourceSeen connects from the namespace at from to a listener at addr:port in the namespace
// at to and returns the source address the listener saw.
func sourceSeen(t *testing.T, from, to string, addr netip.Addr) (netip.Addr, error) {
	t.Helper()
	var ln net.Listener
	if err := netnsrun.In(to, func() error {
		var err error
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(addr, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan netip.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		seen <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		c.Close()
	}()
	err := netnsrun.In(from, func() error {
		c, err := net.DialTimeout("tcp4", ln.Addr().String(), 2*time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
	if err != nil {
		return netip.Addr{}, err
	}
	select {
	case a := <-seen:
		return a, nil
	case <-time.After(5 * time.Second):
		t.Fatal("the listener accepted nothing")
	}
	return netip.Addr{}, nil
}

// TestVpcGatewayOutside: a VPC gateway with an external address gets an outside veth to the
// node's namespace, the address as a /32 on its end, its default route there and the node's
// route back; the gateway reaches a listener on the node, which sees the external address;
// each part disturbed is put right and reported, the next reconcile reporting nothing; the
// address removed takes the veth and the node's route; DetachVpcGateway leaves neither.
func TestVpcGatewayOutside(t *testing.T) {
	central := ovntest.StartCentral(t)
	ch := ovntest.StartChassis(t, central)
	node := ch.Node()
	g := validVpcGateway()
	g.Node, g.NetnsDir = node, t.TempDir()
	g.ExternalIP = netip.MustParseAddr("242.1.0.9")
	t.Cleanup(func() { _ = podport.DetachVpcGateway(context.Background(), node, g.NetnsDir, g.Vpc) })
	outside := podport.VpcGatewayOutsideNodeLink(g.Vpc)
	// A listener's address on the node, outside everything the gateway has.
	listener := netip.MustParseAddr("192.0.2.200")
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
		return string(out)
	}
	inGw := func(args ...string) []string {
		return append([]string{"nsenter", "--net=" + g.NetnsPath(), "ip"}, args...)
	}
	inNode := func(args ...string) []string {
		return append([]string{"nsenter", "--net=" + node.Netns, "ip"}, args...)
	}
	run(inNode("addr", "add", listener.String()+"/32", "dev", "lo")...)

	attach := func(wantChanges bool) {
		t.Helper()
		changed, err := podport.ReconcileVpcGateway(context.Background(), g)
		if err != nil {
			t.Fatal(err)
		}
		if wantChanges != (len(changed) > 0) {
			t.Errorf("ReconcileVpcGateway reported changes %q, want some: %v", changed, wantChanges)
		}
	}
	check := func() {
		t.Helper()
		if got := run(inGw("-4", "-o", "addr", "show", "dev", podport.VpcGatewayOutsideInterface)...); !strings.Contains(got, "inet 242.1.0.9/32") {
			t.Errorf("%s's addresses: %s", podport.VpcGatewayOutsideInterface, got)
		}
		if got := run(inGw("route", "show", "default")...); !strings.Contains(got, "via 169.254.0.1 dev ext onlink") {
			t.Errorf("the gateway's default route: %q", got)
		}
		if got := run(inNode("route", "show", "242.1.0.9")...); !strings.Contains(got, "dev "+outside) {
			t.Errorf("the node's route to the external address: %q", got)
		}
		src, err := sourceSeen(t, g.NetnsPath(), node.Netns, listener)
		if err != nil || src != g.ExternalIP {
			t.Errorf("the node's listener saw %v (%v), want the external address %s", src, err, g.ExternalIP)
		}
	}
	attach(true)
	check()
	attach(false)

	for _, tc := range []struct {
		name    string
		disturb []string
	}{
		{"the address flushed", inGw("addr", "flush", "dev", podport.VpcGatewayOutsideInterface)},
		{"the default route removed", inGw("route", "del", "default")},
		{"the neighbour removed", inGw("neigh", "del", "169.254.0.1", "dev", podport.VpcGatewayOutsideInterface)},
		{"the node's route removed", inNode("route", "del", "242.1.0.9/32")},
		{"the node end down", inNode("link", "set", outside, "down")},
		{"the outside veth deleted", inNode("link", "del", outside)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run(tc.disturb...)
			attach(true)
			check()
			attach(false)
		})
	}

	// Another address (a clash moved it): the node routes the new one to the gateway and no
	// longer the old, which another gateway may hold now.
	g.ExternalIP = netip.MustParseAddr("242.1.0.10")
	attach(true)
	attach(false)
	if got := run(inNode("route", "show", "242.1.0.9")...); strings.TrimSpace(got) != "" {
		t.Errorf("the node still routes the old external address to the gateway: %q", got)
	}
	if got := run(inNode("route", "show", "242.1.0.10")...); !strings.Contains(got, "dev "+outside) {
		t.Errorf("the node's route to the new external address: %q", got)
	}
	g.ExternalIP = netip.MustParseAddr("242.1.0.9")
	attach(true)

	// No external address: the veth and the node's route go.
	g.ExternalIP = netip.Addr{}
	attach(true)
	attach(false)
	if out, err := exec.Command(inNode("link", "show", outside)[0], inNode("link", "show", outside)[1:]...).CombinedOutput(); err == nil {
		t.Errorf("the outside veth outlived the external address: %s", out)
	}
	if got := run(inNode("route", "show", "242.1.0.9")...); strings.TrimSpace(got) != "" {
		t.Errorf("the node still routes the external address: %q", got)
	}
	// Back, then detached: nothing of it stays.
	g.ExternalIP = netip.MustParseAddr("242.1.0.9")
	attach(true)
	if err := podport.DetachVpcGateway(context.Background(), node, g.NetnsDir, g.Vpc); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(inNode("link", "show", outside)[0], inNode("link", "show", outside)[1:]...).CombinedOutput(); err == nil {
		t.Errorf("the outside veth outlived DetachVpcGateway: %s", out)
	}
}
