package diagnose

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	aboutv1alpha1 "github.com/octopus-mcs/octopus/api/about/v1alpha1"
	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/dnsconfig"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// known is a fact that was fetched already.
func known[T any](v T, err error) *fact[T] {
	f := &fact[T]{done: make(chan struct{}), val: v, err: err}
	f.once.Do(func() {})
	close(f.done)
	return f
}

var testNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

const testHubURL = "https://hub.example:6443"

// fakeCluster is one member of the fake set: the objects of its API and of its part of the
// hub, which a test may change before building the env.
type fakeCluster struct {
	id, source string
	pods, svcs string
	member     map[string]client.Object
	hub        map[string]client.Object
	version    *version.Info
	versionErr error
	credErr    error
	offset     interval
	// memberFuncs and hubFuncs inject errors into the cluster's API and its hub credential.
	memberFuncs, hubFuncs interceptor.Funcs
}

// fakeSet is a healthy cluster set of two clusters, east and west, with direct addressing,
// gateways connected to each other, DNS wired and kube-proxy in nftables mode (east: flag,
// west: ConfigMap).
type fakeSet struct {
	clusters   []*fakeCluster
	hubVersion *version.Info
	hubOffset  interval
	hubErr     error
}

func newFakeSet() *fakeSet {
	s := &fakeSet{hubVersion: &version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.1"}, hubOffset: interval{lo: -time.Millisecond, hi: time.Millisecond}}
	for i, id := range []string{"east", "west"} {
		s.clusters = append(s.clusters, newFakeCluster(id, i+1))
	}
	for _, c := range s.clusters {
		peer := c.hub["peer"].(*v1alpha1.Peer)
		for _, o := range s.clusters {
			if o != c {
				peer.Status.Connections = append(peer.Status.Connections, v1alpha1.PeerConnection{
					ClusterID: o.id, State: v1alpha1.ConnectionConnected, LossPercent: 0,
					RTT:           v1alpha1.LatencyStats{Last: metav1.Duration{Duration: 300 * time.Microsecond}, Min: metav1.Duration{Duration: 200 * time.Microsecond}, Avg: metav1.Duration{Duration: 310 * time.Microsecond}, Max: metav1.Duration{Duration: 900 * time.Microsecond}},
					LastHandshake: &metav1.Time{Time: testNow.Add(-40 * time.Second)},
					Underlay:      &v1alpha1.UnderlayProbe{Time: metav1.NewTime(testNow.Add(-time.Minute)), PortReachable: true, PathMTU: 1500, RequiredMTU: 1480, TunnelMTU: 1420},
				})
			}
		}
	}
	return s
}

func newFakeCluster(id string, i int) *fakeCluster {
	pods, svcs := fmt.Sprintf("10.%d.0.0/16", i), fmt.Sprintf("10.%d.0.0/16", 96+i)
	dnsIP := fmt.Sprintf("10.%d.0.53", 96+i)
	corefile, err := os.ReadFile("../dnsconfig/testdata/kubeadm.Corefile")
	if err != nil {
		panic(err)
	}
	patched, err := dnsconfig.Patch(string(corefile), []netip.AddrPort{netip.MustParseAddrPort(dnsIP + ":53")})
	if err != nil {
		panic(err)
	}
	gw := id + "-gw"
	sys := v1alpha1.SystemNamespace
	cred := hubaccess.Credential{ClusterID: id, Server: testHubURL, Namespace: v1alpha1.DefaultHubNamespace, CAData: []byte("ca"), Token: "token-" + id}
	c := &fakeCluster{id: id, source: id + ".yaml", pods: pods, svcs: svcs,
		version: &version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.1"}, offset: interval{lo: -2 * time.Millisecond, hi: 2 * time.Millisecond}}
	c.member = map[string]client.Object{
		"credential": cred.Secret(),
		"property": &aboutv1alpha1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1alpha1.ClusterIDProperty},
			Spec: aboutv1alpha1.ClusterPropertySpec{Value: id}},
		"servicecidr": &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{svcs}}},
		"kcm": &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-controller-manager"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kcm", Command: []string{"kube-controller-manager", "--cluster-cidr=" + pods}}}}},
		"node": &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: gw}, Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.1.0/24", i), PodCIDRs: []string{fmt.Sprintf("10.%d.1.0/24", i)}}},
		"dns-service": &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: dnsconfig.ServiceName},
			Spec: corev1.ServiceSpec{ClusterIP: dnsIP, Ports: []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}}},
		"coredns": &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns"}, Data: map[string]string{"Corefile": patched}},
		"dns-deployment": &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: dnsconfig.ServiceName},
			Spec: appsv1.DeploymentSpec{Replicas: new(int32(2))}, Status: appsv1.DeploymentStatus{ReadyReplicas: 2}},
		"dns-slice": &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "octopus-dns-abc", Labels: map[string]string{discoveryv1.LabelServiceName: dnsconfig.ServiceName}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{fmt.Sprintf("10.%d.1.5", i)}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}},
				{Addresses: []string{fmt.Sprintf("10.%d.1.6", i)}}}},
		"gateway-lease": &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: v1alpha1.GatewayLeaseName},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: new(gw), LeaseDurationSeconds: new(int32(15)), RenewTime: &metav1.MicroTime{Time: testNow.Add(-time.Second)}}},
	}
	if i == 1 {
		c.member["kube-proxy"] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-x1"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-proxy", Command: []string{"/usr/local/bin/kube-proxy", "--proxy-mode", "nftables"}}}}}
	} else {
		c.member["kube-proxy"] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"},
			Data: map[string]string{"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n"}}
	}
	hubNS := v1alpha1.DefaultHubNamespace
	label := map[string]string{v1alpha1.ClusterLabel: id}
	c.hub = map[string]client.Object{
		"cluster": &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: id, Labels: label, CreationTimestamp: metav1.NewTime(testNow.Add(-time.Duration(10-i) * time.Hour))},
			Spec: v1alpha1.ClusterSpec{ClusterID: id, PodCIDRs: []string{pods}, ServiceCIDRs: []string{svcs}, Addressing: v1alpha1.AddressingDirect}},
		"heartbeat": &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: id, Labels: label},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: new("agent"), LeaseDurationSeconds: new(int32(30)), RenewTime: &metav1.MicroTime{Time: testNow.Add(-2 * time.Second)}}},
		"peer": &v1alpha1.Peer{ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: id, Labels: label},
			Spec: v1alpha1.PeerSpec{ClusterID: id, Hostname: gw, Backend: v1alpha1.BackendWireGuard,
				Endpoint: v1alpha1.PeerEndpoint{PrivateIP: fmt.Sprintf("203.0.113.%d", i), Port: 4500}},
			Status: v1alpha1.PeerStatus{Driver: "wireguard-go", Conditions: []metav1.Condition{
				{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Applied"},
				{Type: "PeersAccepted", Status: metav1.ConditionTrue, Reason: "AllAccepted"},
			}}},
	}
	return c
}

