package gateway

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/routeagent"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func TestSecondaryBlock(t *testing.T) {
	cluster := func(a v1alpha1.Addressing, cidr string) *v1alpha1.Cluster {
		return &v1alpha1.Cluster{Spec: v1alpha1.ClusterSpec{ClusterID: "a", Addressing: a, SecondaryCIDR: cidr}}
	}
	tests := []struct {
		name      string
		c         *v1alpha1.Cluster
		secondary bool
		block, hc string
		wantErr   bool
	}{
		{name: "secondary: the block and its first host", c: cluster(v1alpha1.AddressingSecondary, "10.113.0.0/16"), secondary: true, block: "10.113.0.0/16", hc: "10.113.0.1"},
		{name: "direct has a block but does not use it", c: cluster(v1alpha1.AddressingDirect, "10.113.0.0/16")},
		{name: "unset is direct", c: cluster("", "10.113.0.0/16")},
		{name: "globalnet", c: cluster(v1alpha1.AddressingGlobalnet, "10.113.0.0/16")},
		{name: "not a CIDR", c: cluster(v1alpha1.AddressingSecondary, "10.113.0.0"), wantErr: true},
		{name: "missing", c: cluster(v1alpha1.AddressingSecondary, ""), wantErr: true},
		{name: "host bits", c: cluster(v1alpha1.AddressingSecondary, "10.113.0.1/16"), wantErr: true},
		{name: "IPv6", c: cluster(v1alpha1.AddressingSecondary, "fd00::/64"), wantErr: true},
		{name: "too small for a gateway and a pod", c: cluster(v1alpha1.AddressingSecondary, "10.113.0.0/31"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			block, hc, ok, err := secondaryBlock(tt.c)
			if (err != nil) != tt.wantErr || ok != tt.secondary {
				t.Fatalf("secondary %v, error %v", ok, err)
			}
			if !ok {
				return
			}
			if block != netip.MustParsePrefix(tt.block) || hc != netip.MustParseAddr(tt.hc) {
				t.Fatalf("block %s, health check %s; want %s, %s", block, hc, tt.block, tt.hc)
			}
		})
	}
}

