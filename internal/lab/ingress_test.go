package lab_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/wireguard"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
)

// kubeletPort is the kubelet's API port, which listens on every address of its node.
const kubeletPort = 10250

// activeGatewayNode is the node of cluster whose gateway published its Peer, and the Peer.
func activeGatewayNode(ctx context.Context, t *testing.T, l *lab.Lab, cluster string) (labnet.NodeNet, *v1alpha1.Peer) {
	t.Helper()
	hubc := kubeClient(t, l.Env.Cluster(lab.HubName).Kubeconfig)
	p := &v1alpha1.Peer{}
	var node labnet.NodeNet
	waitFor(t, time.Minute, cluster+"'s Peer to name its gateway node", func() error {
		if err := hubc.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: cluster}, p); err != nil {
			return err
		}
		for _, c := range l.Network.Clusters {
			for _, n := range c.Nodes {
				if c.Name == cluster && n.Name == p.Spec.Hostname {
					node = n
					return nil
				}
			}
		}
		return fmt.Errorf("no node %q in %s", p.Spec.Hostname, cluster)
	})
	return node, p
}

// ingressCounter is the packet count of the rule with comment in the ingress filter table of
// netns; -1 without the table or the rule (a gateway that filters nothing).
func ingressCounter(t *testing.T, netns, comment string) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", netns, "nft", "list", "table", "inet", owner.IngressFilterNFTTable).CombinedOutput()
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "counter packets "); i >= 0 && strings.Contains(line, `comment "`+comment+`"`) {
			var n int
			if _, err := fmt.Sscanf(line[i:], "counter packets %d", &n); err == nil {
				return n
			}
		}
	}
	return -1
}