// env builds the run's env from the set as it is now.
func (s *fakeSet) env(t *testing.T) *env {
	t.Helper()
	opts, _, err := complete(Options{Clusters: []Target{{}}, Now: func() time.Time { return testNow }, CheckTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var hubObjs []client.Object
	for _, c := range s.clusters {
		for _, o := range c.hub {
			hubObjs = append(hubObjs, o.DeepCopyObject().(client.Object))
		}
	}
	e := &env{opts: opts}
	var clusters []v1alpha1.Cluster
	var peers []v1alpha1.Peer
	var leases []coordinationv1.Lease
	for _, o := range hubObjs {
		switch o := o.(type) {
		case *v1alpha1.Cluster:
			clusters = append(clusters, *o)
		case *v1alpha1.Peer:
			peers = append(peers, *o)
		case *coordinationv1.Lease:
			leases = append(leases, *o)
		}
	}
	// The API lists by name.
	slices.SortFunc(clusters, func(a, b v1alpha1.Cluster) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(peers, func(a, b v1alpha1.Peer) int { return strings.Compare(a.Name, b.Name) })
	for _, c := range s.clusters {
		var objs []client.Object
		for _, o := range c.member {
			objs = append(objs, o.DeepCopyObject().(client.Object))
		}
		mc := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(objs...).WithInterceptorFuncs(c.memberFuncs).Build()
		hc := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(hubObjs...).WithInterceptorFuncs(c.hubFuncs).Build()
		cred, err := hubaccess.LoadCredential(t.Context(), mc)
		if c.credErr != nil {
			cred, err = hubaccess.Credential{}, c.credErr
		}
		e.members = append(e.members, &member{source: c.source, cfg: &rest.Config{Host: "https://" + c.id + ":6443"}, c: mc,
			cred: known(cred, err), hubc: known[client.Client](hc, nil), version: known(c.version, c.versionErr), offset: known(c.offset, nil)})
	}
	hc := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(hubObjs...).Build()
	e.hub = &hubView{
		reader:  known(hubReader{c: hc, cfg: &rest.Config{Host: testHubURL}, namespace: v1alpha1.DefaultHubNamespace, via: "east's credential", clusters: clusters}, s.hubErr),
		peers:   known(peers, s.hubErr),
		leases:  known(leases, s.hubErr),
		version: known(s.hubVersion, s.hubErr),
		offset:  known(s.hubOffset, s.hubErr),
	}
	return e
}

func (s *fakeSet) diagnose(t *testing.T) *Report {
	t.Helper()
	return s.env(t).diagnose(t.Context(), registry, time.Now())
}

func (s *fakeSet) cluster(id string) *fakeCluster {
	for _, c := range s.clusters {
		if c.id == id {
			return c
		}
	}
	panic(id)
}

// TestHealthySet: every check passes on a healthy set, with a finding per check and cluster.
func TestHealthySet(t *testing.T) {
	r := newFakeSet().diagnose(t)
	for _, f := range r.Findings {
		if f.Severity >= SeverityWarning {
			t.Errorf("%s %s: %s %s (fix %s)", f.Check, f.Cluster, f.Severity, f.Message, f.Fix)
		}
	}
	for _, c := range registry {
		for _, id := range []string{"east", "west"} {
			if c.member != nil && !slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Check == c.Name && f.Cluster == id }) {
				t.Errorf("no %s finding for %s", c.Name, id)
			}
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", render(t, r))
	}
}

// TestFaults injects one fault at a time into the fake set and checks that the right check
// reports it as an error (or warning) against the right cluster, saying what it means and
// what fixes it.
func TestFaults(t *testing.T) {
	tests := []struct {
		name     string
		fault    func(s *fakeSet)
		check    string
		cluster  string
		severity Severity
		message  string
		fix      string
	}{
		{"member API down", func(s *fakeSet) { s.cluster("west").versionErr = errors.New("connection refused") },
			"versions", "west", SeverityError, "does not answer: connection refused", "west.yaml"},
		{"hub too old", func(s *fakeSet) { s.hubVersion = &version.Info{Major: "1", Minor: "29", GitVersion: "v1.29.4"} },
			"versions", HubName, SeverityError, "older than 1.30", "upgrade the hub"},
		{"versions spread", func(s *fakeSet) {
			s.cluster("east").version = &version.Info{Major: "1", Minor: "33+", GitVersion: "v1.33.2-gke.1"}
		},
			"versions", "", SeverityWarning, "spans Kubernetes 1.33 (east) to 1.37 (hub)", "upgrade east"},
		{"not joined", func(s *fakeSet) { s.cluster("west").credErr = hubaccess.ErrNotJoined },
			"hub-access", "west.yaml", SeverityError, "has not joined a hub", "octopus join BROKER-INFO --cluster-id ID --kubeconfig west.yaml"},
		{"credential revoked", func(s *fakeSet) {
			s.cluster("east").hubFuncs = interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
				return apierrors.NewUnauthorized("invalid bearer token")
			}}
		}, "hub-access", "east", SeverityError, "rejects the credential (401 Unauthorized): it was revoked", "re-run `octopus join BROKER-INFO --cluster-id east --kubeconfig east.yaml`"},
		{"hub down", func(s *fakeSet) {
			err := errors.New("dial tcp 192.0.2.1:6443: connect: connection refused")
			s.hubErr = err
			for _, c := range s.clusters {
				c.hubFuncs = interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
					return err
				}}
			}
		}, "hub-access", "east", SeverityError, "the hub's API server at hub.example:6443 does not answer from this machine", "start the hub's API server"},
		{"different hubs", func(s *fakeSet) {
			c := s.cluster("west")
			cred := hubaccess.Credential{ClusterID: "west", Server: "https://other-hub:6443", Namespace: v1alpha1.DefaultHubNamespace, CAData: []byte("ca"), Token: "t"}
			c.member["credential"] = cred.Secret()
		}, "hub-access", "", SeverityError, "point at different hubs (east → https://hub.example:6443; west → https://other-hub:6443)", "octopus leave"},
		{"not registered", func(s *fakeSet) { delete(s.cluster("west").hub, "cluster") },
			"registration", "west", SeverityError, "the hub has no Cluster west", "re-run `octopus join"},
		{"service CIDR changed", func(s *fakeSet) {
			s.cluster("east").member["servicecidr"].(*networkingv1.ServiceCIDR).Spec.CIDRs = []string{"10.97.0.0/16", "10.200.0.0/16"}
		}, "registration", "east", SeverityError, "registered service CIDRs 10.97.0.0/16, but the cluster has 10.97.0.0/16,10.200.0.0/16", "--service-cidr 10.97.0.0/16,10.200.0.0/16"},
		{"node outside pod CIDR", func(s *fakeSet) {
			s.cluster("west").member["node2"] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w2"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.50.3.0/24"}}}
		}, "registration", "west", SeverityError, "pod CIDRs 10.50.3.0/24 (node w2) lie outside the registered pod CIDRs 10.2.0.0/16", "--pod-cidr"},
		{"two cluster IDs", func(s *fakeSet) {
			s.cluster("west").member["property"].(*aboutv1alpha1.ClusterProperty).Spec.Value = "old-west"
		}, "registration", "west", SeverityError, `says "old-west" but the hub credential belongs to "west"`, "octopus leave"},
		{"overlapping CIDRs", func(s *fakeSet) {
			s.cluster("west").hub["cluster"].(*v1alpha1.Cluster).Spec.PodCIDRs = []string{"10.1.128.0/17"}
		}, "cidr-overlap", "west", SeverityError, "pod CIDR 10.1.128.0/17 of west overlaps east's CIDRs 10.1.0.0/16,10.97.0.0/16", "join west again"},
		{"heartbeat stale", func(s *fakeSet) {
			s.cluster("east").hub["heartbeat"].(*coordinationv1.Lease).Spec.RenewTime = &metav1.MicroTime{Time: testNow.Add(-95 * time.Second)}
		}, "heartbeat", "east", SeverityError, "east last renewed its heartbeat 1m35s ago (the Lease lasts 30s): its agent is not running", "octopus-agent controller"},
		{"agent stopped", func(s *fakeSet) {
			s.cluster("east").hub["heartbeat"].(*coordinationv1.Lease).Spec.RenewTime = &metav1.MicroTime{Time: testNow.Add(-time.Minute)}
			s.cluster("east").hub["cluster"].(*v1alpha1.Cluster).Status.Conditions = []metav1.Condition{{Type: v1alpha1.ClusterConditionAgentConnected,
				Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAgentStopped, LastTransitionTime: metav1.NewTime(testNow.Add(-time.Minute))}}
		}, "heartbeat", "east", SeverityError, "its agent stopped (it said so at 2026-05-01T11:59:00Z)", "octopus-agent controller"},
		{"no heartbeat", func(s *fakeSet) { delete(s.cluster("west").hub, "heartbeat") },
			"heartbeat", "west", SeverityError, "the hub has no heartbeat from west", "octopus-agent controller"},
		{"clock skew", func(s *fakeSet) {
			s.cluster("west").offset = interval{lo: 40 * time.Second, hi: 40*time.Second + 10*time.Millisecond}
		},
			"clock-skew", "west", SeverityError, "40.005s ahead of the hub's (±6ms), more than the cluster's heartbeat Lease lasts (30s)", "NTP"},
		{"no gateway", func(s *fakeSet) { delete(s.cluster("east").member, "gateway-lease") },
			"gateway", "east", SeverityError, "no gateway was ever elected", "octopus-agent gateway"},
		{"gateway killed", func(s *fakeSet) {
			s.cluster("east").member["gateway-lease"].(*coordinationv1.Lease).Spec.RenewTime = &metav1.MicroTime{Time: testNow.Add(-20 * time.Second)}
		}, "gateway", "east", SeverityError, "the active gateway east-gw last renewed the Lease octopus-system/octopus-gateway in the cluster 20s ago and the Lease lasts 15s", "start the gateway on east-gw again"},
		{"tunnel down", func(s *fakeSet) {
			c := &s.cluster("west").hub["peer"].(*v1alpha1.Peer).Status.Connections[0]
			c.State, c.Message = v1alpha1.ConnectionError, "the remote gateway stopped answering health probes"
		}, "gateway", "west", SeverityError, "the tunnel to east is down (Error): the remote gateway stopped answering health probes", "UDP to the tunnel port passes in both directions between 203.0.113.2:4500 and 203.0.113.1:4500"},
		{"tunnel port dropped", func(s *fakeSet) {
			c := &s.cluster("west").hub["peer"].(*v1alpha1.Peer).Status.Connections[0]
			c.State, c.Message = v1alpha1.ConnectionError, "the remote gateway stopped answering health probes"
			c.Underlay = &v1alpha1.UnderlayProbe{Time: metav1.NewTime(testNow), Message: "no answer from UDP 203.0.113.1:4500 to 3 probes, 1s each"}
		}, "gateway", "west", SeverityError, "UDP probes from this gateway to the tunnel port of east at 203.0.113.1:4500 get no answer (no answer from UDP 203.0.113.1:4500 to 3 probes, 1s each): a firewall between the gateways drops the tunnel port",
			"let UDP port 4500 pass in both directions between 203.0.113.2 and 203.0.113.1: on each gateway node find the rule that drops it (`nft list ruleset | grep -w 4500`"},
		{"tunnel port dropped by this node", func(s *fakeSet) {
			c := &s.cluster("west").hub["peer"].(*v1alpha1.Peer).Status.Connections[0]
			c.Underlay = &v1alpha1.UnderlayProbe{Time: metav1.NewTime(testNow), Message: "this node's firewall drops UDP to 203.0.113.1:4500: sending was refused (EPERM), an output rule drops it"}
		}, "gateway", "west", SeverityError, "an output rule drops it): this gateway node's own firewall drops the tunnel port", "let UDP port 4500 pass"},
		{"tunnel port closed", func(s *fakeSet) {
			c := &s.cluster("west").hub["peer"].(*v1alpha1.Peer).Status.Connections[0]
			c.Underlay = &v1alpha1.UnderlayProbe{Time: metav1.NewTime(testNow), Message: "refused: 203.0.113.1 answered that nothing listens on UDP port 4500 (ICMP port unreachable)"}
		}, "gateway", "west", SeverityError, "the tunnel port of east at 203.0.113.1:4500 does not accept this gateway's UDP probes (refused: ", "check that east's gateway runs"},
		{"underlay MTU lowered", func(s *fakeSet) {
			c := &s.cluster("west").hub["peer"].(*v1alpha1.Peer).Status.Connections[0]
			c.Underlay.PathMTU = 1400
		}, "gateway", "west", SeverityError, "the underlay path from this gateway to east at 203.0.113.1:4500 carries packets of at most 1400 bytes unfragmented, but the tunnel sends up to 1480 (MTU 1420 plus encapsulation)",
			"lower the tunnel MTU to 1340 with `octopus-agent gateway --mtu 1340` on the gateways of both clusters (each direction needs it), or raise the MTU of the underlay link between 203.0.113.2 and 203.0.113.1 that allows only 1400 bytes"},
		{"handshake expired", func(s *fakeSet) {
			s.cluster("west").hub["peer"].(*v1alpha1.Peer).Status.Connections[0].LastHandshake = &metav1.Time{Time: testNow.Add(-4 * time.Minute)}
		}, "gateway", "west", SeverityError, "the last WireGuard handshake with east was 4m0s ago, past WireGuard's Reject-After-Time", "UDP"},
		{"lossy", func(s *fakeSet) {
			s.cluster("west").hub["peer"].(*v1alpha1.Peer).Status.Connections[0].LossPercent = 12
		},
			"gateway", "west", SeverityWarning, "loses 12% of its health probes", "drops"},
		{"peers refused", func(s *fakeSet) {
			s.cluster("west").hub["peer"].(*v1alpha1.Peer).Status.Conditions[1] = metav1.Condition{Type: "PeersAccepted", Status: metav1.ConditionFalse,
				Reason: "OverlappingSubnets", Message: "Peer east: subnet 10.1.0.0/16 overlaps ours; use globalnet or secondary addressing"}
		}, "gateway", "west", SeverityError, "PeersAccepted=False (OverlappingSubnets): Peer east", "the message says what to change"},
		{"Peer not yet republished", func(s *fakeSet) { s.cluster("east").hub["peer"].(*v1alpha1.Peer).Spec.Hostname = "east-old" },
			"gateway", "east", SeverityWarning, "the Peer was published by east-old but east-gw holds the Lease", "wait"},
		{"no Peer", func(s *fakeSet) { delete(s.cluster("east").hub, "peer") },
			"gateway", "east", SeverityError, "east-gw holds the gateway Lease but the hub has no Peer east", "log of the gateway on east-gw"},
		{"CoreDNS block removed", func(s *fakeSet) {
			cm := s.cluster("east").member["coredns"].(*corev1.ConfigMap)
			cm.Data["Corefile"], _ = dnsconfig.Unpatch(cm.Data["Corefile"])
		}, "dns", "east", SeverityError, "has no Octopus block forwarding clusterset.local to octopus-dns", "re-run `octopus join BROKER-INFO --cluster-id east --kubeconfig east.yaml` (it adds the block again"},
		{"CoreDNS forwards elsewhere", func(s *fakeSet) {
			s.cluster("east").member["dns-service"].(*corev1.Service).Spec.ClusterIP = "10.97.0.99"
		}, "dns", "east", SeverityError, "does not forward clusterset.local to octopus-dns at 10.97.0.99:53", "re-run `octopus join"},
		{"octopus-dns not ready", func(s *fakeSet) {
			c := s.cluster("west")
			c.member["dns-deployment"].(*appsv1.Deployment).Status.ReadyReplicas = 0
			c.member["dns-slice"].(*discoveryv1.EndpointSlice).Endpoints = nil
		}, "dns", "west", SeverityError, "octopus-dns has no ready endpoint (0 of 2 replicas ready)", "kubectl -n octopus-system describe deployment octopus-dns"},
		{"kube-proxy unknown", func(s *fakeSet) { delete(s.cluster("west").member, "kube-proxy") },
			"kube-proxy", "west", SeverityInfo, "does not record kube-proxy's mode", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeSet()
			tt.fault(s)
			r := s.diagnose(t)
			i := slices.IndexFunc(r.Findings, func(f Finding) bool {
				return f.Check == tt.check && f.Cluster == tt.cluster && f.Severity == tt.severity && strings.Contains(f.Message, tt.message)
			})
			if i < 0 {
				t.Fatalf("no %s %s finding of %s containing %q; report:\n%s", tt.severity, tt.check, tt.cluster, tt.message, render(t, r))
			}
			if f := r.Findings[i]; !strings.Contains(f.Fix, tt.fix) {
				t.Errorf("fix %q, want it to contain %q", f.Fix, tt.fix)
			}
			if r.Failed() != (tt.severity == SeverityError) {
				t.Errorf("Failed() = %v with a %s finding", r.Failed(), tt.severity)
			}
		})
	}
}