// TestSecondaryGateway runs real gateways (fake tunnel drivers) of two secondary clusters with
// the same pod and service CIDRs against a real hub: each Peer advertises its secondary block
// alone with the block's first host (the gateway port's address) as health-check address, put
// on the tunnel device; each accepts the other and hands the other's block to its driver;
// nothing is mirrored for the route agents (the pods route the blocks over net1); and a direct
// cluster's Peer (north, made on the hub by hand) is refused by both as an addressing mismatch,
// which the Peer's status and condition say, while it does not refuse them less: a direct
// gateway's Compute is TestComputeSecondary's.
func TestSecondaryGateway(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east", "west")
	ctx := t.Context()
	info, err := hub.Deploy(ctx, env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podCIDR := env.Cluster("east").PodCIDR.String() // the same in both: an overlapping fleet
	blocks := map[string]netip.Prefix{}
	for _, name := range []string{"east", "west"} {
		joined, err := cluster.Join(ctx, env.Cluster(name).RESTConfig(), cluster.JoinOptions{
			BrokerInfo: info, ClusterID: name, PodCIDRs: []string{podCIDR}, Addressing: v1alpha1.AddressingSecondary,
		})
		if err != nil {
			t.Fatalf("joining %s: %v", name, err)
		}
		blocks[name] = netip.MustParsePrefix(joined.Cluster.Spec.SecondaryCIDR)
	}
	if blocks["east"] == blocks["west"] {
		t.Fatalf("both clusters got the secondary block %s", blocks["east"])
	}
	hubc := newClient(t, env.Cluster("hub").RESTConfig())
	eastCfg, westCfg := env.Cluster("east").RESTConfig(), env.Cluster("west").RESTConfig()
	east, west := newClient(t, eastCfg), newClient(t, westCfg)
	testenv.AddNode(t, east, "east-gw1", "198.51.100.2", "10.101.0.0/24")
	testenv.AddNode(t, west, "west-gw1", "198.51.100.18", "10.101.0.0/24")

	// North, a direct cluster, as its join and gateway would leave it on the hub.
	north := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "north", Namespace: info.Namespace}, Spec: v1alpha1.ClusterSpec{
		ClusterID: "north", PodCIDRs: []string{"10.50.0.0/16"}, ServiceCIDRs: []string{"10.51.0.0/16"}, Addressing: v1alpha1.AddressingDirect,
	}}
	northPeer := peer("north", keyC, "203.0.113.33", DefaultListenPort, "10.50.0.0/16", "10.51.0.0/16")
	northPeer.Namespace = info.Namespace
	for _, o := range []client.Object{north, &northPeer} {
		if err := hubc.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	gws := map[string]*runningGateway{
		"east": startGateway(t, eastCfg, "east-gw1", "203.0.113.1"),
		"west": startGateway(t, westCfg, "west-gw1", "203.0.113.17"),
	}
	members := map[string]client.Client{"east": east, "west": west}
	for id, other := range map[string]string{"east": "west", "west": "east"} {
		block, hc := blocks[id], blocks[id].Addr().Next()
		eventually(t, id+"'s Peer advertises its secondary block and its gateway port's address", func() error {
			p := &v1alpha1.Peer{}
			if err := hubc.Get(ctx, client.ObjectKey{Namespace: info.Namespace, Name: id}, p); err != nil {
				return err
			}
			if !slices.Equal(p.Spec.Subnets, []string{block.String()}) || p.Spec.HealthCheckIP != hc.String() {
				return fmt.Errorf("subnets %v (the primary CIDRs must stay private), health check %s; want [%s], %s", p.Spec.Subnets, p.Spec.HealthCheckIP, block, hc)
			}
			acc := meta.FindStatusCondition(p.Status.Conditions, ConditionPeersAccepted)
			if acc == nil || acc.Status != metav1.ConditionFalse || acc.Reason != ReasonAddressingMismatch {
				return fmt.Errorf("PeersAccepted %+v, want False %s (north is direct)", acc, ReasonAddressingMismatch)
			}
			var states []string
			for _, c := range p.Status.Connections {
				states = append(states, c.ClusterID+"="+string(c.State))
				if c.ClusterID == "north" && !strings.Contains(c.Message, "uses direct addressing") {
					return fmt.Errorf("north's connection says %q", c.Message)
				}
			}
			slices.Sort(states)
			want := []string{"north=Error", other + "=Connected"}
			slices.Sort(want)
			if !slices.Equal(states, want) {
				return fmt.Errorf("connections %v, want %v", states, want)
			}
			return nil
		})
		eventually(t, id+" hands "+other+"'s block to its driver", func() error {
			p, err := configPeer(gws[id].driver(), other)
			if err != nil {
				return err
			}
			if !slices.Equal(p.Subnets, []netip.Prefix{blocks[other]}) {
				return fmt.Errorf("subnets %v, want [%s]", p.Subnets, blocks[other])
			}
			return nil
		})
		eventually(t, id+" mirrors nothing for its route agents", func() error {
			cm := &corev1.ConfigMap{}
			if err := members[id].Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayConfigMapName}, cm); err != nil {
				return err
			}
			if s, ok := cm.Data[routeagent.SubnetsKey]; !ok || s != "" {
				return fmt.Errorf("%s = %q (present %v), want empty", routeagent.SubnetsKey, s, ok)
			}
			return nil
		})
		g := gws[id]
		g.mu.Lock()
		addrs := slices.Clone(g.addrs)
		g.mu.Unlock()
		if !slices.Contains(addrs, "og-test "+hc.String()) {
			t.Errorf("%s: health-check address %s not put on the device: %v", id, hc, addrs)
		}
		for _, a := range addrs {
			if !strings.HasSuffix(a, " "+hc.String()) {
				t.Errorf("%s put another address on the device: %s", id, a)
			}
		}
	}
}
