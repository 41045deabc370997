package vpcnat

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

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
)

const golden = `add table inet octopus-vpc-gateway { comment "octopus: SNAT of the VPC's traffic leaving its gateway" ; }
add chain inet octopus-vpc-gateway postrouting { type nat hook postrouting priority 100 ; }
add set inet octopus-vpc-gateway vpc-subnets { type ipv4_addr ; flags interval ; }
add rule inet octopus-vpc-gateway postrouting ip saddr @vpc-subnets oifname != "vpc" counter snat ip to 242.1.0.7
add element inet octopus-vpc-gateway vpc-subnets { 10.0.1.0/24 }
add element inet octopus-vpc-gateway vpc-subnets { 10.0.2.0/24 }
`

var redSNAT = SNAT{
	Subnets:  []netip.Prefix{netip.MustParsePrefix("10.0.2.0/24"), netip.MustParsePrefix("10.0.1.0/24")},
	EgressIP: netip.MustParseAddr("242.1.0.7"), VpcInterface: "vpc",
}

// TestApplyGolden writes the table over a fake twice, after someone added a rule and an element
// and after a subnet went: the chain and the set are replaced, never appended to. With no egress
// address the table goes.
func TestApplyGolden(t *testing.T) {
	ctx := context.Background()
	fake := knftables.NewFake(knftables.InetFamily, owner.VpcGatewayNFTTable)
	w := NewWith(fake)
	three := redSNAT
	three.Subnets = append(three.Subnets, netip.MustParsePrefix("10.0.3.0/24"))
	if err := w.Apply(ctx, three); err != nil {
		t.Fatal(err)
	}
	tx := fake.NewTransaction()
	tx.Add(&knftables.Rule{Chain: chainPostrouting, Rule: "masquerade"})
	tx.Add(&knftables.Element{Set: setSubnets, Key: []string{"10.9.0.0/16"}})
	if err := fake.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := w.Apply(ctx, redSNAT); err != nil {
			t.Fatal(err)
		}
		if got := fake.Dump(); got != golden {
			t.Fatalf("ruleset:\n%s\nwant:\n%s", got, golden)
		}
	}
	if err := w.Apply(ctx, SNAT{VpcInterface: "vpc"}); err != nil {
		t.Fatal(err)
	}
	if got := fake.Dump(); got != "" {
		t.Fatalf("no egress address left:\n%s", got)
	}
}

func TestApplyRefusesIncompleteInput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*SNAT)
		want   string
	}{
		{"no interface", func(s *SNAT) { s.VpcInterface = "" }, "no VPC interface"},
		{"IPv6 egress", func(s *SNAT) { s.EgressIP = netip.MustParseAddr("fd00::1") }, "not IPv4"},
		{"no subnet", func(s *SNAT) { s.Subnets = nil }, "no subnet"},
		{"bad subnet", func(s *SNAT) { s.Subnets = append(s.Subnets, netip.Prefix{}) }, "not an IPv4 prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redSNAT
			tc.change(&s)
			fake := knftables.NewFake(knftables.InetFamily, owner.VpcGatewayNFTTable)
			if err := NewWith(fake).Apply(context.Background(), s); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Apply = %v, want an error saying %q", err, tc.want)
			}
			if got := fake.Dump(); got != "" {
				t.Errorf("wrote %q", got)
			}
		})
	}
}

