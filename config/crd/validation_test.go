package crd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

const ns = "default"

func validCluster() *v1alpha1.Cluster {
	return &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "east", Namespace: ns},
		Spec:       v1alpha1.ClusterSpec{ClusterID: "east", PodCIDRs: []string{"10.1.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/16"}},
	}
}

func validGlobalnetCluster(id string, egressSize int32) *v1alpha1.Cluster {
	c := validCluster()
	c.Name, c.Spec.ClusterID = id, id
	c.Spec.Addressing, c.Spec.GlobalCIDR, c.Spec.GlobalEgressSize = v1alpha1.AddressingGlobalnet, "242.1.0.0/16", egressSize
	return c
}

// withRawEgressSize is a globalnet Cluster whose spec.globalEgressSize is sent as it is: the
// typed field omits a zero, so a client could not send one through it.
func withRawEgressSize(t *testing.T, size int64) client.Object {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(validGlobalnetCluster("east", 0))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Cluster"))
	if err := unstructured.SetNestedField(u.Object, size, "spec", "globalEgressSize"); err != nil {
		t.Fatal(err)
	}
	return u
}

func validPeer() *v1alpha1.Peer {
	return &v1alpha1.Peer{
		ObjectMeta: metav1.ObjectMeta{Name: "east", Namespace: ns},
		Spec: v1alpha1.PeerSpec{
			ClusterID: "east", Hostname: "gw-1", Backend: v1alpha1.BackendWireGuard,
			PublicKey: "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=",
			Endpoint:  v1alpha1.PeerEndpoint{PrivateIP: "192.0.2.10", PublicIP: "2001:db8::1", Port: 4500},
			Subnets:   []string{"10.1.0.0/16", "fd00::/64"}, HealthCheckIP: "10.1.0.1",
		},
	}
}

func validFabric() *v1alpha1.Fabric {
	return &v1alpha1.Fabric{
		ObjectMeta: metav1.ObjectMeta{Name: "octopus"},
		Spec: v1alpha1.FabricSpec{JoinConfig: &v1alpha1.JoinConfig{
			ClusterID: "east", BrokerInfoSecretRef: v1alpha1.SecretReference{Name: "broker-info"},
		}},
	}
}

func validGlobalIngressIP() *v1alpha1.GlobalIngressIP {
	return &v1alpha1.GlobalIngressIP{
		ObjectMeta: metav1.ObjectMeta{Name: "svc-web", Namespace: ns},
		Spec: v1alpha1.GlobalIngressIPSpec{Target: v1alpha1.GlobalIngressTarget{
			Kind: v1alpha1.GlobalIngressTargetService, Name: "web",
		}},
	}
}