// TestHubDownSparesMemberSide: with the hub unreachable the checks that need it say so and
// point at hub-access, while what the cluster itself shows is still judged.
func TestHubDownSparesMemberSide(t *testing.T) {
	s := newFakeSet()
	s.hubErr = errors.New("connection refused")
	r := s.diagnose(t)
	for _, want := range []struct{ check, message string }{
		{"heartbeat", "the heartbeat not checked: connection refused"},
		{"gateway", "east-gw is the active gateway"},
		{"gateway", "the gateway's Peer not checked"},
		{"dns", "forwards clusterset.local to octopus-dns"},
	} {
		if !slices.ContainsFunc(r.Findings, func(f Finding) bool {
			return f.Check == want.check && f.Cluster == "east" && strings.Contains(f.Message, want.message)
		}) {
			t.Errorf("no %s finding of east containing %q; report:\n%s", want.check, want.message, render(t, r))
		}
	}
	for _, f := range r.Findings {
		if strings.Contains(f.Message, "not checked") && !strings.Contains(f.Fix, "octopus diagnose hub-access") {
			t.Errorf("%s %s: %q points at %q, want hub-access", f.Check, f.Cluster, f.Message, f.Fix)
		}
	}
}

// TestCheckTimeout: a check that hangs is reported as an error of its own once the check
// timeout passes, and does not hold up the run.
func TestCheckTimeout(t *testing.T) {
	e := newFakeSet().env(t)
	e.opts.CheckTimeout = 100 * time.Millisecond
	hang := check{Check: Check{Name: "hang"}, member: func(ctx context.Context, _ *env, _ *member) []Finding {
		time.Sleep(time.Hour) // ignores ctx, as a stuck call would
		return nil
	}}
	begin := time.Now()
	r := e.diagnose(t.Context(), []check{hang, versionsCheck}, begin)
	if took := time.Since(begin); took > 2*time.Second {
		t.Fatalf("the run took %s", took)
	}
	if n := slices.IndexFunc(r.Findings, func(f Finding) bool {
		return f.Check == "hang" && f.Cluster == "east" && f.Severity == SeverityError && strings.Contains(f.Message, "did not finish within 100ms")
	}); n < 0 {
		t.Fatalf("no timeout finding; report:\n%s", render(t, r))
	}
	if !slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Check == "versions" && f.Severity == SeverityOK }) {
		t.Errorf("the other check's findings are missing:\n%s", render(t, r))
	}
}

