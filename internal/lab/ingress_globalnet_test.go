package lab_test

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
	"github.com/octopus-mcs/octopus/internal/lab"
)

// checkPrivatePodUnreachable: cluster1's active gateway (a compromised member's, which
// controls its own tunnel device) forces a connection to a private pod address of cluster2, a
// globalnet cluster, into its tunnel: it adds that address to cluster2's WireGuard peer and
// routes it to the device. The datagram reaches cluster2's gateway, whose ingress filter drops
// it as not advertised (only the global CIDR is), and the connection fails. Without the
// filter cluster2's gateway forwards it to the pod, bypassing "only exported services". It
// needs a wireguard globalnet lab with echo pods (testGlobalnet's); what was exported keeps
// working (testGlobalnet, run before with the filter in place).
func checkPrivatePodUnreachable(ctx context.Context, t *testing.T, l *lab.Lab) {
	c1, c2 := l.Members[0], l.Members[1]
	victim, vp := activeGatewayNode(ctx, t, l, c2)
	attacker, _ := activeGatewayNode(ctx, t, l, c1)
	var worker string
	for _, c := range l.Network.Clusters {
		for _, n := range c.Nodes {
			if c.Name == c2 && !n.Gateway {
				worker = n.Name
			}
		}
	}
	pod, err := clientset(t, l.Env.Cluster(c2).Kubeconfig).CoreV1().Pods("default").Get(ctx, "echo-"+worker, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s's echo pod on %s: %v", c2, worker, err)
	}
	podIP, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		t.Fatalf("%s's pod %s has no address: %v", c2, pod.Name, err)
	}
	dev := lab.GatewayDevice(c1)
	in := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"netns", "exec", attacker.Netns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s on %s: %v: %s", strings.Join(args, " "), attacker.Name, err, out)
		}
		return string(out)
	}
	var allowed string
	for _, line := range strings.Split(in("wg", "show", dev, "allowed-ips"), "\n") {
		if key, ips, ok := strings.Cut(line, "\t"); ok && key == vp.Spec.PublicKey {
			allowed = strings.ReplaceAll(strings.TrimSpace(ips), " ", ",")
		}
	}
	if allowed == "" {
		t.Fatalf("%s's device %s has no peer with %s's key %s", c1, dev, c2, vp.Spec.PublicKey)
	}
	target := netip.PrefixFrom(podIP, podIP.BitLen()).String()
	// The attacker's own node: what it may do to its device and routes, and undo. The
	// gateway's next resync would also restore the allowed IPs.
	in("wg", "set", dev, "peer", vp.Spec.PublicKey, "allowed-ips", allowed+","+target)
	in("ip", "route", "replace", target, "dev", dev)
	defer func() {
		_ = exec.Command("ip", "netns", "exec", attacker.Netns, "ip", "route", "del", target, "dev", dev).Run()
		_ = exec.Command("ip", "netns", "exec", attacker.Netns, "wg", "set", dev, "peer", vp.Spec.PublicKey, "allowed-ips", allowed).Run()
	}()

	before := ingressCounter(t, victim.Netns, "not advertised")
	dst := netip.AddrPortFrom(podIP, 8080)
	var dialErr error
	tunneltest.In(t, attacker.Netns, func() {
		var c net.Conn
		if c, dialErr = net.DialTimeout("tcp", dst.String(), 3*time.Second); dialErr == nil {
			_ = c.Close()
		}
	})
	if dialErr == nil {
		t.Fatalf("%s's gateway %s connected to %s's private pod address %s through the tunnel", c1, attacker.Name, c2, dst)
	}
	after := ingressCounter(t, victim.Netns, "not advertised")
	if before < 0 || after <= before {
		t.Fatalf("%s's ingress filter counted %d then %d not-advertised drops: the forced datagrams did not reach it, or passed", victim.Name, before, after)
	}
	t.Logf("%s's gateway forced %s into its tunnel: refused (%v); %s's not-advertised drops %d -> %d", c1, dst, dialErr, c2, before, after)
}