func validGlobalEgressIP() *v1alpha1.GlobalEgressIP {
	return &v1alpha1.GlobalEgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec:       v1alpha1.GlobalEgressIPSpec{NumberOfIPs: 2, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
}

// TestSchemaValidation sends invalid objects to a real API server that serves the generated
// CRDs and checks each is refused with a message naming the problem; the valid ones pass.
func TestSchemaValidation(t *testing.T) {
	c := servingCRDs(t, crd.All)

	tests := []struct {
		name    string
		obj     func() client.Object
		wantErr string // empty: must be accepted
	}{
		{"valid Cluster", func() client.Object { return validCluster() }, ""},
		{"valid Peer", func() client.Object { return validPeer() }, ""},
		{"valid Fabric", func() client.Object { return validFabric() }, ""},
		{"valid GlobalIngressIP", func() client.Object { return validGlobalIngressIP() }, ""},
		{"cluster ID not a label", func() client.Object {
			c := validCluster()
			c.Name, c.Spec.ClusterID = "east-", "east-"
			return c
		}, "spec.clusterID"},
		{"cluster ID too long", func() client.Object {
			c := validCluster()
			c.Name = strings.Repeat("a", 64)
			c.Spec.ClusterID = c.Name
			return c
		}, "spec.clusterID: Too long"},
		{"name differs from cluster ID", func() client.Object {
			c := validCluster()
			c.Spec.ClusterID = "west"
			return c
		}, "metadata.name must equal spec.clusterID"},
		{"pod CIDR not a CIDR", func() client.Object {
			c := validCluster()
			c.Spec.PodCIDRs = []string{"10.1.0.0"}
			return c
		}, `spec.podCIDRs[0]: Invalid value: "10.1.0.0": must be a CIDR`},
		{"three service CIDRs", func() client.Object {
			c := validCluster()
			c.Spec.ServiceCIDRs = []string{"10.96.0.0/16", "10.97.0.0/16", "fd00::/108"}
			return c
		}, "spec.serviceCIDRs: Too many"},
		{"dual-stack cluster: one CIDR per family in each list", func() client.Object {
			c := validCluster()
			c.Spec.PodCIDRs = []string{"10.1.0.0/16", "2001:db8:1::/56"}
			c.Spec.ServiceCIDRs = []string{"2001:db8:96::/112", "10.96.0.0/16"}
			return c
		}, ""},
		{"IPv6-only cluster", func() client.Object {
			c := validCluster()
			c.Spec.PodCIDRs, c.Spec.ServiceCIDRs = []string{"2001:db8:1::/56"}, []string{"2001:db8:96::/112"}
			return c
		}, ""},
		{"two IPv4 pod CIDRs", func() client.Object {
			c := validCluster()
			c.Spec.PodCIDRs = []string{"10.1.0.0/16", "10.2.0.0/16"}
			return c
		}, "spec.podCIDRs: Invalid value: at most one pod CIDR per address family"},
		{"two IPv6 service CIDRs", func() client.Object {
			c := validCluster()
			c.Spec.ServiceCIDRs = []string{"2001:db8:96::/112", "2001:db8:97::/112"}
			return c
		}, "spec.serviceCIDRs: Invalid value: at most one service CIDR per address family"},
		{"two IPv4 pod CIDRs in a Fabric", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.PodCIDRs = []string{"10.1.0.0/16", "10.2.0.0/16"}
			return f
		}, "spec.joinConfig.podCIDRs: Invalid value: at most one pod CIDR per address family"},
		{"dual-stack service CIDRs in a Fabric", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.ServiceCIDRs = []string{"10.96.0.0/16", "2001:db8:96::/112"}
			return f
		}, ""},
		{"globalnet without a global CIDR", func() client.Object {
			c := validCluster()
			c.Spec.Addressing = v1alpha1.AddressingGlobalnet
			return c
		}, "globalnet addressing needs globalCIDR"},
		{"globalnet with an egress size of 4", func() client.Object { return validGlobalnetCluster("east", 4) }, ""},
		{"egress size 0", func() client.Object { return withRawEgressSize(t, 0) }, "spec.globalEgressSize: Invalid value: 0"},
		{"negative egress size", func() client.Object { return validGlobalnetCluster("east", -1) }, "spec.globalEgressSize: Invalid value: -1"},
		{"egress size over a /16", func() client.Object { return validGlobalnetCluster("east", 65535) }, "spec.globalEgressSize: Invalid value: 65535"},
		{"egress size with direct addressing", func() client.Object {
			c := validCluster()
			c.Spec.GlobalCIDR, c.Spec.GlobalEgressSize = "242.1.0.0/16", 4
			return c
		}, "globalEgressSize is only meaningful with globalnet addressing"},
		{"egress size with secondary addressing", func() client.Object {
			c := validCluster()
			c.Spec.Addressing, c.Spec.SecondaryCIDR, c.Spec.GlobalEgressSize = v1alpha1.AddressingSecondary, "10.112.0.0/16", 4
			return c
		}, "globalEgressSize is only meaningful with globalnet addressing"},
		{"unknown addressing", func() client.Object {
			c := validCluster()
			c.Spec.Addressing = "nat"
			return c
		}, "spec.addressing: Unsupported value"},
		{"unknown backend", func() client.Object {
			p := validPeer()
			p.Spec.Backend = "ipsec"
			return p
		}, "spec.backend: Unsupported value: \"ipsec\""},
		{"port 0", func() client.Object {
			p := validPeer()
			p.Spec.Endpoint.Port = 0
			return p
		}, "spec.endpoint.port"},
		{"private IP not an IP", func() client.Object {
			p := validPeer()
			p.Spec.Endpoint.PrivateIP = "192.0.2.300"
			return p
		}, `spec.endpoint.privateIP: Invalid value: "192.0.2.300": must be an IP address`},
		{"public key not 32 bytes of base64", func() client.Object {
			p := validPeer()
			p.Spec.PublicKey = "not-a-key"
			return p
		}, "spec.publicKey"},
		{"subnet not a CIDR", func() client.Object {
			p := validPeer()
			p.Spec.Subnets = []string{"10.1.0.0/33"}
			return p
		}, "spec.subnets[0]"},
		{"Peer named after another cluster", func() client.Object {
			p := validPeer()
			p.Name = "west"
			return p
		}, "metadata.name must equal spec.clusterID"},
		{"Peer with the cluster ID of the hub gateway's Lease", func() client.Object {
			p := validPeer()
			p.Name, p.Spec.ClusterID = v1alpha1.HubGatewayLeaseName, v1alpha1.HubGatewayLeaseName
			return p
		}, "clusterID octopus-hub-gateway is reserved"},
		{"member Peer with the hub gateway's cluster ID", func() client.Object {
			p := validPeer()
			p.Name, p.Spec.ClusterID = v1alpha1.HubPeerName, v1alpha1.HubPeerName
			return p
		}, "the cluster ID hub is the hub gateway's"},
		{"hub-role Peer of a member cluster ID", func() client.Object {
			p := validPeer()
			p.Spec.Role = v1alpha1.PeerRoleHub
			return p
		}, "the cluster ID hub is the hub gateway's"},
		{"the hub gateway's Peer", func() client.Object {
			p := validPeer()
			p.Name, p.Spec.ClusterID, p.Spec.Role = v1alpha1.HubPeerName, v1alpha1.HubPeerName, v1alpha1.PeerRoleHub
			return p
		}, ""},
		{"Cluster with the hub gateway's ID", func() client.Object {
			c := validCluster()
			c.Name, c.Spec.ClusterID = v1alpha1.HubPeerName, v1alpha1.HubPeerName
			return c
		}, "clusterID hub and octopus-hub-gateway are reserved"},
		{"Cluster with the ID of the hub gateway's Lease", func() client.Object {
			c := validCluster()
			c.Name, c.Spec.ClusterID = v1alpha1.HubGatewayLeaseName, v1alpha1.HubGatewayLeaseName
			return c
		}, "clusterID hub and octopus-hub-gateway are reserved"},
		{"Fabric with both roles", func() client.Object {
			f := validFabric()
			f.Spec.HubConfig = &v1alpha1.HubConfig{}
			return f
		}, "set exactly one of hubConfig and joinConfig"},
		{"Fabric with another name", func() client.Object {
			f := validFabric()
			f.Name = "second"
			return f
		}, "must be named octopus"},
		{"Fabric without clusterID (defaulted by the operator)", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.ClusterID = ""
			return f
		}, ""},
		{"Fabric with unknown backend", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.Backend = "ipsec"
			return f
		}, "spec.joinConfig.backend: Unsupported value"},
		{"Fabric with an excluded subnet that is no CIDR", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.ExcludedSubnets = []string{"10.1.0.0/40"}
			return f
		}, "spec.joinConfig.excludedSubnets[0]"},
		{"Fabric with a health interval too short", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.HealthCheck = &v1alpha1.HealthCheck{Interval: metav1.Duration{Duration: time.Millisecond}}
			return f
		}, "joinConfig.healthCheck.interval must be between 100ms and 1m"},
		{"Fabric with a max packet loss too high", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.HealthCheck = &v1alpha1.HealthCheck{Interval: metav1.Duration{Duration: time.Second}, MaxPacketLoss: 61}
			return f
		}, "joinConfig.healthCheck.maxPacketLoss must be between 1 and 60 probes in a row"},
		{"Fabric with a negative max packet loss", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.HealthCheck = &v1alpha1.HealthCheck{Interval: metav1.Duration{Duration: time.Second}, MaxPacketLoss: -1}
			return f
		}, "joinConfig.healthCheck.maxPacketLoss must be between 1 and 60 probes in a row"},
		{"Fabric with a silent-cluster TTL too short", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.SilentClusterTTL = &metav1.Duration{Duration: 5 * time.Second}
			return f
		}, "joinConfig.silentClusterTTL must be between 30s and 24h"},
		{"Fabric with a negative silent-cluster TTL", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.SilentClusterTTL = &metav1.Duration{Duration: -time.Minute}
			return f
		}, "joinConfig.silentClusterTTL must be between 30s and 24h"},
		{"Fabric with a silent-cluster TTL of 2m", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.SilentClusterTTL = &metav1.Duration{Duration: 2 * time.Minute}
			return f
		}, ""},
		{"Fabric hub with an http URL", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig = nil
			f.Spec.HubConfig = &v1alpha1.HubConfig{HubURL: "http://hub:6443"}
			return f
		}, "hubConfig.hubURL must be an https URL"},
		{"Fabric hub with interconnect", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig = nil
			f.Spec.HubConfig = &v1alpha1.HubConfig{Interconnect: &v1alpha1.HubInterconnect{
				Image: "octopus-ovn:v1", TransitSwitches: []string{"ts", "ts-2"}, Addresses: []string{"192.0.2.10", "2001:db8::1"}}}
			return f
		}, ""},
		{"Fabric hub interconnect without an image", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig = nil
			f.Spec.HubConfig = &v1alpha1.HubConfig{Interconnect: &v1alpha1.HubInterconnect{}}
			return f
		}, "spec.hubConfig.interconnect.image"},
		{"Fabric hub interconnect with a transit switch that is no DNS label", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig = nil
			f.Spec.HubConfig = &v1alpha1.HubConfig{Interconnect: &v1alpha1.HubInterconnect{Image: "i", TransitSwitches: []string{"TS_1"}}}
			return f
		}, "hubConfig.interconnect.transitSwitches must be DNS labels"},
		{"Fabric hub interconnect with a host name for an address", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig = nil
			f.Spec.HubConfig = &v1alpha1.HubConfig{Interconnect: &v1alpha1.HubInterconnect{Image: "i", Addresses: []string{"hub-node-1"}}}
			return f
		}, "hubConfig.interconnect.addresses must be IP addresses"},
		{"Fabric member with interconnect", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.Addressing = v1alpha1.AddressingSecondary
			f.Spec.JoinConfig.Interconnect = &v1alpha1.JoinInterconnect{ICDBHost: []string{"192.0.2.1", "hub-2"}, GWNodes: []string{"gw1", "gw2"}}
			return f
		}, ""},
		{"Fabric member with interconnect and direct addressing", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.Interconnect = &v1alpha1.JoinInterconnect{ICDBHost: []string{"192.0.2.1"}}
			return f
		}, "joinConfig.interconnect joins the clusters' OVN networks: it needs joinConfig.addressing secondary"},
		{"Fabric member interconnect with a port in icDBHost", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.Addressing = v1alpha1.AddressingSecondary
			f.Spec.JoinConfig.Interconnect = &v1alpha1.JoinInterconnect{ICDBHost: []string{"192.0.2.1:6645"}}
			return f
		}, "icDBHost must be host names or IPv4 addresses without ports"},
		{"Fabric member interconnect with a gateway node twice", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.Addressing = v1alpha1.AddressingSecondary
			f.Spec.JoinConfig.Interconnect = &v1alpha1.JoinInterconnect{ICDBHost: []string{"h"}, GWNodes: []string{"a", "b", "a"}}
			return f
		}, "gwNodes lists a node twice"},
		{"Fabric member interconnect without hosts", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.Addressing = v1alpha1.AddressingSecondary
			f.Spec.JoinConfig.Interconnect = &v1alpha1.JoinInterconnect{}
			return f
		}, "icDBHost"},
		{"Fabric with an unknown cloud", func() client.Object {
			f := validFabric()
			f.Spec.CloudPrepareConfig = &v1alpha1.CloudPrepareConfig{Provider: "openstack"}
			return f
		}, "spec.cloudPrepareConfig.provider: Unsupported value"},
		{"Fabric with an egress size and direct addressing", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.GlobalEgressSize = 4
			return f
		}, "joinConfig.globalEgressSize is only meaningful with joinConfig.addressing globalnet"},
		{"Fabric with an egress size over a /16", func() client.Object {
			f := validFabric()
			f.Spec.JoinConfig.Addressing, f.Spec.JoinConfig.GlobalEgressSize = v1alpha1.AddressingGlobalnet, 65535
			return f
		}, "spec.joinConfig.globalEgressSize: Invalid value: 65535"},
		{"Fabric preparing gateways by count and selector", func() client.Object {
			f := validFabric()
			f.Spec.CloudPrepareConfig = &v1alpha1.CloudPrepareConfig{Provider: v1alpha1.CloudProviderGeneric, Gateways: ptr.To[int32](2), GatewayNodeSelector: map[string]string{"edge": ""}}
			return f
		}, "set at most one of gateways and gatewayNodeSelector"},
		{"GlobalIngressIP for a pod without its service", func() client.Object {
			g := validGlobalIngressIP()
			g.Spec.Target.Kind = v1alpha1.GlobalIngressTargetPod
			return g
		}, "a Pod target needs serviceName"},
		{"GlobalIngressIP for a Node", func() client.Object {
			g := validGlobalIngressIP()
			g.Spec.Target.Kind = "Node"
			return g
		}, "spec.target.kind: Unsupported value"},
		{"valid GlobalEgressIP", func() client.Object { return validGlobalEgressIP() }, ""},
		{"GlobalEgressIP of 65 addresses", func() client.Object {
			g := validGlobalEgressIP()
			g.Spec.NumberOfIPs = 65
			return g
		}, "spec.numberOfIPs: Invalid value: 65"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkAdmission(t, c, tt.obj(), tt.wantErr) })
	}

	// clusterID is immutable.
	cl := validCluster()
	if err := c.Create(t.Context(), cl); err != nil {
		t.Fatal(err)
	}
	cl.Spec.ClusterID = "west"
	if err := c.Update(t.Context(), cl); err == nil || !strings.Contains(err.Error(), "clusterID is immutable") {
		t.Fatalf("changing clusterID: err = %v, want immutable", err)
	}

	clusterEgressSizeImmutable(t, c)
	fabricImmutable(t, c)

	// A GlobalIngressIP's target is immutable, and its status.ip must be an address.
	g := validGlobalIngressIP()
	if err := c.Create(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	g.Status.IP = "242.1.0.300"
	if err := c.Status().Update(t.Context(), g); err == nil || !strings.Contains(err.Error(), "must be an IP address") {
		t.Fatalf("status.ip 242.1.0.300: err = %v, want refused", err)
	}
	g.Status.IP = "242.1.0.30"
	if err := c.Status().Update(t.Context(), g); err != nil {
		t.Fatalf("status.ip 242.1.0.30: %v", err)
	}
	g.Spec.Target.Name = "other"
	if err := c.Update(t.Context(), g); err == nil || !strings.Contains(err.Error(), "target is immutable") {
		t.Fatalf("changing the target: err = %v, want immutable", err)
	}

	// A GlobalEgressIP's allocatedIPs must be addresses.
	e := validGlobalEgressIP()
	if err := c.Create(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	e.Status.AllocatedIPs = []string{"242.1.0.30", "242.1.0.300"}
	if err := c.Status().Update(t.Context(), e); err == nil || !strings.Contains(err.Error(), "every entry must be an IP address") {
		t.Fatalf("status.allocatedIPs with 242.1.0.300: err = %v, want refused", err)
	}
}

// clusterEgressSizeImmutable checks that a Cluster's egress size, which places its pool, cannot
// change while it is joined: not its value, and not by adding or removing it unless the
// effective size stays the default 8.
func clusterEgressSizeImmutable(t *testing.T, c client.Client) {
	t.Helper()
	for _, tt := range []struct {
		name    string
		from    int32
		to      int32
		wantErr string
	}{
		{"4 to 16", 4, 16, "globalEgressSize is immutable: the egress range and the pool after it would move under addresses already handed out; to change it, leave and join again"},
		{"4 to unset", 4, 0, "globalEgressSize cannot be added or removed after join (unset means 8)"},
		{"unset to 4", 0, 4, "globalEgressSize cannot be added or removed after join (unset means 8)"},
		{"unset to 8, the default", 0, 8, ""},
		{"8 to unset, the default", 8, 0, ""},
		{"4 stays 4", 4, 4, ""},
	} {
		t.Run("Cluster update: egress size "+tt.name, func(t *testing.T) {
			cl := validGlobalnetCluster("north", tt.from)
			if err := c.Create(t.Context(), cl); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Delete(context.Background(), cl) })
			cl.Spec.GlobalEgressSize = tt.to
			err := c.Update(t.Context(), cl)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("update refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v\nwant it to contain %q", err, tt.wantErr)
			}
		})
	}
}