func TestUnknownCheck(t *testing.T) {
	_, err := Run(t.Context(), Options{Clusters: []Target{{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Source: "x"}}, Checks: []string{"gateway", "tunnels"}})
	if err == nil || !strings.Contains(err.Error(), `unknown check "tunnels"; the checks are versions, hub-access, registration`) {
		t.Fatalf("Run: %v", err)
	}
}

func TestHubProblem(t *testing.T) {
	gr := schema.GroupResource{Group: "octopus.io", Resource: "clusters"}
	tests := []struct {
		err           error
		message, fix  string
		wantSeverity  Severity
		rejoinCommand string
	}{
		{apierrors.NewUnauthorized("x"), "rejects the credential (401 Unauthorized)", "re-run `octopus join X`", SeverityError, "octopus join X"},
		{apierrors.NewForbidden(gr, "east", errors.New("no")), "refuses it access (403 Forbidden): its RoleBinding to the octopus-cluster Role is missing", "re-run", SeverityError, "octopus join X"},
		{fmt.Errorf("Get: %w", x509.UnknownAuthorityError{}), "presents a certificate that the CA in the credential does not verify", "with a current broker-info", SeverityError, "octopus join X"},
		{errors.New("dial tcp: i/o timeout"), "does not answer from this machine (dial tcp: i/o timeout): tunnels, routes and DNS keep working", "start the hub's API server", SeverityError, "octopus join X"},
		{apierrors.NewUnauthorized("x"), "rejects the credential", "check the --hub-kubeconfig", SeverityError, ""},
	}
	for _, tt := range tests {
		f := hubProblem(tt.err, testHubURL, tt.rejoinCommand)
		if f.Severity != tt.wantSeverity || !strings.Contains(f.Message, tt.message) || !strings.Contains(f.Fix, tt.fix) {
			t.Errorf("hubProblem(%v) = %s %q fix %q, want %q fix %q", tt.err, f.Severity, f.Message, f.Fix, tt.message, tt.fix)
		}
	}
}

