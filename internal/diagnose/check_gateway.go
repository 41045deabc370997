package diagnose

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

var gatewayCheck = check{
	Check: Check{Name: "gateway", Summary: "each cluster's active gateway: its Lease, its Peer on the hub, and every tunnel's state, handshake, RTT and loss"},
	set:   checkHubGateway,
	member: func(ctx context.Context, e *env, m *member) []Finding {
		site := gatewaySite{
			lease:   fmt.Sprintf("Lease %s/%s in the cluster", v1alpha1.SystemNamespace, v1alpha1.GatewayLeaseName),
			start:   "run `octopus-agent gateway` on a node labelled node-restriction.kubernetes.io/octopus-gateway=true (nodes labelled only octopus.io/gateway=true, the label before it, no longer qualify: `kubectl label node <node> node-restriction.kubernetes.io/octopus-gateway=true`)",
			standby: "a gateway on another node labelled node-restriction.kubernetes.io/octopus-gateway=true would have taken over by itself",
		}
		lease := &coordinationv1.Lease{}
		err := m.c.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayLeaseName}, lease)
		switch {
		case apierrors.IsNotFound(err):
			lease = nil
		case err != nil:
			return []Finding{notChecked("the gateway", fmt.Errorf("reading its Lease: %w", err), "versions")}
		}
		if m.id == "" {
			return []Finding{notChecked("the gateway", errNoClusterID, "hub-access")}
		}
		peers, err := e.hub.peers.get(ctx)
		if err != nil {
			// The gateway keeps working without the hub; only its Peer cannot be read.
			f, _ := judgeGatewayLease(site, lease, e.opts.Now())
			return []Finding{f, notChecked("the gateway's Peer", err, "hub-access")}
		}
		return judgeGateway(site, m.id, lease, peers, e.opts.Now())
	},
}

// checkHubGateway checks the hub's gateway when the set uses one (the hub topology): its
// Lease in the hub namespace and its Peer.
func checkHubGateway(ctx context.Context, e *env) []Finding {
	peers, err := e.hub.peers.get(ctx)
	if err != nil {
		return nil // the per-cluster parts say so
	}
	if !slices.ContainsFunc(peers, func(p v1alpha1.Peer) bool { return p.Name == v1alpha1.HubPeerName }) {
		return nil // no hub gateway; a cluster that needs one says so in its Peer (NoHubGateway)
	}
	leases, err := e.hub.leases.get(ctx)
	if err != nil {
		return []Finding{aboutHub(notChecked("the hub's gateway", err, "hub-access"))}
	}
	var lease *coordinationv1.Lease
	for i := range leases {
		if leases[i].Name == v1alpha1.HubGatewayLeaseName {
			lease = &leases[i]
		}
	}
	site := gatewaySite{
		lease:   "Lease " + v1alpha1.HubGatewayLeaseName + " in the hub namespace",
		start:   "run `octopus-agent gateway --hub` next to the hub",
		standby: "a second `octopus-agent gateway --hub` would have taken over by itself",
	}
	fs := judgeGateway(site, v1alpha1.HubPeerName, lease, peers, e.opts.Now())
	for i := range fs {
		fs[i].Cluster = HubName
	}
	return fs
}

// gatewaySite says, for messages, where a gateway is elected, how one is started and what a
// standby would have done.
type gatewaySite struct {
	lease   string
	start   string
	standby string
}

// judgeGateway judges one cluster's gateway: the Lease that elects it (nil when there is
// none), then, if the active gateway runs, the Peer it publishes and every connection the
// Peer's status reports.
func judgeGateway(site gatewaySite, id string, lease *coordinationv1.Lease, peers []v1alpha1.Peer, now time.Time) []Finding {
	leaseFinding, alive := judgeGatewayLease(site, lease, now)
	out := []Finding{leaseFinding}
	var peer *v1alpha1.Peer
	for i := range peers {
		if peers[i].Name == id {
			peer = &peers[i]
		}
	}
	if lease == nil || lease.Spec.HolderIdentity == nil {
		return out
	}
	holder := *lease.Spec.HolderIdentity
	switch {
	case !alive && peer != nil:
		// Its status is what the gateway last saw before it stopped; the other clusters'
		// Peers tell how their tunnels to it are now.
		return append(out, info("the Peer's status was written by the gateway on %s before it stopped, so its connections are not judged", peer.Spec.Hostname))
	case !alive:
		return out
	case peer == nil:
		return append(out, failure(fmt.Sprintf("look at the log of the gateway on %s: it publishes its Peer after it configured its tunnel", holder),
			"%s holds the gateway Lease but the hub has no Peer %s: no other cluster can tunnel to this one", holder, id))
	case peer.Spec.Hostname != holder:
		out = append(out, warning(fmt.Sprintf("wait a few seconds; if it stays, look at the log of the gateway on %s", holder),
			"the Peer was published by %s but %s holds the Lease: the new active gateway has not published its Peer yet, so other clusters still tunnel to the old one", peer.Spec.Hostname, holder))
	}
	for _, c := range peer.Status.Conditions {
		if c.Status == metav1.ConditionFalse {
			out = append(out, failure("the message says what to change; `octopus show connections` lists every tunnel",
				"the gateway reports %s=False (%s): %s", c.Type, c.Reason, c.Message))
		}
	}
	endpoints := map[string]string{}
	for _, p := range peers {
		endpoints[p.Spec.ClusterID] = endpointOf(p)
	}
	reported := map[string]bool{}
	for _, c := range peer.Status.Connections {
		reported[c.ClusterID] = true
		out = append(out, judgeConnection(c, endpoints[id], endpoints[c.ClusterID], now)...)
	}
	for _, p := range peers {
		if p.Spec.ClusterID != id && !reported[p.Spec.ClusterID] {
			out = append(out, warning("wait for the gateway's next status report (seconds); if it stays, look at its log",
				"the gateway reports no connection to %s, whose Peer is on the hub", p.Spec.ClusterID))
		}
	}
	return out
}

