package cluster

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aboutv1alpha1 "github.com/octopus-mcs/octopus/api/about/v1alpha1"
	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func TestJoinRegistersClustersWithDistinctBlocks(t *testing.T) {
	f := newFabric(t, "east", "west", "north")
	seen := map[string]string{}
	for i, name := range []string{"east", "west", "north"} {
		j := f.join(t, name)
		svc, _ := testenv.CIDRs(i + 1)
		cl := &v1alpha1.Cluster{}
		if err := f.hub.Get(t.Context(), client.ObjectKey{Namespace: f.info.Namespace, Name: name}, cl); err != nil {
			t.Fatalf("cluster %s not on the hub: %v", name, err)
		}
		if cl.Labels[v1alpha1.ClusterLabel] != name {
			t.Errorf("cluster %s labels = %v", name, cl.Labels)
		}
		if got := cl.Spec.ServiceCIDRs; len(got) != 1 || got[0] != svc.String() {
			t.Errorf("cluster %s service CIDRs = %v, want the discovered %s", name, got, svc)
		}
		for _, block := range []string{cl.Spec.GlobalCIDR, cl.Spec.SecondaryCIDR} {
			if other, dup := seen[block]; dup {
				t.Errorf("block %s given to both %s and %s", block, other, name)
			}
			seen[block] = name
		}
		if !netip.MustParsePrefix("242.0.0.0/8").Overlaps(netip.MustParsePrefix(cl.Spec.GlobalCIDR)) ||
			!netip.MustParsePrefix("10.112.0.0/12").Overlaps(netip.MustParsePrefix(cl.Spec.SecondaryCIDR)) {
			t.Errorf("cluster %s blocks %s, %s are outside the default pools", name, cl.Spec.GlobalCIDR, cl.Spec.SecondaryCIDR)
		}

		// Member side: the credential Secret and the KEP-2149 cluster ID property.
		member := newClient(t, f.env.Cluster(name).RESTConfig())
		cred, err := hubaccess.LoadCredential(t.Context(), member)
		if err != nil || cred.ClusterID != name || cred.Token != j.Credential.Token {
			t.Errorf("member %s credential = %+v, %v", name, cred.ClusterID, err)
		}
		prop := &aboutv1alpha1.ClusterProperty{}
		if err := member.Get(t.Context(), client.ObjectKey{Name: aboutv1alpha1.ClusterIDProperty}, prop); err != nil || prop.Spec.Value != name {
			t.Errorf("member %s ClusterProperty = %q, %v", name, prop.Spec.Value, err)
		}
	}

	// Re-running a join resumes: same blocks, nothing rewritten.
	before := &v1alpha1.Cluster{}
	_ = f.hub.Get(t.Context(), client.ObjectKey{Namespace: f.info.Namespace, Name: "east"}, before)
	f.join(t, "east")
	after := &v1alpha1.Cluster{}
	_ = f.hub.Get(t.Context(), client.ObjectKey{Namespace: f.info.Namespace, Name: "east"}, after)
	if before.ResourceVersion != after.ResourceVersion || before.Spec.GlobalCIDR != after.Spec.GlobalCIDR {
		t.Errorf("re-join changed the Cluster: rv %s -> %s, global %s -> %s", before.ResourceVersion, after.ResourceVersion, before.Spec.GlobalCIDR, after.Spec.GlobalCIDR)
	}
}

func TestJoinRefusesDuplicateClusterID(t *testing.T) {
	f := newFabric(t, "east", "west")
	f.join(t, "east")
	opts := f.joinOptions("west")
	opts.ClusterID = "east"
	_, err := Join(t.Context(), f.env.Cluster("west").RESTConfig(), opts)
	if !errors.Is(err, ErrDuplicateClusterID) || !strings.Contains(err.Error(), `cluster ID "east" is already used by another cluster`) {
		t.Fatalf("joining a second cluster as east: err = %v, want a duplicate-ID error", err)
	}
	// Nothing of west's attempt may remain in west.
	member := newClient(t, f.env.Cluster("west").RESTConfig())
	if _, err := hubaccess.LoadCredential(t.Context(), member); !errors.Is(err, hubaccess.ErrNotJoined) {
		t.Errorf("west has a hub credential after a refused join: %v", err)
	}
	// And a cluster that joined cannot silently re-join under another ID.
	opts = f.joinOptions("east")
	opts.ClusterID = "east2"
	if _, err := Join(t.Context(), f.env.Cluster("east").RESTConfig(), opts); err == nil || !strings.Contains(err.Error(), `already joined as "east"`) {
		t.Fatalf("re-join as another ID: err = %v", err)
	}
}