func TestJudgeConnectionFamilies(t *testing.T) {
	for _, tc := range []struct {
		name     string
		conn     v1alpha1.PeerConnection
		messages []string
	}{
		{"dual-stack", v1alpha1.PeerConnection{ClusterID: "west", State: v1alpha1.ConnectionConnected, IPFamilies: []string{"IPv4", "IPv6"}},
			[]string{"ok: tunnel to west connected (IPv4, IPv6): rtt"}},
		{"mixed pair: the family left out is said, as info", v1alpha1.PeerConnection{ClusterID: "west", State: v1alpha1.ConnectionConnected, IPFamilies: []string{"IPv4"},
			FamilyMessage: "IPv6 is not offered between east and west: cluster west advertises no IPv6 subnet"},
			[]string{"ok: tunnel to west connected (IPv4): rtt", "info: IPv6 is not offered between east and west: cluster west advertises no IPv6 subnet"}},
		{"a gateway that reports no families", v1alpha1.PeerConnection{ClusterID: "west", State: v1alpha1.ConnectionConnected},
			[]string{"ok: tunnel to west connected: rtt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := judgeConnection(tc.conn, "", "", testNow)
			var got []string
			for _, f := range fs {
				got = append(got, f.Severity.String()+": "+f.Message)
			}
			if len(got) != len(tc.messages) {
				t.Fatalf("findings %q, want %q", got, tc.messages)
			}
			for i, want := range tc.messages {
				if !strings.HasPrefix(got[i], want) {
					t.Errorf("finding %d = %q, want it to start %q", i, got[i], want)
				}
			}
		})
	}
}