// familiesOf is the families a connection carries as judgeConnection prints them: " (IPv4,
// IPv6)", or "" from a gateway that does not report them.
func familiesOf(families []string) string {
	if len(families) == 0 {
		return ""
	}
	return " (" + strings.Join(families, ", ") + ")"
}

// judgeGatewayLease judges the Lease that elects a cluster's active gateway; alive is true
// while its holder renews it.
func judgeGatewayLease(site gatewaySite, lease *coordinationv1.Lease, now time.Time) (f Finding, alive bool) {
	switch {
	case lease == nil:
		return failure(site.start, "no gateway was ever elected (no %s): nothing tunnels to other clusters", site.lease), false
	case lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "":
		return failure(site.start, "the %s has no holder: the last active gateway stopped and no standby took over, so nothing tunnels to other clusters", site.lease), false
	case lease.Spec.RenewTime == nil:
		return failure(site.start, "the %s was never renewed", site.lease), false
	}
	holder := *lease.Spec.HolderIdentity
	age := max(now.Sub(lease.Spec.RenewTime.Time), 0)
	duration := time.Duration(ptrOr(lease.Spec.LeaseDurationSeconds, 0)) * time.Second
	if duration > 0 && age > duration {
		return failure(fmt.Sprintf("start the gateway on %s again (its log says why it stopped); %s", holder, site.standby),
			"the active gateway %s last renewed the %s %s ago and the Lease lasts %s: the gateway is not running (or cannot reach its API server) and no standby took over, so traffic to and from other clusters stops",
			holder, site.lease, age.Round(time.Second), duration), false
	}
	return ok("%s is the active gateway (Lease renewed %s ago)", holder, age.Round(100*time.Millisecond)), true
}

// WireGuard's own timers (the protocol's "Timers" section): a session is rekeyed after
// RekeyAfterTime while packets flow (the gateway sends keepalives every 25 s, so they always
// do), and its keys are refused after RejectAfterTime. A last handshake older than that means
// the tunnel carries nothing, whatever else the status says.
const wireGuardRejectAfterTime = 180 * time.Second

// lossWarning is the share of lost health probes from which a connection is reported as
// degraded: one lost probe in twenty is more than a healthy tunnel loses.
const lossWarning = 5

// judgeConnection judges one tunnel as the gateway reports it; local and remote are the two
// ends' tunnel endpoints ("ip:port", "" when unknown).
func judgeConnection(c v1alpha1.PeerConnection, local, remote string, now time.Time) []Finding {
	to := c.ClusterID
	if c.Via != "" {
		to += " (via " + c.Via + ")"
	}
	var out []Finding
	switch c.State {
	case v1alpha1.ConnectionConnected:
		out = append(out, ok("tunnel to %s connected%s: rtt %s, loss %d%%", to, familiesOf(c.IPFamilies), rttOf(c.RTT), c.LossPercent))
		if c.FamilyMessage != "" {
			// A mixed pair is healthy; what it cannot carry is said, not flagged.
			out = append(out, info("%s", c.FamilyMessage))
		}
		if c.LossPercent >= lossWarning {
			out = append(out, warning(fmt.Sprintf("look for congestion or drops on the path between %s and %s", orUnknown(local), orUnknown(remote)),
				"the tunnel to %s loses %d%% of its health probes", to, c.LossPercent))
		}
	case v1alpha1.ConnectionConnecting:
		out = append(out, warning("wait for the first health probe to be answered (seconds); if it stays, see the remote cluster's gateway",
			"the tunnel to %s is still coming up: %s", to, c.Message))
	default:
		fix := fmt.Sprintf("check that UDP to the tunnel port passes in both directions between %s and %s (firewalls, security groups, NAT) and that %s's gateway runs (`octopus diagnose gateway`)",
			orUnknown(local), orUnknown(remote), c.ClusterID)
		if c.Via != "" {
			fix = fmt.Sprintf("the hub's gateway carries this tunnel: check it and the tunnel to it (`octopus diagnose gateway`), and that %s's gateway runs", c.ClusterID)
		}
		out = append(out, failure(fix, "the tunnel to %s is down (%s): %s", to, c.State, c.Message))
	}
	if c.Underlay != nil && c.Via == "" {
		out = append(out, judgeUnderlay(to, *c.Underlay, local, remote))
	}
	if c.LastHandshake != nil {
		if age := now.Sub(c.LastHandshake.Time); age > wireGuardRejectAfterTime {
			out = append(out, failure(fmt.Sprintf("check that UDP passes between %s and %s; a restart of the gateway makes a new key and handshake", orUnknown(local), orUnknown(remote)),
				"the last WireGuard handshake with %s was %s ago, past WireGuard's Reject-After-Time (%s): the session's keys have expired and the tunnel carries nothing",
				to, age.Round(time.Second), wireGuardRejectAfterTime))
		}
	}
	return out
}