// TestSNATInAGatewayNamespace runs the table in a real kernel: a client on the VPC's side of a
// gateway namespace, a server outside it that sees whoever connects. Before Apply the server
// sees the VPC's address; after it, the egress address, for the VPC's subnets only (another
// source keeps its own); a second Apply changes nothing; with no egress address the table is
// gone and the VPC's address shows again.
func TestSNATInAGatewayNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces")
	}
	p := fmt.Sprintf("vnat%d", os.Getpid()%100000)
	client, gw, server := p+"-c", p+"-g", p+"-s"
	for _, ns := range []string{client, gw, server} {
		tunneltest.Run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	for _, args := range [][]string{
		{"ip", "-n", client, "link", "add", "c0", "type", "veth", "peer", "name", "vpc", "netns", gw},
		{"ip", "-n", gw, "link", "add", "out", "type", "veth", "peer", "name", "s0", "netns", server},
		{"ip", "-n", client, "addr", "add", "10.0.1.5/24", "dev", "c0"},
		{"ip", "-n", client, "addr", "add", "10.0.9.5/24", "dev", "c0"},
		{"ip", "-n", gw, "addr", "add", "10.0.1.1/24", "dev", "vpc"},
		{"ip", "-n", gw, "addr", "add", "10.0.9.1/24", "dev", "vpc"},
		{"ip", "-n", gw, "addr", "add", "192.0.2.1/24", "dev", "out"},
		{"ip", "-n", gw, "addr", "add", "192.0.2.100/32", "dev", "out"}, // the egress address, the gateway's
		{"ip", "-n", server, "addr", "add", "192.0.2.2/24", "dev", "s0"},
		{"ip", "-n", client, "link", "set", "c0", "up"},
		{"ip", "-n", gw, "link", "set", "vpc", "up"},
		{"ip", "-n", gw, "link", "set", "out", "up"},
		{"ip", "-n", server, "link", "set", "s0", "up"},
		{"ip", "-n", client, "route", "add", "192.0.2.0/24", "via", "10.0.1.1", "src", "10.0.1.5"},
		// Untranslated sources can be answered too, so that a missing SNAT shows as the
		// VPC's address at the server rather than as no answer.
		{"ip", "-n", server, "route", "add", "10.0.0.0/16", "via", "192.0.2.1"},
		{"ip", "netns", "exec", gw, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	} {
		tunneltest.Run(t, args...)
	}
	serverAddr := netip.MustParseAddrPort("192.0.2.2:7004")
	var ln net.Listener
	tunneltest.In(t, server, func() {
		var err error
		if ln, err = net.Listen("tcp", serverAddr.String()); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			_, _ = c.Write([]byte(host))
			_ = c.Close()
		}
	}()
	seenAs := func(src string) string {
		t.Helper()
		var got string
		tunneltest.In(t, client, func() {
			d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
			c, err := d.Dial("tcp", serverAddr.String())
			if err != nil {
				t.Fatalf("from %s: %v", src, err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			buf := make([]byte, 64)
			n, _ := c.Read(buf)
			got = string(buf[:n])
		})
		return got
	}
	if got := seenAs("10.0.1.5"); got != "10.0.1.5" {
		t.Fatalf("before Apply the server sees %q, want 10.0.1.5", got)
	}

	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	gwPath := "/run/netns/" + gw
	s := SNAT{Subnets: []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24")}, EgressIP: netip.MustParseAddr("192.0.2.100"), VpcInterface: "vpc"}
	ctx := context.Background()
	if err := w.ApplyIn(ctx, gwPath, s); err != nil {
		t.Fatal(err)
	}
	list := func() string {
		out, _ := exec.Command("ip", "netns", "exec", gw, "nft", "list", "table", "inet", owner.VpcGatewayNFTTable).CombinedOutput()
		// The counter moves with traffic; the rules must not.
		return strings.Join(strings.Fields(strings.Split(string(out), "counter")[0]), " ")
	}
	first := list()
	if got := seenAs("10.0.1.5"); got != "192.0.2.100" {
		t.Errorf("the VPC's pod is seen as %q, want the egress address 192.0.2.100", got)
	}
	if got := seenAs("10.0.9.5"); got != "10.0.9.5" {
		t.Errorf("a source outside the VPC's subnets is seen as %q, want its own 10.0.9.5", got)
	}
	if err := w.ApplyIn(ctx, gwPath, s); err != nil {
		t.Fatal(err)
	}
	if again := list(); again != first {
		t.Errorf("a second Apply changed the table:\n%s\nthen\n%s", first, again)
	}
	if err := w.ApplyIn(ctx, gwPath, SNAT{VpcInterface: "vpc"}); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "exec", gw, "nft", "list", "table", "inet", owner.VpcGatewayNFTTable).CombinedOutput(); err == nil {
		t.Errorf("the table stayed without an egress address:\n%s", out)
	}
	if got := seenAs("10.0.1.5"); got != "10.0.1.5" {
		t.Errorf("without SNAT the server sees %q, want 10.0.1.5", got)
	}
}
