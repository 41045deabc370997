package lab_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/gateway"
	"github.com/octopus-mcs/octopus/internal/globalnet"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestGlobalnetMixedHubTopology runs globalnet where TestOverlappingCIDRs (mesh, wireguard,
// globalnet only) does not: in the hub topology, over vxlan, in a mixed cluster set. Hub + 3
// clusters: cluster1 and cluster2 with identical pod and service CIDRs and globalnet
// addressing, cluster3 with CIDRs of its own and direct addressing; every gateway, the hub's
// too, on vxlan, and every cluster tunnels only to the hub's gateway. It checks that each
// Peer advertises what its addressing says (a global CIDR, or the pod and service CIDRs) and
// accepts the others; that an echo Service exported from globalnet cluster2 is reached by its
// global IP from every echo pod of globalnet cluster1 (TCP and UDP, the server seeing
// cluster1's egress range) and of direct cluster3 (the server seeing the pod's own address);
// that an echo Service exported from direct cluster3 is reached from cluster1 through its
// ClusterSet IP, the server seeing cluster1's egress range; and `octopus verify` between all
// three (pod to pod, ClusterSet IP and DNS, every ordered pair).
func TestGlobalnetMixedHubTopology(t *testing.T) {
	testenv.LabNetwork(t)
	binDir := testenv.BinDir(t)
	bins := buildCommands(t, "octopus-agent", "octopus-echo", "octopus-dns", "octopus")
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	c1, c2, c3 := lab.ClusterName(1), lab.ClusterName(2), lab.ClusterName(3)
	backends := map[string]string{}
	for _, name := range []string{lab.HubName, c1, c2, c3} {
		backends[name] = string(v1alpha1.BackendVXLAN)
	}
	l, _ := startLab(ctx, t, lab.Options{
		Clusters: 3, BinDir: binDir, AgentBinary: bins["octopus-agent"],
		OverlappingCIDRs: true, DirectClusters: []string{c3}, Topology: v1alpha1.TopologyHub, Backends: backends,
	})
	if e1, e3 := l.Env.Cluster(c1), l.Env.Cluster(c3); e1.PodCIDR != l.Env.Cluster(c2).PodCIDR || e1.PodCIDR.Overlaps(e3.PodCIDR) {
		t.Fatalf("pod CIDRs %s, %s, %s: want cluster1's and cluster2's equal, cluster3's apart", e1.PodCIDR, l.Env.Cluster(c2).PodCIDR, e3.PodCIDR)
	}

	hubc := kubeClient(t, l.Env.Cluster(lab.HubName).Kubeconfig)
	clusters := map[string]*v1alpha1.Cluster{}
	for _, name := range l.Members {
		waitFor(t, 2*time.Minute, name+"'s Peer to advertise what its addressing says and accept the others", func() error {
			cl := &v1alpha1.Cluster{}
			if err := hubc.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: name}, cl); err != nil {
				return err
			}
			p := &v1alpha1.Peer{}
			if err := hubc.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: name}, p); err != nil {
				return err
			}
			want := []string{cl.Spec.GlobalCIDR}
			if name == c3 {
				want = append(slices.Clone(cl.Spec.PodCIDRs), cl.Spec.ServiceCIDRs...)
			}
			if got := slices.Sorted(slices.Values(p.Spec.Subnets)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
				return fmt.Errorf("addressing %s: Peer subnets %v, want %v", cl.Spec.Addressing, p.Spec.Subnets, want)
			}
			if p.Spec.Backend != v1alpha1.BackendVXLAN {
				return fmt.Errorf("Peer backend %q, want vxlan", p.Spec.Backend)
			}
			if cond := meta.FindStatusCondition(p.Status.Conditions, gateway.ConditionPeersAccepted); cond == nil || cond.Status != metav1.ConditionTrue {
				return fmt.Errorf("condition %s = %+v", gateway.ConditionPeersAccepted, cond)
			}
			clusters[name] = cl
			return nil
		})
	}
	if a := clusters[c3].Spec.Addressing; a != v1alpha1.AddressingDirect {
		t.Fatalf("%s joined with addressing %q, want direct", c3, a)
	}
	layout, err := globalnet.ClusterLayout(clusters[c1].Spec)
	if err != nil {
		t.Fatal(err)
	}

	pods := startEchoPods(ctx, t, l)
	svc := echoPodsService()
	mc1, mc2, mc3 := kubeClient(t, l.Env.Cluster(c1).Kubeconfig), kubeClient(t, l.Env.Cluster(c2).Kubeconfig), kubeClient(t, l.Env.Cluster(c3).Kubeconfig)
	for _, mc := range []client.Client{mc2, mc3} {
		for _, o := range []client.Object{svc.DeepCopy(), &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"}}} {
			if err := mc.Create(ctx, o); err != nil {
				t.Fatalf("creating %T: %v", o, err)
			}
		}
	}

	// Globalnet cluster2's export, by its global IP, from the other globalnet cluster and from
	// the direct one.
	ip := waitServiceGlobalIP(ctx, t, mc2, c2, netip.MustParsePrefix(clusters[c2].Spec.GlobalCIDR))
	for _, src := range pods[c1] {
		waitEchoSource(t, fmt.Sprintf("%s -> %s:80 (%s's echo by its global IP, through the hub)", src.name, ip, c2), src.netns,
			netip.AddrPortFrom(ip, 80), c2, layout.ClusterEgress.Contains, c1+"'s egress range "+layout.ClusterEgress.String())
		waitFor(t, 20*time.Second, fmt.Sprintf("UDP %s -> %s:9000", src.name, ip), func() error {
			return udpEcho(src.netns, netip.AddrPortFrom(ip, 9000))
		})
	}
	for _, src := range pods[c3] {
		waitEchoSource(t, fmt.Sprintf("%s (direct) -> %s:80 (%s's echo by its global IP)", src.name, ip, c2), src.netns,
			netip.AddrPortFrom(ip, 80), c2, func(a netip.Addr) bool { return a == src.ip }, "the direct cluster's pod address "+src.ip.String())
	}

	// Direct cluster3's export, through cluster1's ClusterSet IP: its imported endpoints are
	// cluster3's pod addresses, which cluster1's gateway reaches with its egress addresses.
	var setIP netip.Addr
	waitFor(t, 2*time.Minute, c1+" to import the echo service of "+c2+" and "+c3, func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := mc1.Get(ctx, client.ObjectKey{Namespace: "default", Name: "echo"}, si); err != nil {
			return err
		}
		if len(si.Spec.IPs) == 0 || len(si.Status.Clusters) != 2 {
			return fmt.Errorf("import IPs %v, clusters %v", si.Spec.IPs, si.Status.Clusters)
		}
		setIP = netip.MustParseAddr(si.Spec.IPs[0])
		return nil
	})
	seen := map[string]int{}
	src := pods[c1][0]
	waitFor(t, time.Minute, fmt.Sprintf("%s -> ClusterSet IP %s:80 answered by %s and %s, each seeing %s's egress range", src.name, setIP, c2, c3, c1), func() error {
		for range 10 {
			got, err := tryHTTPGet(src.netns, netip.AddrPortFrom(setIP, 80))
			if err != nil {
				return err
			}
			_, client, _ := strings.Cut(got, "client=")
			client, _, _ = strings.Cut(client, " ")
			if from, err := netip.ParseAddrPort(strings.TrimSpace(client)); err != nil || !layout.ClusterEgress.Contains(from.Addr()) {
				return fmt.Errorf("answer %q: the server saw client %q, want one of %s", got, client, layout.ClusterEgress)
			}
			cluster, _, _ := strings.Cut(strings.TrimPrefix(got, "cluster="), " ")
			seen[cluster]++
		}
		if seen[c2] == 0 || seen[c3] == 0 {
			return fmt.Errorf("answers by cluster %v", seen)
		}
		return nil
	})
	t.Logf("%s -> ClusterSet IP %s:80: answers by cluster %v", src.name, setIP, seen)

	verifyClusters(ctx, t, l, bins["octopus"], l.Members...)
	t.Run("forged vxlan dropped", func(t *testing.T) { checkForgedVXLANDropped(ctx, t, l, gateway.DefaultListenPort) })
}
