package labnet

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/octopus-mcs/octopus/internal/testenv"
)

func TestApplyAndTeardown(t *testing.T) {
	testenv.LabNetwork(t)
	id := LabID(t.TempDir())
	before, err := RootRoutes()
	if err != nil {
		t.Fatal(err)
	}
	p := applyPlan(t, id, specs(2, 2), 2)
	if err := Apply(p); err != nil {
		t.Fatalf("second apply: %v", err)
	}

	after, err := RootRoutes()
	if err != nil {
		t.Fatal(err)
	}
	CheckRootRoutes(t, before, after)

	ln, err := net.Listen("tcp", netip.AddrPortFrom(APIAddress, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	for _, c := range p.Clusters {
		for _, n := range c.Nodes {
			if err := dialFrom(n.Netns, ln.Addr().String()); err != nil {
				t.Errorf("node %s cannot reach the API address: %v", n.Name, err)
			}
		}
	}

	// Gateway 2 listens on its underlay address; gateway 1 connects.
	gw1, gw2 := p.Clusters[0].Nodes[0], p.Clusters[1].Nodes[0]
	var gwLn net.Listener
	if err := inNamespace(gw2.Netns, func() error {
		var err error
		gwLn, err = net.Listen("tcp", netip.AddrPortFrom(gw2.UnderlayAddr.Addr(), 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer gwLn.Close()
	go func() {
		if c, err := gwLn.Accept(); err == nil {
			_ = c.Close()
		}
	}()
	if err := dialFrom(gw1.Netns, gwLn.Addr().String()); err != nil {
		t.Errorf("gateway %s cannot reach gateway %s over the underlay: %v", gw1.Name, gw2.Name, err)
	}
	// The hub's gateways reach the API address over their uplinks and the gateways over the underlay.
	for _, h := range p.HubGateways {
		if err := dialFrom(h.Netns, ln.Addr().String()); err != nil {
			t.Errorf("hub gateway %s cannot reach the API address: %v", h.Name, err)
		}
		go func() {
			if c, err := gwLn.Accept(); err == nil {
				_ = c.Close()
			}
		}()
		if err := dialFrom(h.Netns, gwLn.Addr().String()); err != nil {
			t.Errorf("hub gateway %s cannot reach gateway %s over the underlay: %v", h.Name, gw2.Name, err)
		}
	}
	// A worker is not on the underlay.
	if err := dialFrom(p.Clusters[0].Nodes[1].Netns, gwLn.Addr().String()); err == nil {
		t.Errorf("worker reached the underlay")
	}

	if err := Teardown(id); err != nil {
		t.Fatal(err)
	}
	if err := Teardown(id); err != nil {
		t.Fatalf("second teardown: %v", err)
	}
	ns, links, err := Leftovers(id)
	if err != nil || len(ns) > 0 || len(links) > 0 {
		t.Errorf("after teardown: namespaces %v, links %v, err %v", ns, links, err)
	}
}

// applyPlan applies the network plan of lab id and tears it down when the test ends.
func applyPlan(t *testing.T, id string, clusters []ClusterSpec, hubGateways int) Plan {
	t.Helper()
	p, err := NewPlan(id, clusters, hubGateways)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Teardown(id); err != nil {
			t.Error(err)
		}
	})
	if err := Apply(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// dialFrom connects to addr from the named namespace. The socket is created on a thread in
// that namespace and keeps it for its life.
func dialFrom(ns, addr string) error {
	return inNamespace(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// CheckRootRoutes fails the test on every route NewRoutesOutsideLab reports.
func CheckRootRoutes(t *testing.T, before, after []netlink.Route) {
	t.Helper()
	for _, r := range NewRoutesOutsideLab(before, after) {
		t.Errorf("the root namespace gained a route outside the lab's ranges: %s", r)
	}
}
