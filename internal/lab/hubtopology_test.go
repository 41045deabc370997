package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
)

// TestHubTopology runs a lab of a hub and three clusters joined with the hub topology, over
// wireguard (the hub topology over vxlan, every gateway the hub's included, is
// TestGlobalnetMixedHubTopology's), with cluster1's and cluster2's gateways forbidden to
// exchange a single packet on the underlay (an nftables drop in each gateway node), so that
// everything between them must go through the hub's gateway. It checks TCP (client address
// preserved) and ICMP pod → pod both ways, the Peers' statuses (each cluster sees the others
// via the hub, the hub sees them all and carries bytes), what a member gateway's underlay
// carries (only the tunnel's UDP; for wireguard never the plaintext), `octopus show
// connections`, a request to an exported Service by its clusterset.local name, that
// cluster2's hub credential cannot hijack routes (checkRouteHijack, with cluster1, cluster3
// and the hub's gateway refusing), recovery with a new key when the hub's active gateway is
// killed and restarted, and a fast takeover by the standby hub gateway when the active one
// dies for good. The hub's gateways are the hub chart's pods on the hub cluster's own real
// nodes. The third cluster is there for the hijack check, which would otherwise need a lab of
// its own.
func TestHubTopology(t *testing.T) {
	forEachBackend(t, hubTopology, "wireguard")
}