func TestJudgeConnectionVia(t *testing.T) {
	fs := judgeConnection(v1alpha1.PeerConnection{ClusterID: "west", Via: "hub", State: v1alpha1.ConnectionError, Message: "no answer"}, "a:1", "", testNow)
	if len(fs) != 1 || fs[0].Severity != SeverityError || !strings.Contains(fs[0].Message, "tunnel to west (via hub) is down") || !strings.Contains(fs[0].Fix, "the hub's gateway carries this tunnel") {
		t.Errorf("judgeConnection via hub: %+v", fs)
	}
	fs = judgeConnection(v1alpha1.PeerConnection{ClusterID: "west", State: v1alpha1.ConnectionConnecting, Message: "waiting for the first answer"}, "", "", testNow)
	if len(fs) != 1 || fs[0].Severity != SeverityWarning || !strings.Contains(fs[0].Message, "still coming up: waiting") {
		t.Errorf("judgeConnection connecting: %+v", fs)
	}
}

func TestReadProxyMode(t *testing.T) {
	pod := func(args ...string) client.Object {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-" + fmt.Sprint(len(args))},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Command: args[:1], Args: args[1:]}}}}
	}
	cm := func(conf string) client.Object {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"}, Data: map[string]string{"config.conf": conf}}
	}
	tests := []struct {
		name     string
		objs     []client.Object
		severity Severity
		message  string
	}{
		{"flag wins over the ConfigMap", []client.Object{pod("kube-proxy", "--proxy-mode=ipvs"), cm("mode: nftables")}, SeverityInfo, "IPVS mode (--proxy-mode of pod kube-system/kube-proxy-2)"},
		{"kubeadm default", []client.Object{pod("kube-proxy", "--config=/var/lib/kube-proxy/config.conf"), cm(`mode: ""`)}, SeverityOK, "iptables mode (ConfigMap kube-system/kube-proxy)"},
		{"other binary's flag", []client.Object{pod("sidecar", "--proxy-mode=nftables")}, SeverityInfo, "does not record"},
		{"unknown mode", []client.Object{cm("mode: kernelspace")}, SeverityWarning, `kube-proxy mode "kernelspace"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(tt.objs...).Build()
			found, err := readProxyMode(t.Context(), c)
			if err != nil {
				t.Fatal(err)
			}
			f := judgeProxyMode(found)
			if f.Severity != tt.severity || !strings.Contains(f.Message, tt.message) {
				t.Errorf("%s %q, want %s containing %q", f.Severity, f.Message, tt.severity, tt.message)
			}
		})
	}
}

func TestJudgeCIDRsWithoutDiscovery(t *testing.T) {
	f := judgeCIDRs("pod", []string{"10.1.0.0/16"}, nil, errors.New("found no --cluster-cidr"), "octopus join X")
	if f.Severity != SeverityInfo || !strings.Contains(f.Message, "cannot be compared") {
		t.Errorf("judgeCIDRs: %+v", f)
	}
	if !sameCIDRs([]string{"10.2.0.0/16", "fd00::/48"}, []string{"fd00:0::/48", "10.2.0.0/16"}) {
		t.Error("sameCIDRs compares as sets of prefixes")
	}
}

func render(t *testing.T, r *Report) string {
	t.Helper()
	var b strings.Builder
	if err := Render(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestJudgeCNIs(t *testing.T) {
	ds := func(ns, name, image string) appsv1.DaemonSet {
		return appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Image: image}},
			}}},
		}
	}
	node := func(name string, annotations map[string]string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
	}
	flannelNode := node("n2", map[string]string{"flannel.alpha.coreos.com/backend-type": "vxlan"})
	tests := []struct {
		name     string
		dss      []appsv1.DaemonSet
		nodes    []corev1.Node
		severity Severity
		message  string
	}{
		{"none: the lab's nodes configure CNI outside pods", []appsv1.DaemonSet{ds("kube-system", "kube-proxy", "registry.k8s.io/kube-proxy:v1.37.1")},
			[]corev1.Node{node("n1", map[string]string{"node.alpha.kubernetes.io/ttl": "0"})}, SeverityInfo, "no known CNI"},
		{"flannel outside pods, by its Node annotations", nil, []corev1.Node{node("n1", nil), flannelNode}, SeverityOK,
			"Flannel (Node n2's flannel.alpha.coreos.com/ annotations, no DaemonSet)"},
		{"flannel's DaemonSet before its annotations", []appsv1.DaemonSet{ds("kube-flannel", "kube-flannel-ds", "ghcr.io/x/y:1")}, []corev1.Node{flannelNode}, SeverityOK,
			"CNI: Flannel (DaemonSet kube-flannel/kube-flannel-ds)"},
		{"canal's flannel annotations", []appsv1.DaemonSet{ds("kube-system", "canal", "calico/node:v3")}, []corev1.Node{flannelNode}, SeverityOK,
			"CNI: Canal (DaemonSet kube-system/canal)"},
		{"by name", []appsv1.DaemonSet{ds("kube-flannel", "kube-flannel-ds", "ghcr.io/x/y:1")}, nil, SeverityOK, "Flannel (DaemonSet kube-flannel/kube-flannel-ds)"},
		{"by image, with a note", []appsv1.DaemonSet{ds("kube-system", "agent", "quay.io/cilium/cilium:v1.19.0")}, nil, SeverityOK, "Cilium (DaemonSet kube-system/agent): with kube-proxy replacement"},
		{"two, each once", []appsv1.DaemonSet{ds("kube-system", "calico-node", "calico/node:v3"), ds("kube-system", "calico-node-2", "calico/node:v3"), ds("kube-system", "kube-multus-ds", "multus-cni:v4")},
			nil, SeverityOK, "Calico (DaemonSet kube-system/calico-node); Multus (meta-plugin) (DaemonSet kube-system/kube-multus-ds)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := judgeCNIs(recogniseCNIs(tt.dss, tt.nodes))
			if f.Severity != tt.severity || !strings.Contains(f.Message, tt.message) {
				t.Errorf("%s %q, want %s containing %q", f.Severity, f.Message, tt.severity, tt.message)
			}
		})
	}
	// Canal's flannel annotates Nodes as flannel does: Canal is one CNI, not two.
	if seen := recogniseCNIs([]appsv1.DaemonSet{ds("kube-system", "canal", "calico/node:v3")}, []corev1.Node{flannelNode}); len(seen) != 1 {
		t.Errorf("Canal with flannel's Node annotations seen as %+v, want Canal alone", seen)
	}
}