// checkKubeletUnreachable: from cluster2's active gateway (a compromised member's, which can
// send anything into its tunnel), cluster1's gateway node answers the health probes' echo on
// its health-check address, but a TCP connection to the kubelet port on that address, which
// is the node's own (on its tunnel device) and inside the prefixes cluster2 routes to cluster1,
// fails, and the ingress filter counts the drop. Without the filter the connection reaches
// whatever listens on the node's every address. Where no kubelet runs on the lab node, a
// listener on its port stands in for it.
func checkKubeletUnreachable(ctx context.Context, t *testing.T, l *lab.Lab) {
	c1, c2 := l.Network.Clusters[0].Name, l.Network.Clusters[1].Name
	victim, vp := activeGatewayNode(ctx, t, l, c1)
	attacker, _ := activeGatewayNode(ctx, t, l, c2)
	hc, err := netip.ParseAddr(vp.Spec.HealthCheckIP)
	if err != nil {
		t.Fatalf("%s's health-check address: %v", c1, err)
	}
	tunneltest.In(t, victim.Netns, func() {
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", kubeletPort))
		if errors.Is(err, syscall.EADDRINUSE) {
			return // a kubelet listens there
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
	})
	if err := tunneltest.Ping(attacker.Netns, hc, 30*time.Second); err != nil {
		t.Fatalf("%s's gateway cannot ping %s's health-check address through the tunnel: %v", c2, c1, err)
	}
	before := ingressCounter(t, victim.Netns, "a node address")
	dst := netip.AddrPortFrom(hc, kubeletPort)
	var dialErr error
	tunneltest.In(t, attacker.Netns, func() {
		var c net.Conn
		if c, dialErr = net.DialTimeout("tcp", dst.String(), 3*time.Second); dialErr == nil {
			_ = c.Close()
		}
	})
	if dialErr == nil {
		t.Fatalf("%s's gateway %s connected to the kubelet port of %s's gateway node %s at %s", c2, attacker.Name, c1, victim.Name, dst)
	}
	after := ingressCounter(t, victim.Netns, "a node address")
	if after <= before || before < 0 {
		t.Errorf("%s's ingress filter counted %d then %d node-address drops, want an increase", victim.Name, before, after)
	}
	t.Logf("%s's gateway: echo to %s answered, kubelet port refused (%v); node-address drops %d -> %d", c2, hc, dialErr, before, after)
}

// checkForgedVXLANDropped: a vxlan datagram sent to cluster1's active gateway's tunnel port
// from an address that is no remote gateway's endpoint (cluster1's own worker, on the node
// LAN) is dropped and counted by the ingress filter, while the tunnels keep working (the
// caller's checks). Without the filter the kernel's vxlan socket takes it.
func checkForgedVXLANDropped(ctx context.Context, t *testing.T, l *lab.Lab, port uint16) {
	c1 := l.Network.Clusters[0]
	victim, _ := activeGatewayNode(ctx, t, l, c1.Name)
	var forger labnet.NodeNet
	for _, n := range c1.Nodes {
		if !n.Gateway {
			forger = n
		}
	}
	if forger.Netns == "" {
		t.Fatalf("%s has no non-gateway node to forge from", c1.Name)
	}
	before := ingressCounter(t, victim.Netns, "vxlan from a non-gateway")
	dst := netip.AddrPortFrom(victim.LANAddr.Addr(), port)
	tunneltest.In(t, forger.Netns, func() {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A vxlan header (flags 0x08, VNI 1) and an inner frame's first bytes.
		for range 3 {
			if _, err := c.Write([]byte{0x08, 0, 0, 0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}); err != nil {
				t.Fatal(err)
			}
		}
	})
	time.Sleep(500 * time.Millisecond)
	after := ingressCounter(t, victim.Netns, "vxlan from a non-gateway")
	if before < 0 || after-before < 3 {
		t.Fatalf("%s's ingress filter counted %d then %d forged vxlan datagrams from %s, want 3 more", victim.Name, before, after, forger.Name)
	}
	t.Logf("forged vxlan from %s to %s dropped: counter %d -> %d", forger.Name, dst, before, after)
}

// roguePort is the UDP port of the attacker's own WireGuard device, beside its gateway's.
const roguePort = 51999

// checkPrivatePodUnreachable: a member that owns its gateway node can run a WireGuard device of
// its own and, with its hub credential, point its Peer at that device's key and port. Cluster3
// does so here and sends, through the tunnel cluster1 then keeps with it, a TCP SYN to
// victim, a pod of globalnet cluster1 that is exported nowhere. Cluster1's gateway accepts
// the rogue key (its health-check address answers the rogue's echo, which shows the tunnel
// carries what the filter allows) but drops the SYN, whose destination is no prefix cluster1
// advertised, and counts it. Without the ingress filter the SYN reaches the pod and the
// connection opens: the pod's reply returns through the same tunnel. The Peer is restored
// afterwards and cluster1's gateway re-points at the honest key.
func checkPrivatePodUnreachable(ctx context.Context, t *testing.T, l *lab.Lab, victim xpod) {
	c1, c3 := l.Network.Clusters[0].Name, l.Network.Clusters[2].Name
	if victim.cluster != c1 {
		t.Fatalf("the victim pod %s is in %s, want %s", victim.name, victim.cluster, c1)
	}
	gw1, p1 := activeGatewayNode(ctx, t, l, c1)
	attacker, honest := activeGatewayNode(ctx, t, l, c3)
	hc1, err := netip.ParseAddr(p1.Spec.HealthCheckIP)
	if err != nil {
		t.Fatalf("%s's health-check address: %v", c1, err)
	}
	endpoint1, err := netip.ParseAddr(p1.Spec.Endpoint.PrivateIP)
	if err != nil {
		t.Fatalf("%s's endpoint: %v", c1, err)
	}
	local3, err := netip.ParseAddr(honest.Spec.Endpoint.PrivateIP)
	if err != nil {
		t.Fatalf("%s's endpoint: %v", c3, err)
	}
	// The rogue device's address: one of cluster3's own (its global CIDR's last but one), so
	// that cluster1's WireGuard takes packets from it as cluster3's and routes replies back.
	global3, err := netip.ParsePrefix(honest.Spec.Subnets[0])
	if err != nil {
		t.Fatalf("%s's advertised subnet: %v", c3, err)
	}
	src := lastButOne(global3)
	if src.String() == honest.Spec.HealthCheckIP {
		t.Fatalf("the rogue address %s is %s's health-check address", src, c3)
	}

	var rogue *wireguard.Driver
	tunneltest.In(t, attacker.Netns, func() {
		if rogue, err = wireguard.New(tunnel.Options{Device: "octorogue0"}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rogue.Close() })
		err = rogue.Apply(ctx, tunnel.Config{ListenPort: roguePort, LocalAddr: local3, Peers: []tunnel.Peer{{
			Cluster: c1, PublicKey: p1.Spec.PublicKey, Endpoint: netip.AddrPortFrom(endpoint1, uint16(p1.Spec.Endpoint.Port)),
			Subnets: []netip.Prefix{netip.PrefixFrom(victim.ip, 32), netip.PrefixFrom(hc1, 32)},
		}}})
		if err != nil {
			t.Fatal(err)
		}
	})
	tunneltest.Run(t, "ip", "-n", attacker.Netns, "addr", "add", netip.PrefixFrom(src, 32).String(), "dev", "octorogue0")

	// The attacker holds cluster3's hub credential, as its agents do.
	cred, err := hubaccess.LoadCredential(ctx, kubeClient(t, l.Env.Cluster(c3).Kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	asC3, err := client.New(cred.RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	setPeer := func(ctx context.Context, key string, port int32) error {
		p := &v1alpha1.Peer{}
		if err := asC3.Get(ctx, client.ObjectKeyFromObject(honest), p); err != nil {
			return err
		}
		p.Spec.PublicKey, p.Spec.Endpoint.Port = key, port
		return asC3.Update(ctx, p)
	}
	t.Cleanup(func() {
		if err := setPeer(context.Background(), honest.Spec.PublicKey, honest.Spec.Endpoint.Port); err != nil {
			t.Errorf("restoring %s's Peer: %v", c3, err)
		}
	})
	if err := setPeer(ctx, rogue.PublicKey(), roguePort); err != nil {
		t.Fatalf("%s's credential pointing its Peer at the rogue device: %v", c3, err)
	}

	if err := tunneltest.Ping(attacker.Netns, hc1, time.Minute); err != nil {
		t.Fatalf("the rogue device of %s cannot ping %s's health-check address %s: %s never took the rogue key: %v", c3, c1, hc1, c1, err)
	}
	before := ingressCounter(t, gw1.Netns, "not advertised")
	dst := netip.AddrPortFrom(victim.ip, 8080)
	var dialErr error
	tunneltest.In(t, attacker.Netns, func() {
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
		var c net.Conn
		if c, dialErr = d.DialContext(ctx, "tcp", dst.String()); dialErr == nil {
			_ = c.Close()
		}
	})
	if dialErr == nil {
		t.Fatalf("%s's rogue device at %s connected to %s's private pod %s at %s", c3, src, c1, victim.name, dst)
	}
	after := ingressCounter(t, gw1.Netns, "not advertised")
	if before < 0 || after <= before {
		t.Errorf("%s's ingress filter counted %d then %d not-advertised drops, want an increase", gw1.Name, before, after)
	}
	t.Logf("%s's rogue device: echo to %s answered, %s's private pod %s refused (%v); not-advertised drops %d -> %d", c3, hc1, c1, dst, dialErr, before, after)
}

// lastButOne is the address before p's last.
func lastButOne(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As16()
	host := 128 - p.Bits()
	if p.Addr().Is4() {
		host = 32 - p.Bits()
	}
	for i := 15; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		a[i] |= byte(1<<n - 1)
		host -= n
	}
	a[15] &^= 1
	addr := netip.AddrFrom16(a)
	if p.Addr().Is4() {
		return addr.Unmap()
	}
	return addr
}
