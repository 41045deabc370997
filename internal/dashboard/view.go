package dashboard

import (
	"cmp"
	"net"
	"slices"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/heartbeat"
)

// View is the cluster set as the page draws it: the JSON of /api/view.
type View struct {
	Taken    time.Time `json:"taken"`
	Hub      Hub       `json:"hub"`
	Clusters []Cluster `json:"clusters"`
	// Tunnels are one per reporting gateway and remote cluster: a pair of clusters has two,
	// one per side, because each side measures its own view of the tunnel.
	Tunnels  []Tunnel  `json:"tunnels"`
	Services []Service `json:"services"`
}

// Hub is the hub and its gateway, if the set has one (hub topology).
type Hub struct {
	Namespace string `json:"namespace"`
	// Error is why the hub could not be read; the rest of the view is then what the members
	// alone show.
	Error   string   `json:"error,omitempty"`
	Gateway *Gateway `json:"gateway,omitempty"`
}

// Cluster is one member cluster.
type Cluster struct {
	ID string `json:"id"`
	// Source is the kubeconfig the cluster was read with; empty when only the hub knows it.
	Source string `json:"source,omitempty"`
	// Registered is false for a cluster whose kubeconfig was given but that the hub does not
	// list.
	Registered bool `json:"registered"`
	// Heartbeat is heartbeat.StateConnected, StateStale or StateNeverSeen.
	Heartbeat        string      `json:"heartbeat"`
	HeartbeatSeconds *float64    `json:"heartbeatSeconds,omitempty"`
	AgentVersion     string      `json:"agentVersion,omitempty"`
	Addressing       string      `json:"addressing,omitempty"`
	PodCIDRs         []string    `json:"podCIDRs"`
	ServiceCIDRs     []string    `json:"serviceCIDRs"`
	GlobalCIDR       string      `json:"globalCIDR,omitempty"`
	Conditions       []Condition `json:"conditions"`
	Gateway          *Gateway    `json:"gateway,omitempty"`
	// Error is why the cluster's own API server could not be read.
	Error string `json:"error,omitempty"`
}

// Gateway is a cluster's (or the hub's) active gateway as its Peer and Lease show it.
type Gateway struct {
	Hostname string `json:"hostname"`
	Endpoint string `json:"endpoint,omitempty"`
	Backend  string `json:"backend"`
	Driver   string `json:"driver,omitempty"`
	// Liveness is LivenessRunning, LivenessStopped or LivenessUnknown.
	Liveness   string      `json:"liveness"`
	Conditions []Condition `json:"conditions"`
}

// Gateway liveness, from the election Lease its gateway renews.
const (
	// LivenessRunning: the Lease is held and was renewed within its duration.
	LivenessRunning = "running"
	// LivenessStopped: no Lease, no holder, or not renewed within its duration.
	LivenessStopped = "stopped"
	// LivenessUnknown: the Lease was not read (no kubeconfig for the cluster, or it failed).
	LivenessUnknown = "unknown"
)