// fabricImmutable checks that the Fabric's identity fields refuse a change with a message that
// names the field and the way to change it, and that the live-reconfigurable fields accept one.
func fabricImmutable(t *testing.T, c client.Client) {
	t.Helper()
	f := validFabric()
	f.Spec.JoinConfig.ClusterID = ""
	if err := c.Create(t.Context(), f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), f) })
	for _, tt := range []struct {
		name    string
		edit    func(*v1alpha1.Fabric)
		wantErr string
	}{
		{"backend changes live", func(f *v1alpha1.Fabric) { f.Spec.JoinConfig.Backend = v1alpha1.BackendVXLAN }, ""},
		{"gateway selector changes live", func(f *v1alpha1.Fabric) { f.Spec.JoinConfig.GatewayNodeSelector = map[string]string{"edge": "true"} }, ""},
		{"setting clusterID later", func(f *v1alpha1.Fabric) { f.Spec.JoinConfig.ClusterID = "west" },
			"joinConfig.clusterID is immutable: it is the cluster's identity on the hub; delete the Fabric"},
		{"another hub", func(f *v1alpha1.Fabric) { f.Spec.JoinConfig.BrokerInfoSecretRef.Name = "other-hub" },
			"joinConfig.brokerInfoSecretRef (the hub) is immutable: delete the Fabric"},
		{"an egress size with direct addressing", func(f *v1alpha1.Fabric) { f.Spec.JoinConfig.GlobalEgressSize = 8 },
			"joinConfig.globalEgressSize is only meaningful with joinConfig.addressing globalnet"},
		{"globalnet with the default egress size written out", func(f *v1alpha1.Fabric) {
			f.Spec.JoinConfig.Addressing, f.Spec.JoinConfig.GlobalEgressSize = v1alpha1.AddressingGlobalnet, 8
		}, ""},
		{"another egress size", func(f *v1alpha1.Fabric) { f.Spec.JoinConfig.GlobalEgressSize = 4 },
			"joinConfig.globalEgressSize is immutable: delete the Fabric"},
		{"becoming the hub", func(f *v1alpha1.Fabric) {
			f.Spec.JoinConfig = nil
			f.Spec.HubConfig = &v1alpha1.HubConfig{}
		}, "the Fabric's role (hubConfig or joinConfig) is immutable: delete the Fabric"},
	} {
		t.Run("Fabric update: "+tt.name, func(t *testing.T) {
			got := &v1alpha1.Fabric{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(f), got); err != nil {
				t.Fatal(err)
			}
			tt.edit(got)
			err := c.Update(t.Context(), got)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("update refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v\nwant it to contain %q", err, tt.wantErr)
			}
		})
	}

	hubFabric := &v1alpha1.Fabric{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.FabricName}, Spec: v1alpha1.FabricSpec{HubConfig: &v1alpha1.HubConfig{}}}
	if err := c.Delete(t.Context(), f); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return c.Create(ctx, hubFabric) == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), hubFabric) })
	hubFabric.Spec.HubConfig.Namespace = "elsewhere"
	if err := c.Update(t.Context(), hubFabric); err == nil || !strings.Contains(err.Error(), "hubConfig.namespace is immutable") {
		t.Fatalf("moving the hub namespace: err = %v, want immutable", err)
	}
}

// checkAdmission creates obj as a dry run: with wantErr empty it must be accepted, otherwise
// refused as Invalid with a message containing wantErr.
func checkAdmission(t *testing.T, c client.Client, obj client.Object, wantErr string) {
	t.Helper()
	err := c.Create(t.Context(), obj, client.DryRunAll)
	switch {
	case wantErr == "" && err != nil:
		t.Fatalf("valid object refused: %v", err)
	case wantErr != "" && !apierrors.IsInvalid(err):
		t.Fatalf("err = %v, want Invalid", err)
	case wantErr != "" && !strings.Contains(err.Error(), wantErr):
		t.Fatalf("err = %v\nwant it to contain %q", err, wantErr)
	}
}

// servingCRDs starts a real API server, installs the CRDs of set (crd.All, crd.Member) and
// returns an admin client of it.
func servingCRDs(t *testing.T, set func() ([]*apiextensionsv1.CustomResourceDefinition, error)) client.Client {
	t.Helper()
	log.SetLogger(logr.Discard())
	env := testenv.ControlPlanes(t, "api")
	c, err := client.New(env.Cluster("api").RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	crds, err := set()
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.InstallCRDs(t.Context(), c, crds); err != nil {
		t.Fatal(err)
	}
	return c
}
