package dashboard

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/heartbeat"
)

var now = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func peer(id, host string, conns ...v1alpha1.PeerConnection) v1alpha1.Peer {
	return v1alpha1.Peer{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec: v1alpha1.PeerSpec{ClusterID: id, Hostname: host, Role: v1alpha1.PeerRoleMember,
			Endpoint: v1alpha1.PeerEndpoint{PrivateIP: "192.168.0.1", Port: 4500}},
		Status: v1alpha1.PeerStatus{Driver: "wireguard-go", Connections: conns,
			Conditions: []metav1.Condition{{Type: "Published", Status: metav1.ConditionTrue, Reason: "Elected"}}},
	}
}

func conn(to string, state v1alpha1.ConnectionState, rtt time.Duration, loss int32) v1alpha1.PeerConnection {
	return v1alpha1.PeerConnection{ClusterID: to, State: state, RTT: v1alpha1.LatencyStats{Avg: metav1.Duration{Duration: rtt}}, LossPercent: loss}
}

func lease(holder string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](6), RenewTime: &metav1.MicroTime{Time: renewed}}}
}

func record(cluster, ns, name string) mcsv1beta1.ServiceImport {
	return mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-" + ns + "-" + cluster, Namespace: v1alpha1.DefaultHubNamespace, Labels: map[string]string{
			v1alpha1.ClusterLabel: cluster, v1alpha1.ServiceNamespaceLabel: ns, mcsv1beta1.LabelServiceName: name}},
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP},
	}
}

