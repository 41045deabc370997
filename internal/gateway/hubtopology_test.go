package gateway

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/progress"
	"github.com/octopus-mcs/octopus/internal/routeagent"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestHubTopology runs the hub's gateway (with the credential hub deploy provides for it), a
// member joined with the hub topology and a mesh member against real API servers, with fake
// drivers: the hub member tunnels only to the hub, whose tunnel carries the other member's
// subnets; the mesh member reaches it through the hub too; the hub tunnels to both. Without
// the hub's gateway the hub member's peers are refused, naming the fix. Cluster credentials
// cannot publish a hub-role Peer, and the hub gateway's credential cannot touch Clusters or a
// member's Peer.
func TestHubTopology(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east", "west")
	ctx := t.Context()
	hubCfg := env.Cluster("hub").RESTConfig()
	info, err := hub.Deploy(ctx, hubCfg, hub.DeployOptions{})
	if err != nil {
		t.Fatal(err)
	}
	topology := map[string]v1alpha1.Topology{"east": v1alpha1.TopologyHub, "west": v1alpha1.TopologyMesh}
	for _, name := range []string{"east", "west"} {
		var out strings.Builder
		if _, err := cluster.Join(ctx, env.Cluster(name).RESTConfig(), cluster.JoinOptions{
			BrokerInfo: info, ClusterID: name, PodCIDRs: []string{env.Cluster(name).PodCIDR.String()}, Topology: topology[name],
			Progress: &progress.Reporter{W: &out},
		}); err != nil {
			t.Fatalf("joining %s: %v", name, err)
		}
		// The hub's gateway is not running yet: the hub-topology join says so.
		if warned := strings.Contains(out.String(), "No hub gateway yet"); warned != (topology[name] == v1alpha1.TopologyHub) {
			t.Errorf("joining %s (topology %s) printed:\n%s\nwant the missing hub gateway reported for the hub topology only", name, topology[name], out.String())
		}
	}
	hubc := newClient(t, hubCfg)
	ns := info.Namespace
	eastCfg, westCfg := env.Cluster("east").RESTConfig(), env.Cluster("west").RESTConfig()
	east, west := newClient(t, eastCfg), newClient(t, westCfg)
	testenv.AddNode(t, east, "east-gw1", "198.51.100.2", "10.101.0.0/24")
	testenv.AddNode(t, west, "west-gw1", "198.51.100.18", "10.102.0.0/24")
	eastSubnets := sortedStrings([]string{env.Cluster("east").PodCIDR.String(), env.Cluster("east").ServiceCIDR.String()})
	westSubnets := sortedStrings([]string{env.Cluster("west").PodCIDR.String(), env.Cluster("west").ServiceCIDR.String()})
	const hubHC = "10.100.0.1"

	gwCfg, err := hub.GatewayConfig(ctx, hubCfg, ns, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hgw := startGateway(t, gwCfg, "hub-gw1", "203.0.113.250", func(o *Options) {
		o.Role, o.HubNamespace, o.HealthCheckIP = v1alpha1.PeerRoleHub, ns, netip.MustParseAddr(hubHC)
	})
	egw := startGateway(t, eastCfg, "east-gw1", "203.0.113.1")
	wgw := startGateway(t, westCfg, "west-gw1", "203.0.113.17")

	getPeer := func(id string) (*v1alpha1.Peer, error) {
		p := &v1alpha1.Peer{}
		return p, hubc.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, p)
	}
	eventually(t, "the hub's Peer published", func() error {
		p, err := getPeer(v1alpha1.HubPeerName)
		if err != nil {
			return err
		}
		// Its topology is hub, not the CRD's default mesh: `kubectl get peers` shows what it is.
		if p.Spec.Role != v1alpha1.PeerRoleHub || p.Spec.Topology != v1alpha1.TopologyHub || p.Spec.PublicKey != hgw.driver().PublicKey() || fmt.Sprint(p.Spec.Subnets) != "["+hubHC+"/32]" ||
			p.Spec.HealthCheckIP != hubHC || p.Labels[v1alpha1.ClusterLabel] != v1alpha1.HubPeerName {
			return fmt.Errorf("peer %v %+v", p.Labels, p.Spec)
		}
		return nil
	})
	// tunnels checks that d's last configuration has exactly the given peers and subnets.
	tunnels := func(g *runningGateway, want map[string][]string) func() error {
		return func() error {
			d := g.driver()
			if d == nil {
				return errors.New("no driver")
			}
			cfg, ok := d.last()
			if !ok {
				return errors.New("nothing applied")
			}
			got := map[string][]string{}
			for _, p := range cfg.Peers {
				for _, s := range p.Subnets {
					got[p.Cluster] = append(got[p.Cluster], s.String())
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("tunnels %v, want %v", got, want)
			}
			return nil
		}
	}
	hubAnd := func(subnets []string) []string { return sortedStrings(append([]string{hubHC + "/32"}, subnets...)) }
	eventually(t, "east (hub topology) tunnels only to the hub, which carries west", tunnels(egw, map[string][]string{"hub": hubAnd(westSubnets)}))
	eventually(t, "west (mesh) reaches east through the hub too", tunnels(wgw, map[string][]string{"hub": hubAnd(eastSubnets)}))
	eventually(t, "the hub tunnels to both", tunnels(hgw, map[string][]string{"east": eastSubnets, "west": westSubnets}))
	eventually(t, "east reports west connected via the hub", func() error {
		p, err := getPeer("east")
		if err != nil {
			return err
		}
		if p.Spec.Topology != v1alpha1.TopologyHub {
			return fmt.Errorf("east's Peer topology %q", p.Spec.Topology)
		}
		var got []string
		for _, c := range p.Status.Connections {
			got = append(got, fmt.Sprintf("%s/%s/%s", c.ClusterID, c.Via, c.State))
		}
		if want := []string{"hub//Connected", "west/hub/Connected"}; !slices.Equal(got, want) {
			return fmt.Errorf("connections %v, want %v", got, want)
		}
		return nil
	})
	eventually(t, "east's route agents get west's subnets and the hub's address", func() error {
		cm := &corev1.ConfigMap{}
		if err := east.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayConfigMapName}, cm); err != nil {
			return err
		}
		if got, want := cm.Data[routeagent.SubnetsKey], strings.Join(hubAnd(westSubnets), "\n"); got != want {
			return fmt.Errorf("subnets %q, want %q", got, want)
		}
		return nil
	})

	// Security: a cluster cannot make its Peer a hub one; the hub gateway cannot edit Clusters.
	eastHub, err := hubaccess.LoadCredential(ctx, east)
	if err != nil {
		t.Fatal(err)
	}
	eastAsHub := newClient(t, eastHub.RESTConfig())
	forged := &v1alpha1.Peer{}
	if err := eastAsHub.Get(ctx, client.ObjectKey{Namespace: ns, Name: "east"}, forged); err != nil {
		t.Fatal(err)
	}
	forged.Spec.Role = v1alpha1.PeerRoleHub
	// The CRD refuses it first (only the Peer named hub has role hub); the ownership policy
	// would refuse it too.
	if err := eastAsHub.Update(ctx, forged); err == nil || !strings.Contains(err.Error(), "a Peer has role hub if and only if its clusterID is hub") {
		t.Errorf("east turning its Peer into a hub Peer: %v, want the CRD's refusal", err)
	}
	hubPeer, err := getPeer(v1alpha1.HubPeerName)
	if err != nil {
		t.Fatal(err)
	}
	if err := eastAsHub.Delete(ctx, hubPeer); err == nil || !strings.Contains(err.Error(), "may only change or delete") {
		t.Errorf("east deleting the hub's Peer: %v, want the ownership policy's refusal", err)
	}
	asGateway := newClient(t, gwCfg)
	cl := &v1alpha1.Cluster{}
	if err := asGateway.Get(ctx, client.ObjectKey{Namespace: ns, Name: "east"}, cl); err != nil {
		t.Fatalf("the hub gateway reading a Cluster: %v", err)
	}
	cl.Spec.Topology = v1alpha1.TopologyMesh
	if err := asGateway.Update(ctx, cl); !apierrors.IsForbidden(err) {
		t.Errorf("the hub gateway changing a Cluster: %v, want forbidden by RBAC", err)
	}
	if err := asGateway.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
		t.Errorf("the hub gateway listing Secrets: %v, want forbidden", err)
	}
	// Nor a member's Peer: a compromised hub gateway cannot steer a member's routes by
	// rewriting what another member accepts from it, nor remove it.
	eastPeer, err := getPeer("east")
	if err != nil {
		t.Fatal(err)
	}
	eastPeer.Spec.Subnets = append(eastPeer.Spec.Subnets, "198.18.0.0/15")
	if err := asGateway.Update(ctx, eastPeer); !apierrors.IsForbidden(err) {
		t.Errorf("the hub gateway rewriting east's Peer: %v, want forbidden by RBAC", err)
	}
	if err := asGateway.Delete(ctx, eastPeer); !apierrors.IsForbidden(err) {
		t.Errorf("the hub gateway deleting east's Peer: %v, want forbidden by RBAC", err)
	}

	// Without the hub's gateway, east has nobody to reach west through.
	hgw.stop(t)
	if err := hubc.Delete(ctx, hubPeer); err != nil {
		t.Fatal(err)
	}
	eventually(t, "east refuses west for want of a hub gateway", func() error {
		p, err := getPeer("east")
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, ConditionPeersAccepted)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "octopus-agent gateway --hub") {
			return fmt.Errorf("PeersAccepted %+v", c)
		}
		return tunnels(egw, map[string][]string{})()
	})
}