// judgeUnderlay judges what the gateway measured of the underlay path to a remote gateway's
// tunnel endpoint with its own UDP probes to the tunnel port: whether the port answers, and
// whether the path carries the tunnel's largest packets unfragmented. local and remote are
// the two ends' tunnel endpoints ("ip:port").
func judgeUnderlay(to string, u v1alpha1.UnderlayProbe, local, remote string) Finding {
	localIP, _, _ := net.SplitHostPort(local)
	remoteIP, port, _ := net.SplitHostPort(remote)
	if port == "" {
		port = "<tunnel port>"
	}
	switch {
	case !u.PortReachable && strings.HasPrefix(u.Message, "refused"):
		return failure(fmt.Sprintf("check that %s's gateway runs (`octopus diagnose gateway` with its kubeconfig) and listens on UDP %s", to, port),
			"the tunnel port of %s at %s does not accept this gateway's UDP probes (%s): the tunnel cannot come up", to, orUnknown(remote), u.Message)
	case !u.PortReachable:
		cause := "a firewall between the gateways drops the tunnel port"
		if strings.HasPrefix(u.Message, "this node's firewall") {
			cause = "this gateway node's own firewall drops the tunnel port"
		}
		return failure(fmt.Sprintf("let UDP port %[1]s pass in both directions between %[2]s and %[3]s: on each gateway node find the rule that drops it "+
			"(`nft list ruleset | grep -w %[1]s`, `iptables-save | grep -w %[1]s`) and remove it or accept the port before it (`nft insert rule inet filter input udp dport %[1]s accept`); "+
			"in a cloud, allow UDP %[1]s between the gateways in the security groups or firewall rules", port, orUnknown(localIP), orUnknown(remoteIP)),
			"UDP probes from this gateway to the tunnel port of %s at %s get no answer (%s): %s, so the tunnel carries nothing",
			to, orUnknown(remote), u.Message, cause)
	case u.PathMTU > 0 && u.RequiredMTU > u.PathMTU:
		fix := fmt.Sprintf("raise the MTU of the underlay link between %s and %s that allows only %d bytes", orUnknown(localIP), orUnknown(remoteIP), u.PathMTU)
		if u.TunnelMTU > 0 {
			// The encapsulation stays; the tunnel must shrink by what the path lacks.
			fix = fmt.Sprintf("lower the tunnel MTU to %d with `octopus-agent gateway --mtu %d` on the gateways of both clusters (each direction needs it), or %s",
				u.TunnelMTU-(u.RequiredMTU-u.PathMTU), u.TunnelMTU-(u.RequiredMTU-u.PathMTU), fix)
		}
		return failure(fix,
			"the underlay path from this gateway to %s at %s carries packets of at most %d bytes unfragmented, but the tunnel sends up to %d (MTU %d plus encapsulation): its largest packets are dropped on the way (an MTU black hole: pings and small requests work, bulk transfers stall)",
			to, orUnknown(remote), u.PathMTU, u.RequiredMTU, u.TunnelMTU)
	}
	return ok("underlay to %s: the tunnel port %s answers, path MTU %d for the tunnel's %d-byte packets", to, orUnknown(remote), u.PathMTU, u.RequiredMTU)
}

// endpointOf is where a Peer's tunnel is reached, as `octopus show connections` prints it.
func endpointOf(p v1alpha1.Peer) string {
	ip := p.Spec.Endpoint.PublicIP
	if ip == "" {
		ip = p.Spec.Endpoint.PrivateIP
	}
	if ip == "" {
		return ""
	}
	return net.JoinHostPort(ip, strconv.Itoa(int(p.Spec.Endpoint.Port)))
}

func rttOf(s v1alpha1.LatencyStats) string {
	if s.Avg.Duration == 0 {
		return "not measured"
	}
	return fmt.Sprintf("avg %s (min %s, max %s)", s.Avg.Round(10*time.Microsecond), s.Min.Round(10*time.Microsecond), s.Max.Round(10*time.Microsecond))
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown endpoint)"
	}
	return s
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