func TestJoinRejectsBadInput(t *testing.T) {
	f := newFabric(t, "east", "west")
	f.join(t, "west")
	westPod := f.env.Cluster("west").PodCIDR.String()
	unreachable := *f.info
	unreachable.HubURL = "https://127.0.0.1:1"
	staleToken := *f.info
	staleToken.JoinToken = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"
	smallBlocks := *f.info // every cluster's global CIDR a /28: 16 addresses
	smallBlocks.Globalnet = hub.PoolConfig{CIDR: hub.DefaultGlobalnetPool.CIDR, ClusterPrefixLength: 28}
	tests := []struct {
		name    string
		edit    func(*JoinOptions)
		wantErr []string
	}{
		{"ID not a label", func(o *JoinOptions) { o.ClusterID = "East_1" }, []string{`cluster ID "East_1" is not valid`}},
		{"ID reserved for the hub's gateway", func(o *JoinOptions) { o.ClusterID = v1alpha1.HubPeerName }, []string{`cluster ID "hub" is reserved`}},
		{"unknown topology", func(o *JoinOptions) { o.Topology = "star" }, []string{`topology "star"`}},
		{"ID too long", func(o *JoinOptions) { o.ClusterID = strings.Repeat("a", 64) }, []string{"must be no more than 63 characters"}},
		{"pod CIDR not a CIDR", func(o *JoinOptions) { o.PodCIDRs = []string{"10.0.0.300/16"} }, []string{"pod CIDR", "10.0.0.300/16"}},
		{"pod CIDR host bits", func(o *JoinOptions) { o.PodCIDRs = []string{"10.1.2.3/16"} }, []string{"did you mean 10.1.0.0/16"}},
		{"pod overlaps own services", func(o *JoinOptions) { o.PodCIDRs = []string{"10.0.0.0/8"} }, []string{"overlaps service CIDR"}},
		{"overlaps another cluster", func(o *JoinOptions) { o.PodCIDRs = []string{westPod} }, []string{"pod CIDR " + westPod, `of cluster "west"`, "--addressing globalnet"}},
		{"unknown addressing", func(o *JoinOptions) { o.Addressing = "nat" }, []string{`addressing "nat"`}},
		{"two pod CIDRs of one family", func(o *JoinOptions) { o.PodCIDRs = []string{"10.50.0.0/16", "10.51.0.0/16"} },
			[]string{"pod CIDRs 10.50.0.0/16 and 10.51.0.0/16 are of the same address family", "pass --pod-cidr with one CIDR per family"}},
		{"two IPv6 service CIDRs", func(o *JoinOptions) { o.ServiceCIDRs = []string{"2001:db8:96::/112", "2001:db8:97::/112"} },
			[]string{"service CIDRs 2001:db8:96::/112 and 2001:db8:97::/112 are of the same address family"}},
		{"globalnet pod CIDR inside the global pool", func(o *JoinOptions) {
			o.PodCIDRs, o.Addressing = []string{"242.7.0.0/16"}, v1alpha1.AddressingGlobalnet
		}, []string{"pod CIDR 242.7.0.0/16", `cluster "east"`, "globalnet pool " + hub.DefaultGlobalnetPool.CIDR}},
		{"globalnet service CIDR around the global pool", func(o *JoinOptions) {
			o.ServiceCIDRs, o.Addressing = []string{"240.0.0.0/4"}, v1alpha1.AddressingGlobalnet
		}, []string{"service CIDR 240.0.0.0/4", "globalnet pool " + hub.DefaultGlobalnetPool.CIDR}},
		{"globalnet for an IPv6-only cluster", func(o *JoinOptions) {
			o.PodCIDRs, o.ServiceCIDRs, o.Addressing = []string{"2001:db8:e::/56"}, []string{"2001:db8:96::/112"}, v1alpha1.AddressingGlobalnet
		}, []string{`cluster "east" has no IPv4 pod CIDR (pod CIDRs 2001:db8:e::/56)`, "global addresses are IPv4", "--addressing direct"}},
		{"egress size with direct addressing", func(o *JoinOptions) { o.GlobalEgressSize = 4 },
			[]string{"--global-egress-size 4 is only meaningful with --addressing globalnet", "direct addressing"}},
		{"egress size with secondary addressing", func(o *JoinOptions) {
			o.GlobalEgressSize, o.Addressing = 4, v1alpha1.AddressingSecondary
		}, []string{"--global-egress-size 4 is only meaningful with --addressing globalnet", "secondary addressing"}},
		{"negative egress size", func(o *JoinOptions) {
			o.GlobalEgressSize, o.Addressing = -1, v1alpha1.AddressingGlobalnet
		}, []string{"--global-egress-size -1: want 1 to 65534 addresses"}},
		{"egress size over the API's maximum", func(o *JoinOptions) {
			o.GlobalEgressSize, o.Addressing = 65535, v1alpha1.AddressingGlobalnet
		}, []string{"--global-egress-size 65535: want 1 to 65534 addresses"}},
		{"egress size that leaves no pool in the global CIDR", func(o *JoinOptions) {
			o.GlobalEgressSize, o.Addressing, o.BrokerInfo = 15, v1alpha1.AddressingGlobalnet, &smallBlocks
		}, []string{`--global-egress-size 15 does not fit cluster "east"'s global CIDR`, "a /28 of 16 addresses", "pick a smaller --global-egress-size"}},
		{"hub unreachable", func(o *JoinOptions) {
			o.BrokerInfo = &unreachable
			o.HubAttempts = 2
			o.HubRetryInterval = 10 * time.Millisecond
		},
			[]string{"cannot reach the hub at https://127.0.0.1:1 after 2 attempts", "connection refused"}},
		{"stale join token", func(o *JoinOptions) { o.BrokerInfo = &staleToken }, []string{"rejected the join credential"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := f.joinOptions("east")
			tt.edit(&opts)
			_, err := Join(t.Context(), f.env.Cluster("east").RESTConfig(), opts)
			if err == nil {
				t.Fatal("join succeeded")
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v\nwant it to contain %q", err, want)
				}
			}
		})
	}
	// None of the refused joins left anything on the hub.
	sas := &corev1.ServiceAccountList{}
	if err := f.hub.List(t.Context(), sas, client.InNamespace(f.info.Namespace), client.MatchingLabels{v1alpha1.ClusterLabel: "east"}); err != nil || len(sas.Items) != 0 {
		t.Errorf("refused joins left ServiceAccounts on the hub: %d, %v", len(sas.Items), err)
	}
	// With globalnet addressing the overlap is fine; the egress size reaches the hub, and so
	// do the CIDRs of both families of a dual-stack cluster.
	opts := f.joinOptions("east")
	dualPods, dualServices := []string{westPod, "2001:db8:e::/56"}, []string{"2001:db8:96::/112", f.env.Cluster("east").ServiceCIDR.String()}
	opts.PodCIDRs, opts.ServiceCIDRs, opts.Addressing, opts.GlobalEgressSize = dualPods, dualServices, v1alpha1.AddressingGlobalnet, 4
	if _, err := Join(t.Context(), f.env.Cluster("east").RESTConfig(), opts); err != nil {
		t.Fatalf("globalnet join with an overlapping pod CIDR: %v", err)
	}
	onHub := &v1alpha1.Cluster{}
	if err := f.hub.Get(t.Context(), client.ObjectKey{Namespace: f.info.Namespace, Name: "east"}, onHub); err != nil {
		t.Fatal(err)
	}
	if onHub.Spec.GlobalEgressSize != 4 {
		t.Errorf("the Cluster on the hub has globalEgressSize %d, want 4", onHub.Spec.GlobalEgressSize)
	}
	if !slices.Equal(onHub.Spec.PodCIDRs, dualPods) || !slices.Equal(onHub.Spec.ServiceCIDRs, dualServices) {
		t.Errorf("the Cluster on the hub has pod CIDRs %v and service CIDRs %v, want %v and %v", onHub.Spec.PodCIDRs, onHub.Spec.ServiceCIDRs, dualPods, dualServices)
	}
	// Running join again with another size would move the pool under the addresses handed
	// out: the hub refuses it and says how to change it.
	opts.GlobalEgressSize = 16
	if _, err := Join(t.Context(), f.env.Cluster("east").RESTConfig(), opts); err == nil || !strings.Contains(err.Error(), "globalEgressSize is immutable") || !strings.Contains(err.Error(), "leave and join again") {
		t.Errorf("re-joining with another egress size: err = %v, want globalEgressSize is immutable ... leave and join again", err)
	}
}