func imported(ns, name string) mcsv1beta1.ServiceImport {
	return mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func status(id string) cluster.Status {
	age := 2 * time.Second
	return cluster.Status{ClusterID: id, PodCIDRs: []string{"10.1.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/16"},
		Addressing: v1alpha1.AddressingDirect, State: heartbeat.StateConnected, HeartbeatAge: &age}
}

// healthy is a hub with two clusters whose gateways run and report each other connected,
// east exporting web, imported in both.
func healthy() Snapshot {
	return Snapshot{
		Taken: now, HubNamespace: v1alpha1.DefaultHubNamespace,
		Statuses: []cluster.Status{status("west"), status("east")},
		Clusters: []v1alpha1.Cluster{{Spec: v1alpha1.ClusterSpec{ClusterID: "east"}, Status: v1alpha1.ClusterStatus{AgentVersion: "v1",
			Conditions: []metav1.Condition{{Type: v1alpha1.ClusterConditionAgentConnected, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonHeartbeating}}}}},
		Peers: []v1alpha1.Peer{
			peer("west", "west-gw", conn("east", v1alpha1.ConnectionConnected, 1500*time.Microsecond, 0)),
			peer("east", "east-gw", conn("west", v1alpha1.ConnectionConnected, 1200*time.Microsecond, 0)),
		},
		Records: []mcsv1beta1.ServiceImport{record("east", "shop", "web")},
		Members: []MemberSnapshot{
			{Source: "east.yaml", ClusterID: "east", GatewayLease: lease("east-gw", now.Add(-time.Second)), Imports: []mcsv1beta1.ServiceImport{imported("shop", "web")}},
			{Source: "west.yaml", ClusterID: "west", GatewayLease: lease("west-gw", now.Add(-time.Second)), Imports: []mcsv1beta1.ServiceImport{imported("shop", "web"), imported("other", "unexported")}},
		},
	}
}

func TestBuildView(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Snapshot)
		check  func(t *testing.T, v View)
	}{{
		name: "healthy: clusters sorted, gateways running, both halves connected, the service's exporter and importers",
		check: func(t *testing.T, v View) {
			if got := ids(v); !cmp.Equal(got, []string{"east", "west"}) {
				t.Errorf("clusters %v", got)
			}
			east := v.Clusters[0]
			if east.Gateway == nil || east.Gateway.Liveness != LivenessRunning || east.Gateway.Endpoint != "192.168.0.1:4500" || east.Gateway.Backend != "wireguard" {
				t.Errorf("east's gateway %+v", east.Gateway)
			}
			wantConds := []string{"Cluster/AgentConnected/True", "Peer/Published/True"}
			if got := condKeys(east.Conditions); !cmp.Equal(got, wantConds) {
				t.Errorf("east's conditions %v, want %v", got, wantConds)
			}
			if east.Source != "east.yaml" || east.AgentVersion != "v1" || !east.Registered || *east.HeartbeatSeconds != 2 {
				t.Errorf("east %+v", east)
			}
			want := []Tunnel{
				{From: "east", To: "west", State: "Connected", RTTMillis: 1.2},
				{From: "west", To: "east", State: "Connected", RTTMillis: 1.5},
			}
			if diff := cmp.Diff(want, v.Tunnels); diff != "" {
				t.Errorf("tunnels (-want +got):\n%s", diff)
			}
			wantSvc := []Service{{Namespace: "shop", Name: "web", Type: "ClusterSetIP", Exporters: []string{"east"}, Importers: []string{"east", "west"}}}
			if diff := cmp.Diff(wantSvc, v.Services); diff != "" {
				t.Errorf("services (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "a killed gateway: its Lease unrenewed, its Peer's last report marked stale, the other side's report kept",
		change: func(s *Snapshot) {
			s.Members[0].GatewayLease = lease("east-gw", now.Add(-10*time.Second))
			s.Peers[0].Status.Connections[0] = conn("east", v1alpha1.ConnectionError, 0, 100)
		},
		check: func(t *testing.T, v View) {
			if l := v.Clusters[0].Gateway.Liveness; l != LivenessStopped {
				t.Errorf("east's gateway %s", l)
			}
			if v.Tunnels[0].State != StateStale || v.Tunnels[0].Message == "" {
				t.Errorf("east's report %+v, want stale with a message", v.Tunnels[0])
			}
			if v.Tunnels[1].State != "Error" || v.Tunnels[1].LossPercent != 100 {
				t.Errorf("west's report %+v", v.Tunnels[1])
			}
		},
	}, {
		name:   "a gateway Lease without holder is a stopped gateway",
		change: func(s *Snapshot) { s.Members[0].GatewayLease.Spec.HolderIdentity = ptr.To("") },
		check: func(t *testing.T, v View) {
			if l := v.Clusters[0].Gateway.Liveness; l != LivenessStopped {
				t.Errorf("east's gateway %s", l)
			}
		},
	}, {
		name: "no kubeconfig for a cluster: liveness unknown, reports kept as they are, no importers known",
		change: func(s *Snapshot) {
			s.Members = s.Members[1:]
		},
		check: func(t *testing.T, v View) {
			if l := v.Clusters[0].Gateway.Liveness; l != LivenessUnknown || v.Clusters[0].Source != "" {
				t.Errorf("east: liveness %s, source %q", l, v.Clusters[0].Source)
			}
			if v.Tunnels[0].State != "Connected" {
				t.Errorf("east's report %+v", v.Tunnels[0])
			}
			if got := v.Services[0].Importers; !cmp.Equal(got, []string{"west"}) {
				t.Errorf("importers %v", got)
			}
		},
	}, {
		name: "a member that failed to answer: liveness unknown and its error shown",
		change: func(s *Snapshot) {
			s.Members[0] = MemberSnapshot{Source: "east.yaml", ClusterID: "east", Error: "connection refused"}
		},
		check: func(t *testing.T, v View) {
			if v.Clusters[0].Gateway.Liveness != LivenessUnknown || v.Clusters[0].Error != "connection refused" {
				t.Errorf("east %+v", v.Clusters[0])
			}
		},
	}, {
		name: "hub down: the hub's error, and the members known from their kubeconfigs",
		change: func(s *Snapshot) {
			s.HubError, s.Statuses, s.Clusters, s.Peers, s.Records = "dial tcp: connection refused", nil, nil, nil, nil
			s.Members[1] = MemberSnapshot{Source: "west.yaml", Error: "no credential"}
		},
		check: func(t *testing.T, v View) {
			if v.Hub.Error == "" || len(v.Tunnels) != 0 || len(v.Services) != 0 {
				t.Errorf("view %+v", v)
			}
			if got := ids(v); !cmp.Equal(got, []string{"east", "west.yaml"}) {
				t.Errorf("clusters %v", got)
			}
			if v.Clusters[0].Registered || v.Clusters[0].Heartbeat != heartbeat.StateNeverSeen || v.Clusters[1].Error != "no credential" {
				t.Errorf("clusters %+v", v.Clusters)
			}
		},
	}, {
		name: "hub topology: the hub's gateway, tunnels via the hub",
		change: func(s *Snapshot) {
			hub := peer(v1alpha1.HubPeerName, "hub-gw", conn("east", v1alpha1.ConnectionConnected, time.Millisecond, 0))
			hub.Spec.Role = v1alpha1.PeerRoleHub
			s.Peers = append(s.Peers, hub)
			s.Peers[0].Status.Connections[0].Via = v1alpha1.HubPeerName
			s.HubGatewayLease = lease("hub-gw", now.Add(-10*time.Second))
		},
		check: func(t *testing.T, v View) {
			if v.Hub.Gateway == nil || v.Hub.Gateway.Hostname != "hub-gw" || v.Hub.Gateway.Liveness != LivenessStopped {
				t.Fatalf("hub gateway %+v", v.Hub.Gateway)
			}
			if got := ids(v); !cmp.Equal(got, []string{"east", "west"}) {
				t.Errorf("the hub's Peer is not a cluster: %v", got)
			}
			if v.Tunnels[1].From != "hub" || v.Tunnels[1].State != StateStale {
				t.Errorf("the stopped hub gateway's report %+v", v.Tunnels[1])
			}
			if v.Tunnels[2].From != "west" || v.Tunnels[2].Via != "hub" {
				t.Errorf("west's tunnel %+v", v.Tunnels[2])
			}
		},
	}, {
		name: "a service exported by two clusters, records without labels ignored",
		change: func(s *Snapshot) {
			s.Records = append(s.Records, record("west", "shop", "web"), mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Name: "foreign"}})
		},
		check: func(t *testing.T, v View) {
			if len(v.Services) != 1 || !cmp.Equal(v.Services[0].Exporters, []string{"east", "west"}) {
				t.Errorf("services %+v", v.Services)
			}
		},
	}, {
		name:   "a cluster without a Peer has no gateway",
		change: func(s *Snapshot) { s.Peers = s.Peers[:1] },
		check: func(t *testing.T, v View) {
			if v.Clusters[0].Gateway != nil || len(v.Clusters[0].Conditions) != 1 {
				t.Errorf("east %+v", v.Clusters[0])
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := healthy()
			if tt.change != nil {
				tt.change(&s)
			}
			tt.check(t, BuildView(s))
		})
	}
}

func ids(v View) []string {
	var out []string
	for _, c := range v.Clusters {
		out = append(out, c.ID)
	}
	return out
}

func condKeys(cs []Condition) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Object+"/"+c.Type+"/"+c.Status)
	}
	return out
}