// Condition is a condition of a Cluster or a Peer, labelled with which.
type Condition struct {
	Object  string    `json:"object"`
	Type    string    `json:"type"`
	Status  string    `json:"status"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
	Since   time.Time `json:"since"`
}

// Tunnel is a gateway's report of its tunnel to another cluster.
type Tunnel struct {
	From string `json:"from"`
	To   string `json:"to"`
	// State is the reported v1alpha1.ConnectionState, or StateStale when the reporting
	// gateway is known to be stopped (its Peer still shows its last report).
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
	// Via is the cluster that relays the tunnel ("hub" in the hub topology); empty when direct.
	Via         string  `json:"via,omitempty"`
	RTTMillis   float64 `json:"rttMillis"`
	LossPercent int32   `json:"lossPercent"`
}

// StateStale is a Tunnel reported by a gateway that has stopped.
const StateStale = "Stale"

// Service is an exported service: who exports it and who imports it.
type Service struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Type      string   `json:"type,omitempty"`
	Exporters []string `json:"exporters"`
	// Importers are the clusters, among those read directly, that have its ServiceImport.
	Importers []string `json:"importers"`
}

// BuildView turns a snapshot into the page's view, sorted so that the page (and its
// tests) see a stable order.
func BuildView(s Snapshot) View {
	v := View{Taken: s.Taken, Hub: Hub{Namespace: s.HubNamespace, Error: s.HubError}, Clusters: []Cluster{}, Tunnels: []Tunnel{}, Services: []Service{}}
	members := map[string]MemberSnapshot{}
	for _, m := range s.Members {
		if m.ClusterID != "" {
			members[m.ClusterID] = m
		}
	}
	peers := map[string]v1alpha1.Peer{}
	for _, p := range s.Peers {
		peers[p.Spec.ClusterID] = p
	}
	objects := map[string]v1alpha1.Cluster{}
	for _, c := range s.Clusters {
		objects[c.Spec.ClusterID] = c
	}

	liveness := map[string]string{}
	for _, st := range s.Statuses {
		c := Cluster{
			ID: st.ClusterID, Registered: true, Heartbeat: st.State, Addressing: string(st.Addressing),
			PodCIDRs: st.PodCIDRs, ServiceCIDRs: st.ServiceCIDRs, GlobalCIDR: st.GlobalCIDR, Conditions: []Condition{},
		}
		if st.HeartbeatAge != nil {
			secs := st.HeartbeatAge.Seconds()
			c.HeartbeatSeconds = &secs
		}
		obj := objects[st.ClusterID]
		c.AgentVersion = obj.Status.AgentVersion
		c.Conditions = append(c.Conditions, conditions("Cluster", obj.Status.Conditions)...)
		var lease *coordinationv1.Lease
		if m, ok := members[st.ClusterID]; ok {
			c.Source, c.Error, lease = m.Source, m.Error, m.GatewayLease
		}
		_, read := members[st.ClusterID]
		if p, ok := peers[st.ClusterID]; ok {
			c.Gateway = gateway(p, gatewayLiveness(lease, read && c.Error == "", s.Taken))
			c.Conditions = append(c.Conditions, c.Gateway.Conditions...)
			liveness[st.ClusterID] = c.Gateway.Liveness
		}
		v.Clusters = append(v.Clusters, c)
	}
	// Clusters read directly that the hub does not list (not joined, or the hub is down).
	for _, m := range s.Members {
		if m.ClusterID != "" && slices.ContainsFunc(v.Clusters, func(c Cluster) bool { return c.ID == m.ClusterID }) {
			continue
		}
		id := m.ClusterID
		if id == "" {
			id = m.Source
		}
		v.Clusters = append(v.Clusters, Cluster{
			ID: id, Source: m.Source, Heartbeat: heartbeat.StateNeverSeen, PodCIDRs: []string{}, ServiceCIDRs: []string{},
			Conditions: []Condition{}, Error: m.Error,
		})
	}
	slices.SortFunc(v.Clusters, func(a, b Cluster) int { return cmp.Compare(a.ID, b.ID) })

	if p, ok := peers[v1alpha1.HubPeerName]; ok && p.Spec.Role == v1alpha1.PeerRoleHub {
		// The hub gateway's Lease is in the hub namespace, which the hub reader reads.
		v.Hub.Gateway = gateway(p, gatewayLiveness(s.HubGatewayLease, s.HubError == "", s.Taken))
		liveness[p.Spec.ClusterID] = v.Hub.Gateway.Liveness
	}

	for _, p := range s.Peers {
		for _, pc := range p.Status.Connections {
			t := Tunnel{
				From: p.Spec.ClusterID, To: pc.ClusterID, State: string(pc.State), Message: pc.Message, Via: pc.Via,
				RTTMillis: float64(pc.RTT.Avg.Microseconds()) / 1000, LossPercent: pc.LossPercent,
			}
			if liveness[t.From] == LivenessStopped {
				t.State, t.Message = StateStale, "the reporting gateway "+p.Spec.Hostname+" is not running: this is its last report"
			}
			v.Tunnels = append(v.Tunnels, t)
		}
	}
	slices.SortFunc(v.Tunnels, func(a, b Tunnel) int { return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To)) })

	v.Services = services(s.Records, s.Members)
	return v
}

func gateway(p v1alpha1.Peer, liveness string) *Gateway {
	backend := p.Spec.Backend
	if backend == "" {
		backend = v1alpha1.BackendWireGuard
	}
	g := &Gateway{Hostname: p.Spec.Hostname, Backend: string(backend), Driver: p.Status.Driver, Liveness: liveness,
		Conditions: conditions("Peer", p.Status.Conditions)}
	ip := p.Spec.Endpoint.PublicIP
	if ip == "" {
		ip = p.Spec.Endpoint.PrivateIP
	}
	if ip != "" {
		g.Endpoint = net.JoinHostPort(ip, strconv.Itoa(int(p.Spec.Endpoint.Port)))
	}
	return g
}

// gatewayLiveness judges a gateway by its election Lease, which the active gateway renews:
// a killed gateway leaves its Peer on the hub with its last report, and only the Lease shows
// that nobody stands behind it any more. read says whether the Lease was read at all.
func gatewayLiveness(lease *coordinationv1.Lease, read bool, now time.Time) string {
	switch {
	case !read:
		return LivenessUnknown
	case lease == nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "":
		return LivenessStopped
	case heartbeat.State(lease, now) != heartbeat.StateConnected:
		return LivenessStopped
	}
	return LivenessRunning
}

func conditions(object string, cs []metav1.Condition) []Condition {
	out := make([]Condition, 0, len(cs))
	for _, c := range cs {
		out = append(out, Condition{Object: object, Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message, Since: c.LastTransitionTime.Time})
	}
	return out
}

// services groups the hub's records by service and adds the members that import each.
func services(records []mcsv1beta1.ServiceImport, members []MemberSnapshot) []Service {
	type key struct{ namespace, name string }
	byKey := map[key]*Service{}
	for _, r := range records {
		k := key{r.Labels[v1alpha1.ServiceNamespaceLabel], r.Labels[mcsv1beta1.LabelServiceName]}
		if k.name == "" {
			continue
		}
		s := byKey[k]
		if s == nil {
			s = &Service{Namespace: k.namespace, Name: k.name, Type: string(r.Spec.Type), Exporters: []string{}, Importers: []string{}}
			byKey[k] = s
		}
		s.Exporters = append(s.Exporters, r.Labels[v1alpha1.ClusterLabel])
	}
	for _, m := range members {
		if m.ClusterID == "" {
			continue
		}
		for _, si := range m.Imports {
			if s := byKey[key{si.Namespace, si.Name}]; s != nil {
				s.Importers = append(s.Importers, m.ClusterID)
			}
		}
	}
	out := make([]Service, 0, len(byKey))
	for _, s := range byKey {
		slices.Sort(s.Exporters)
		s.Exporters = slices.Compact(s.Exporters)
		slices.Sort(s.Importers)
		s.Importers = slices.Compact(s.Importers)
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Service) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}