func TestConcurrentJoinsGetDistinctBlocks(t *testing.T) {
	const n = 8
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("c%d", i))
	}
	f := newFabric(t, names...)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, name := range names {
		wg.Go(func() {
			_, errs[i] = Join(t.Context(), f.env.Cluster(name).RESTConfig(), f.joinOptions(name))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent joins: %v", err)
	}
	clusters := &v1alpha1.ClusterList{}
	if err := f.hub.List(t.Context(), clusters, client.InNamespace(f.info.Namespace)); err != nil {
		t.Fatal(err)
	}
	if len(clusters.Items) != n {
		t.Fatalf("%d clusters on the hub, want %d", len(clusters.Items), n)
	}
	for _, kind := range []func(*v1alpha1.Cluster) string{
		func(c *v1alpha1.Cluster) string { return c.Spec.GlobalCIDR },
		func(c *v1alpha1.Cluster) string { return c.Spec.SecondaryCIDR },
	} {
		var blocks []netip.Prefix
		for i := range clusters.Items {
			b := netip.MustParsePrefix(kind(&clusters.Items[i]))
			for _, other := range blocks {
				if b.Overlaps(other) {
					t.Errorf("blocks %s and %s overlap", b, other)
				}
			}
			blocks = append(blocks, b)
		}
	}
}

func TestLeaveCleansBothSides(t *testing.T) {
	f := newFabric(t, "east", "west")
	east := f.join(t, "east")
	f.join(t, "west")
	eastHub := f.as(t, east)
	// Objects an agent would have made: a heartbeat Lease, a Peer, a VPC gateway's GatewayExIp.
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.HeartbeatLeaseName("east"), Namespace: f.info.Namespace, Labels: map[string]string{v1alpha1.ClusterLabel: "east"}}}
	if err := eastHub.Create(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	if err := eastHub.Create(t.Context(), testPeer(f.info.Namespace, "east")); err != nil {
		t.Fatal(err)
	}
	if err := eastHub.Create(t.Context(), testGatewayExIP(f.info.Namespace, "east", "red", "east")); err != nil {
		t.Fatal(err)
	}

	if err := Leave(t.Context(), f.env.Cluster("east").RESTConfig(), LeaveOptions{}); err != nil {
		t.Fatalf("leave: %v", err)
	}
	// Hub: nothing labelled east remains (ServiceAccount, token and binding are garbage-collected).
	ns := f.info.Namespace
	own := client.MatchingLabels{v1alpha1.ClusterLabel: "east"}
	for _, list := range []client.ObjectList{&v1alpha1.ClusterList{}, &v1alpha1.PeerList{}, &v1alpha1.GatewayExIpList{}, &coordinationv1.LeaseList{}, &corev1.ConfigMapList{}, &corev1.ServiceAccountList{}} {
		waitEmpty(t, f.hub, list, client.InNamespace(ns), own)
	}
	waitEmpty(t, f.hub, &corev1.SecretList{}, client.InNamespace(ns), own)
	// The old credential is revoked: first its binding goes, then (garbage collection of the
	// token Secret) the token itself.
	waitFor(t, "east's credential to be revoked", func() bool {
		err := eastHub.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "west"}, &v1alpha1.Cluster{})
		return apierrors.IsUnauthorized(err)
	})
	// West is untouched.
	if err := f.hub.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "west"}, &v1alpha1.Cluster{}); err != nil {
		t.Errorf("west's Cluster after east left: %v", err)
	}
	// Member: credential, property and namespace gone.
	member := newClient(t, f.env.Cluster("east").RESTConfig())
	if _, err := hubaccess.LoadCredential(t.Context(), member); !errors.Is(err, hubaccess.ErrNotJoined) {
		t.Errorf("east still has a credential: %v", err)
	}
	err := member.Get(t.Context(), client.ObjectKey{Name: aboutv1alpha1.ClusterIDProperty}, &aboutv1alpha1.ClusterProperty{})
	if err == nil {
		t.Error("east still has its ClusterProperty")
	}
	// Leaving makes the ID and the blocks available again.
	f.join(t, "east")
	// A second leave after a completed one says what is wrong.
	if err := Leave(t.Context(), f.env.Cluster("east").RESTConfig(), LeaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := Leave(t.Context(), f.env.Cluster("east").RESTConfig(), LeaveOptions{}); !errors.Is(err, hubaccess.ErrNotJoined) {
		t.Errorf("second leave: err = %v, want ErrNotJoined", err)
	}
}

func waitEmpty(t *testing.T, c client.Client, list client.ObjectList, opts ...client.ListOption) {
	t.Helper()
	err := testenv.Poll(t, 200*time.Millisecond, 30*time.Second, func() error {
		if err := c.List(t.Context(), list, opts...); err != nil {
			t.Fatal(err)
		}
		if items := meta.LenList(list); items > 0 {
			return fmt.Errorf("%T still has %d items labelled for the cluster that left", list, items)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

func testPeer(namespace, id string) *v1alpha1.Peer {
	return &v1alpha1.Peer{
		ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: namespace, Labels: map[string]string{v1alpha1.ClusterLabel: id}},
		Spec: v1alpha1.PeerSpec{
			ClusterID: id, Hostname: id + "-gw", Backend: v1alpha1.BackendWireGuard,
			Endpoint: v1alpha1.PeerEndpoint{PrivateIP: "192.0.2.1", Port: 4500},
		},
	}
}