func hubTopology(t *testing.T, backend, binDir string, bins map[string]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	l, dir := startLab(ctx, t, lab.Options{
		Clusters: 3, NodesPerCluster: 2, BinDir: binDir, Topology: v1alpha1.TopologyHub, HubGateways: 2,
		AgentBinary: bins["octopus-agent"],
		Backends: map[string]string{lab.HubName: backend, lab.ClusterName(1): backend, lab.ClusterName(2): backend,
			lab.ClusterName(3): backend},
	})
	c1, c2, c3 := l.Network.Clusters[0], l.Network.Clusters[1], l.Network.Clusters[2]
	isolate(t, c1.Nodes[0].Netns, c2.Nodes[0].UnderlayAddr.Addr().String())
	isolate(t, c2.Nodes[0].Netns, c1.Nodes[0].UnderlayAddr.Addr().String())

	pods := startEchoPods(ctx, t, l)
	for _, pair := range [][2]string{{c1.Name, c2.Name}, {c2.Name, c1.Name}} {
		for _, src := range pods[pair[0]] {
			for _, dst := range pods[pair[1]] {
				checkTCP(t, "pod -> pod through the hub", src, dst, 90*time.Second)
				checkICMP(t, src, dst)
			}
		}
	}
	// What leaves a member gateway for the hub is the tunnel's UDP alone.
	checkUnderlay(t, c1, pods[c2.Name][1], pods[c1.Name][1], backend == "wireguard")

	hubc := kubeClient(t, l.Env.Cluster(lab.HubName).Kubeconfig)
	connections := func(id string) (map[string]v1alpha1.PeerConnection, error) {
		p := &v1alpha1.Peer{}
		if err := hubc.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: id}, p); err != nil {
			return nil, err
		}
		out := map[string]v1alpha1.PeerConnection{}
		for _, c := range p.Status.Connections {
			out[c.ClusterID] = c
		}
		return out, nil
	}
	for _, pair := range [][2]string{{c1.Name, c2.Name}, {c2.Name, c1.Name}} {
		waitFor(t, 30*time.Second, pair[0]+" to report "+pair[1]+" connected via the hub", func() error {
			conns, err := connections(pair[0])
			if err != nil {
				return err
			}
			other, hubConn := conns[pair[1]], conns[v1alpha1.HubPeerName]
			// Every other member and the hub.
			if len(conns) != len(l.Members) || other.Via != v1alpha1.HubPeerName || other.State != v1alpha1.ConnectionConnected || other.RTT.Max.Duration == 0 ||
				hubConn.State != v1alpha1.ConnectionConnected || hubConn.Via != "" {
				return fmt.Errorf("connections %+v", conns)
			}
			return nil
		})
	}
	waitFor(t, 30*time.Second, "the hub's gateway to report both clusters connected, carrying traffic", func() error {
		conns, err := connections(v1alpha1.HubPeerName)
		if err != nil {
			return err
		}
		for _, id := range []string{c1.Name, c2.Name} {
			if c := conns[id]; c.State != v1alpha1.ConnectionConnected || c.RxBytes == 0 || c.TxBytes == 0 {
				return fmt.Errorf("hub -> %s: %+v", id, c)
			}
		}
		return nil
	})

	out, err := exec.Command(bins["octopus"], "show", "connections", "--kubeconfig", l.Env.Cluster(lab.HubName).Kubeconfig, "-o", "json").Output()
	if err != nil {
		t.Fatalf("octopus show connections: %v", err)
	}
	var conns []struct{ Cluster, Peer, Via, State string }
	if err := json.Unmarshal(out, &conns); err != nil {
		t.Fatalf("octopus show connections -o json: %v: %s", err, out)
	}
	want := fmt.Sprintf("[{%[1]s %[2]s hub Connected} {%[1]s %[3]s hub Connected} {%[1]s hub  Connected} "+
		"{%[2]s %[1]s hub Connected} {%[2]s %[3]s hub Connected} {%[2]s hub  Connected} "+
		"{%[3]s %[1]s hub Connected} {%[3]s %[2]s hub Connected} {%[3]s hub  Connected} "+
		"{hub %[1]s  Connected} {hub %[2]s  Connected} {hub %[3]s  Connected}]", c1.Name, c2.Name, c3.Name)
	if got := fmt.Sprint(conns); got != want {
		t.Fatalf("octopus show connections: %s, want %s", got, want)
	}

	report, err := l.Demo(ctx)
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if !strings.HasPrefix(report.CrossClusterReply, "cluster="+c1.Name+" ") || len(report.ImportIPs) == 0 || report.DNSAnswer != report.ImportIPs[0] {
		t.Fatalf("toolbox in %s -> http://%s/ (%s, ClusterSet IPs %v): %q, want an answer from %s",
			c2.Name, report.DNSName, report.DNSAnswer, report.ImportIPs, report.CrossClusterReply, c1.Name)
	}
	t.Logf("pod -> DNS name through the hub: %s = %s: %s", report.DNSName, report.DNSAnswer, report.CrossClusterReply)

	// Restorable: it puts cluster2's Peer back as it was.
	t.Run("route hijack refused", func(t *testing.T) { checkRouteHijack(ctx, t, l, pods, v1alpha1.HubPeerName) })

	// The hub's active gateway dies; its supervisor restarts it, or the standby takes over
	// (a new key for wireguard either way), the clusters re-point, and traffic recovers with
	// nobody doing anything.
	hubPeer := func() v1alpha1.PeerSpec {
		p := &v1alpha1.Peer{}
		if err := hubc.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: v1alpha1.HubPeerName}, p); err != nil {
			return v1alpha1.PeerSpec{}
		}
		return p.Spec
	}
	old := hubPeer()
	killed := time.Now()
	if err := l.KillGateway(ctx, old.Hostname); err != nil {
		t.Fatal(err)
	}
	if backend == "wireguard" {
		waitFor(t, 60*time.Second, "a new key in the hub's Peer", func() error {
			if k := hubPeer().PublicKey; k == old.PublicKey || k == "" {
				return fmt.Errorf("key still %q", k)
			}
			return nil
		})
	}
	checkTCP(t, "after the hub gateway's restart", pods[c2.Name][1], pods[c1.Name][1], 60*time.Second)
	t.Logf("connectivity recovered %.1fs after the hub's gateway was killed", time.Since(killed).Seconds())

	// The active one dies for good: the standby, which finds it at the hub Peer's endpoint
	// address, takes over long before the lab's 6 s Lease would expire.
	hubLease := func() (*coordinationv1.Lease, error) {
		lease := &coordinationv1.Lease{}
		return lease, hubc.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: v1alpha1.HubGatewayLeaseName}, lease)
	}
	var active, standby labnet.HubGatewayNet
	waitFor(t, 30*time.Second, "an active hub gateway that has published the hub's Peer", func() error {
		lease, err := hubLease()
		if err != nil {
			return err
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		for _, h := range l.Network.HubGateways {
			if h.Name == holder {
				active = h
			} else {
				standby = h
			}
		}
		if p := hubPeer(); active.Name == "" || p.Hostname != holder || p.Endpoint.PrivateIP != active.UnderlayAddr.Addr().String() {
			return fmt.Errorf("Lease holder %q, hub Peer %s at %s", holder, p.Hostname, p.Endpoint.PrivateIP)
		}
		return nil
	})
	stopped := time.Now()
	if err := l.StopGateway(ctx, active.Name); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, standby.Name+" to take the hub gateway's Lease over", func() error {
		lease, err := hubLease()
		if err != nil {
			return err
		}
		if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h != standby.Name || lease.Spec.AcquireTime == nil {
			return fmt.Errorf("held by %q", h)
		}
		// The lab's processes share one clock: acquireTime dates the takeover.
		took := lease.Spec.AcquireTime.Sub(stopped)
		t.Logf("%s took the hub gateway's Lease %.2fs after %s was killed", standby.Name, took.Seconds(), active.Name)
		// A fast takeover takes ~1-2 s; one that waits for the Lease to expire takes a whole
		// Lease duration, which is what the test tells apart.
		if took >= lab.GatewayTimings.LeaseDuration {
			t.Errorf("the takeover took %s, not less than the Lease duration %s: the standby waited for the Lease to expire", took, lab.GatewayTimings.LeaseDuration)
			for _, h := range l.Network.HubGateways {
				logTail(t, dir, lab.GatewayProcessName(h.Name), 30)
			}
		}
		return nil
	})
	waitFor(t, 60*time.Second, "the hub's Peer to name "+standby.Name, func() error {
		if p := hubPeer(); p.Hostname != standby.Name || p.Endpoint.PrivateIP != standby.UnderlayAddr.Addr().String() {
			return fmt.Errorf("hub Peer %s at %s", p.Hostname, p.Endpoint.PrivateIP)
		}
		return nil
	})
	checkTCP(t, "after the standby hub gateway took over", pods[c2.Name][1], pods[c1.Name][1], 60*time.Second)
	t.Logf("connectivity recovered %.1fs after the active hub gateway was killed for good", time.Since(stopped).Seconds())
}

// isolate drops, in a gateway node's namespace, every packet to and from another gateway's
// underlay address: with it, traffic between the two clusters can only pass the hub.
func isolate(t *testing.T, netns, other string) {
	t.Helper()
	rules := fmt.Sprintf(`table inet octopus-test-isolation {
	chain out { type filter hook output priority 0; ip daddr %[1]s counter drop; }
	chain in { type filter hook input priority 0; ip saddr %[1]s counter drop; }
}`, other)
	cmd := exec.Command("ip", "netns", "exec", netns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("isolating %s from %s: %v: %s", netns, other, err, out)
	}
}
