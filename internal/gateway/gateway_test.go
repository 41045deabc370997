package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/ipam"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/routeagent"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func init() {
	// The controller-runtime clients log through this; the gateways log through t.
	log.SetLogger(logr.Discard())
}

// runningGateway is one gateway process of the test.
type runningGateway struct {
	node   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's result, set before done is closed
	// metricsAddr is where the gateway serves /metrics.
	metricsAddr string

	mu      sync.Mutex
	drivers []*fakeDriver
	addrs   []string
	// nat is the globalnet NAT of the gateway's node, shared by its active terms.
	nat fakeNAT
	// ingress is the tunnel ingress filter of the gateway's node.
	ingress fakeIngress
}

func (g *runningGateway) driver() *fakeDriver {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.drivers) == 0 {
		return nil
	}
	return g.drivers[len(g.drivers)-1]
}

func (g *runningGateway) stop(t *testing.T) {
	t.Helper()
	g.cancel()
	select {
	case <-g.done:
		if g.err != nil {
			t.Fatalf("gateway on %s: %v", g.node, g.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("gateway on %s did not stop", g.node)
	}
}

// startGateway runs a gateway with fake driver and prober; mutate adjusts its Options.
func startGateway(t *testing.T, member *rest.Config, node string, endpoint string, mutate ...func(*Options)) *runningGateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g := &runningGateway{node: node, cancel: cancel, done: make(chan struct{})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.metricsAddr = l.Addr().String()
	o := Options{
		Member: member, NodeName: node, Backend: v1alpha1.BackendWireGuard, Device: "og-test",
		EndpointIP:    netip.MustParseAddr(endpoint),
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 300 * time.Millisecond,
		StatusInterval: 300 * time.Millisecond,
		NewDriver: func(backend string, _ tunnel.Options) (tunnel.Driver, error) {
			if backend != "wireguard" {
				return nil, fmt.Errorf("backend %s", backend)
			}
			d := newFakeDriver()
			g.mu.Lock()
			g.drivers = append(g.drivers, d)
			g.mu.Unlock()
			return d, nil
		},
		NewProber:        func() (Prober, error) { return &fakeProber{}, nil },
		NewNAT:           func() (NATWriter, error) { return &g.nat, nil },
		NewIngressFilter: func() (IngressWriter, error) { return &g.ingress, nil },
		MetricsListener:  l,
		AddressDevice: func(device string, addr netip.Addr) error {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.addrs = append(g.addrs, device+" "+addr.String())
			return nil
		},
		Log: testr.NewWithOptions(t, testr.Options{LogTimestamp: true}).WithValues("gateway", node),
	}
	for _, m := range mutate {
		m(&o)
	}
	go func() {
		defer close(g.done)
		g.err = Run(ctx, o)
	}()
	t.Cleanup(func() {
		cancel()
		<-g.done
	})
	return g
}

// eventually is testenv.Eventually with this package's timeout.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, what, f)
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// configPeer returns the driver's last configured peer for the cluster.
func configPeer(d *fakeDriver, id string) (tunnel.Peer, error) {
	if d == nil {
		return tunnel.Peer{}, errors.New("no driver created")
	}
	cfg, ok := d.last()
	if !ok {
		return tunnel.Peer{}, errors.New("nothing applied yet")
	}
	for _, p := range cfg.Peers {
		if p.Cluster == id {
			return p, nil
		}
	}
	return tunnel.Peer{}, fmt.Errorf("no peer %s in %+v", id, cfg.Peers)
}

// eastWest is the cluster set most gateway tests run on: a hub, and "east" and "west" joined
// to it with direct addressing and pod CIDRs of their own, with the Nodes of two gateways in
// east (east-gw1, east-gw2) and one in west (west-gw1).
type eastWest struct {
	env              *controlplane.Environment
	info             *hub.BrokerInfo
	hub, east, west  client.Client
	eastCfg, westCfg *rest.Config
}

func newEastWest(t *testing.T) eastWest {
	t.Helper()
	ctx := t.Context()
	env := testenv.ControlPlanes(t, "hub", "east", "west")
	info, err := hub.Deploy(ctx, env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"east", "west"} {
		if _, err := cluster.Join(ctx, env.Cluster(name).RESTConfig(), cluster.JoinOptions{
			BrokerInfo: info, ClusterID: name, PodCIDRs: []string{env.Cluster(name).PodCIDR.String()},
		}); err != nil {
			t.Fatalf("joining %s: %v", name, err)
		}
	}
	ew := eastWest{env: env, info: info, hub: newClient(t, env.Cluster("hub").RESTConfig()),
		eastCfg: env.Cluster("east").RESTConfig(), westCfg: env.Cluster("west").RESTConfig()}
	ew.east, ew.west = newClient(t, ew.eastCfg), newClient(t, ew.westCfg)
	testenv.AddNode(t, ew.east, "east-gw1", "198.51.100.2", "10.101.0.0/24")
	testenv.AddNode(t, ew.east, "east-gw2", "198.51.100.3", "10.101.1.0/24")
	testenv.AddNode(t, ew.west, "west-gw1", "198.51.100.18", "10.102.0.0/24")
	return ew
}

// TestGateway runs real gateways (fake tunnel drivers) against a real hub and two member
// clusters: peers published and meshed, standby and failover with a fresh key, status with
// connections, refusal of an overlapping Peer, and teardown when a Peer disappears.
func TestGateway(t *testing.T) {
	ew := newEastWest(t)
	ctx, env, info, hubc := t.Context(), ew.env, ew.info, ew.hub
	east, eastCfg, westCfg := ew.east, ew.eastCfg, ew.westCfg
	eastSubnets := []string{env.Cluster("east").PodCIDR.String(), env.Cluster("east").ServiceCIDR.String()}
	westSubnets := []string{env.Cluster("west").PodCIDR.String(), env.Cluster("west").ServiceCIDR.String()}
	ns := info.Namespace

	gw1 := startGateway(t, eastCfg, "east-gw1", "203.0.113.1")
	wgw := startGateway(t, westCfg, "west-gw1", "203.0.113.17")

	getPeer := func(id string) (*v1alpha1.Peer, error) {
		p := &v1alpha1.Peer{}
		return p, hubc.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, p)
	}
	// Both Peers are published with their drivers' keys and each gateway tunnels to the other.
	eventually(t, "east's Peer published", func() error {
		p, err := getPeer("east")
		if err != nil {
			return err
		}
		want := v1alpha1.PeerSpec{ClusterID: "east", Hostname: "east-gw1", Role: v1alpha1.PeerRoleMember, Topology: v1alpha1.TopologyMesh,
			Backend: v1alpha1.BackendWireGuard, PublicKey: gw1.driver().PublicKey(),
			Endpoint: v1alpha1.PeerEndpoint{PrivateIP: "203.0.113.1", Port: DefaultListenPort}, Subnets: sortedStrings(eastSubnets), HealthCheckIP: "10.101.0.1"}
		if p.Labels[v1alpha1.ClusterLabel] != "east" || fmt.Sprint(p.Spec) != fmt.Sprint(want) {
			return fmt.Errorf("peer %v %+v, want %+v", p.Labels, p.Spec, want)
		}
		return nil
	})
	eventually(t, "east tunnels to west", func() error {
		p, err := configPeer(gw1.driver(), "west")
		if err != nil {
			return err
		}
		if p.PublicKey != wgw.driver().PublicKey() || p.Endpoint.String() != "203.0.113.17:4500" || fmt.Sprint(p.Subnets) != fmt.Sprint(sortedStrings(westSubnets)) {
			return fmt.Errorf("peer %+v", p)
		}
		return nil
	})
	eventually(t, "east filters what comes out of its tunnel to its own subnets", func() error {
		s := gw1.ingress.last()
		if fmt.Sprint(s.Tunnels) != "[og-test]" || fmt.Sprint(sortedStrings(prefixStrings(s.Destinations))) != fmt.Sprint(sortedStrings(eastSubnets)) ||
			fmt.Sprint(s.HealthCheck) != "[10.101.0.1]" {
			return fmt.Errorf("ingress filter %+v", s)
		}
		return nil
	})
	eventually(t, "west tunnels to east", func() error {
		p, err := configPeer(wgw.driver(), "east")
		if err == nil && p.PublicKey != gw1.driver().PublicKey() {
			err = fmt.Errorf("key %s, want gw1's", p.PublicKey)
		}
		return err
	})
	eventually(t, "east mirrors west's subnets for its route agents", func() error {
		cm := &corev1.ConfigMap{}
		if err := east.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayConfigMapName}, cm); err != nil {
			return err
		}
		if got, want := cm.Data[routeagent.SubnetsKey], strings.Join(sortedStrings(westSubnets), "\n"); got != want {
			return fmt.Errorf("subnets %q, want %q", got, want)
		}
		return nil
	})
	eventually(t, "east reports a connected west", func() error {
		p, err := getPeer("east")
		if err != nil {
			return err
		}
		if len(p.Status.Connections) != 1 || p.Status.Connections[0].State != v1alpha1.ConnectionConnected ||
			p.Status.Connections[0].RTT.Max.Duration != 3*time.Millisecond || p.Status.Driver != "fake" ||
			!meta.IsStatusConditionTrue(p.Status.Conditions, ConditionReady) {
			return fmt.Errorf("status %+v", p.Status)
		}
		return nil
	})
	// The metrics say the same as the status, with the driver's byte counters.
	d1 := gw1.driver()
	d1.mu.Lock()
	d1.stats = []tunnel.PeerStats{{Cluster: "west", RxBytes: 1234, TxBytes: 5678}}
	d1.mu.Unlock()
	eventually(t, "east's metrics show west connected", func() error {
		return wantSeries(t, gw1.metricsAddr, map[string]float64{
			`octopus_gateway_active`: 1,
			`octopus_gateway_connection_state{backend="wireguard",cluster="west",state="Connected"}`:  1,
			`octopus_gateway_connection_state{backend="wireguard",cluster="west",state="Connecting"}`: 0,
			`octopus_gateway_connection_rtt_seconds{backend="wireguard",cluster="west",stat="max"}`:   0.003,
			`octopus_gateway_connection_rtt_seconds{backend="wireguard",cluster="west",stat="min"}`:   0.001,
			`octopus_gateway_connection_loss_ratio{backend="wireguard",cluster="west"}`:               0,
			`octopus_gateway_connection_rx_bytes_total{backend="wireguard",cluster="west"}`:           1234,
			`octopus_gateway_connection_tx_bytes_total{backend="wireguard",cluster="west"}`:           5678,
			`octopus_gateway_peers{result="accepted"}`:                                                1,
			`octopus_gateway_peers{result="refused"}`:                                                 0,
		}, nil)
	})
	// Its controllers' reconcile metrics are served too (controller-runtime's registry).
	eventually(t, "east's metrics show its controllers' reconciles", func() error {
		body, err := testenv.Metrics(gw1.metricsAddr)
		if err != nil {
			return err
		}
		if !bytes.Contains(body, []byte(`controller_runtime_reconcile_total{controller="gateway"`)) {
			return fmt.Errorf("no controller_runtime_reconcile_total of the gateway's controllers in\n%s", body)
		}
		return nil
	})
	gw1.mu.Lock()
	if !slices.Contains(gw1.addrs, "og-test 10.101.0.1") {
		t.Errorf("health-check address not put on the device: %v", gw1.addrs)
	}
	gw1.mu.Unlock()

	// A standby waits while gw1 holds the Lease.
	gw2 := startGateway(t, eastCfg, "east-gw2", "203.0.113.2")
	time.Sleep(2 * time.Second)
	if gw2.driver() != nil {
		t.Fatal("the standby created a tunnel driver while another gateway is active")
	}
	eventually(t, "the standby's metrics say it stands by", func() error {
		return wantSeries(t, gw2.metricsAddr, map[string]float64{`octopus_gateway_active`: 0}, []string{`cluster=`, `octopus_gateway_peers`})
	})

	// A Peer overlapping east is refused with a condition; the tunnel to west stays. Its
	// cluster is registered with the overlapping CIDR (join would refuse it; an admin can
	// write it), so that it is the overlap that refuses it.
	registerCluster := func(id, podCIDR, serviceCIDR string) *v1alpha1.Cluster {
		t.Helper()
		c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns, Labels: map[string]string{v1alpha1.ClusterLabel: id}},
			Spec: v1alpha1.ClusterSpec{ClusterID: id, PodCIDRs: []string{podCIDR}, ServiceCIDRs: []string{serviceCIDR}}}
		if err := hubc.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	badCluster := registerCluster("bad", "10.101.128.0/17", "10.201.0.0/16")
	bad := &v1alpha1.Peer{
		ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns, Labels: map[string]string{v1alpha1.ClusterLabel: "bad"}},
		Spec: v1alpha1.PeerSpec{ClusterID: "bad", Hostname: "x", Backend: v1alpha1.BackendWireGuard, PublicKey: newFakeDriver().PublicKey(),
			Endpoint: v1alpha1.PeerEndpoint{PrivateIP: "203.0.113.50", Port: 4500}, Subnets: []string{"10.101.128.0/17"}},
	}
	if err := hubc.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the overlapping Peer is refused", func() error {
		p, err := getPeer("east")
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, ConditionPeersAccepted)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonOverlappingSubnets || !strings.Contains(c.Message, "10.101.128.0/17 overlaps") {
			return fmt.Errorf("condition %+v", c)
		}
		if _, err := configPeer(gw1.driver(), "bad"); err == nil {
			return errors.New("a tunnel to the overlapping Peer was configured")
		}
		_, err = configPeer(gw1.driver(), "west")
		return err
	})
	eventually(t, "east's metrics count the refused Peer", func() error {
		return wantSeries(t, gw1.metricsAddr, map[string]float64{
			`octopus_gateway_peers{result="accepted"}`:                                               1,
			`octopus_gateway_peers{result="refused"}`:                                                1,
			`octopus_gateway_connection_state{backend="wireguard",cluster="bad",state="Error"}`:      1,
			`octopus_gateway_connection_state{backend="wireguard",cluster="west",state="Connected"}`: 1,
		}, nil)
	})
	if err := hubc.Delete(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if err := hubc.Delete(ctx, badCluster); err != nil {
		t.Fatal(err)
	}

	// Advertised = allocated: a rogue cluster's Peer advertising west's pod CIDR and the
	// metadata address beside its own CIDR gets a tunnel for its own CIDR only; the refused
	// prefixes are named in east's condition and never reach east's route agents; west keeps
	// its subnets. Once its Cluster is gone (revoked), the rogue loses its tunnel.
	rogueCluster := registerCluster("rogue", "10.150.0.0/16", "10.151.0.0/16")
	westPod := env.Cluster("west").PodCIDR.String()
	rogue := &v1alpha1.Peer{
		ObjectMeta: metav1.ObjectMeta{Name: "rogue", Namespace: ns, Labels: map[string]string{v1alpha1.ClusterLabel: "rogue"}},
		Spec: v1alpha1.PeerSpec{ClusterID: "rogue", Hostname: "x", Backend: v1alpha1.BackendWireGuard, PublicKey: newFakeDriver().PublicKey(),
			Endpoint: v1alpha1.PeerEndpoint{PrivateIP: "203.0.113.60", Port: 4500}, Subnets: []string{"10.150.0.0/16", westPod, "169.254.169.254/32"}},
	}
	if err := hubc.Create(ctx, rogue); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the rogue's unallocated prefixes are withheld and named", func() error {
		p, err := getPeer("east")
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, ConditionSubnetsAccepted)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonSubnetsNotAllocated ||
			!strings.Contains(c.Message, westPod) || !strings.Contains(c.Message, "169.254.169.254/32") || !strings.Contains(c.Message, "cluster rogue") {
			return fmt.Errorf("condition %+v", c)
		}
		rp, err := configPeer(gw1.driver(), "rogue")
		if err != nil {
			return err
		}
		if fmt.Sprint(rp.Subnets) != "[10.150.0.0/16]" {
			return fmt.Errorf("the rogue's tunnel carries %v", rp.Subnets)
		}
		wp, err := configPeer(gw1.driver(), "west")
		if err == nil && fmt.Sprint(wp.Subnets) != fmt.Sprint(sortedStrings(westSubnets)) {
			err = fmt.Errorf("west's tunnel carries %v", wp.Subnets)
		}
		return err
	})
	eventually(t, "east's route agents get the rogue's own CIDR only", func() error {
		cm := &corev1.ConfigMap{}
		if err := east.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayConfigMapName}, cm); err != nil {
			return err
		}
		if got, want := cm.Data[routeagent.SubnetsKey], strings.Join(sortedStrings(append([]string{"10.150.0.0/16"}, westSubnets...)), "\n"); got != want {
			return fmt.Errorf("subnets %q, want %q", got, want)
		}
		return nil
	})
	if err := hubc.Delete(ctx, rogueCluster); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the revoked rogue loses its tunnel", func() error {
		if _, err := configPeer(gw1.driver(), "rogue"); err == nil {
			return errors.New("east still tunnels to the rogue, whose Cluster is gone")
		}
		_, err := configPeer(gw1.driver(), "west")
		return err
	})
	if err := hubc.Delete(ctx, rogue); err != nil {
		t.Fatal(err)
	}

	// Failover: gw1 stops (releasing the Lease), gw2 takes over with a new key, west re-points.
	oldKey := gw1.driver().PublicKey()
	gw1.stop(t)
	if !gw1.driver().isClosed() {
		t.Error("gw1's driver was not closed when it stopped being active")
	}
	eventually(t, "gw2 takes over and republishes east's Peer with a fresh key", func() error {
		p, err := getPeer("east")
		if err != nil {
			return err
		}
		if d := gw2.driver(); d == nil || p.Spec.PublicKey != d.PublicKey() || p.Spec.PublicKey == oldKey || p.Spec.Hostname != "east-gw2" ||
			p.Spec.Endpoint.PrivateIP != "203.0.113.2" || p.Spec.HealthCheckIP != "10.101.1.1" {
			return fmt.Errorf("peer spec %+v", p.Spec)
		}
		return nil
	})
	eventually(t, "west re-points to gw2", func() error {
		p, err := configPeer(wgw.driver(), "east")
		if err == nil && (p.PublicKey != gw2.driver().PublicKey() || p.Endpoint.String() != "203.0.113.2:4500") {
			err = fmt.Errorf("peer %+v", p)
		}
		return err
	})
	eventually(t, "gw2's metrics show west connected", func() error {
		return wantSeries(t, gw2.metricsAddr, map[string]float64{
			`octopus_gateway_active`: 1,
			`octopus_gateway_connection_state{backend="wireguard",cluster="west",state="Connected"}`: 1,
		}, nil)
	})
	lease := &coordinationv1.Lease{}
	if err := east.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayLeaseName}, lease); err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "east-gw2" {
		t.Fatalf("lease holder %v, want east-gw2", lease.Spec.HolderIdentity)
	}

	// West goes away (its gateway stops, its Peer is deleted as `octopus leave` does): east
	// drops the tunnel and withdraws the subnets from its route agents.
	wgw.stop(t)
	p, err := getPeer("west")
	if err != nil {
		t.Fatal(err)
	}
	if err := hubc.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, "east tears the tunnel to west down", func() error {
		cfg, ok := gw2.driver().last()
		if !ok || len(cfg.Peers) != 0 {
			return fmt.Errorf("config %+v", cfg)
		}
		cm := &corev1.ConfigMap{}
		if err := east.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayConfigMapName}, cm); err != nil {
			return err
		}
		if s := cm.Data[routeagent.SubnetsKey]; s != "" {
			return fmt.Errorf("route agents still get %q", s)
		}
		return nil
	})
	eventually(t, "the removed Peer's series are gone from the new active gateway's metrics", func() error {
		return wantSeries(t, gw2.metricsAddr, map[string]float64{
			`octopus_gateway_active`:                   1,
			`octopus_gateway_peers{result="accepted"}`: 0,
			`octopus_gateway_peers{result="refused"}`:  0,
		}, []string{`cluster=`})
	})
	gw2.stop(t)
}

func sortedStrings(ss []string) []string {
	var ps []netip.Prefix
	for _, s := range ss {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	var out []string
	for _, p := range ipam.SortPrefixes(ps) {
		out = append(out, p.String())
	}
	return out
}

// wantSeries scrapes addr and checks that every series of want has its value and that no
// series contains any of absent.
func wantSeries(t *testing.T, addr string, want map[string]float64, absent []string) error {
	t.Helper()
	got, err := scrape(t, addr)
	if err != nil {
		return err
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return fmt.Errorf("%s = %v (present %t), want %v; all: %v", k, g, ok, v, got)
		}
	}
	for k := range got {
		for _, a := range absent {
			if strings.Contains(k, a) {
				return fmt.Errorf("series %s should be gone; all: %v", k, got)
			}
		}
	}
	return nil
}
