package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
)

// handshakeFresh is how recent a WireGuard handshake must be for a connection without health
// probes to count as Connected: WireGuard re-handshakes every 2 minutes while traffic flows.
const handshakeFresh = 3 * time.Minute

// reportStatus writes the Peer's status when it differs from what the hub has.
func (a *active) reportStatus(ctx context.Context) error {
	a.mu.Lock()
	d, applyErr := a.desired, a.applyErr
	a.mu.Unlock()
	stats, err := a.driver.Stats()
	if err != nil {
		a.o.Log.Error(err, "Reading tunnel statistics")
	}
	var probes map[string]ProbeStats
	if a.prober != nil {
		probes = a.prober.Snapshot()
	}
	cur := &v1alpha1.Peer{}
	getErr := a.hub.Get(ctx, client.ObjectKey{Namespace: a.at.Namespace, Name: a.at.ClusterID}, cur)
	// With the hub unreachable the status cannot be written, but the metrics, computed from
	// the same status (its connections do not depend on the conditions read from the hub),
	// still tell how the tunnels are.
	st := BuildStatus(cur.Status.Conditions, cur.Generation, a.driver.Name(), d, applyErr, stats, probes, time.Now())
	if a.underlay != nil {
		setUnderlay(&st, a.underlay.Snapshot())
	}
	a.metrics.observe(a.o.Backend, st, len(d.Tunnel.Peers), len(d.Refused), probes)
	if getErr != nil {
		return fmt.Errorf("reading Peer %s on the hub: %w", a.at.ClusterID, getErr)
	}
	next := cur.DeepCopy()
	next.Status = st
	if equality.Semantic.DeepEqual(cur.Status, next.Status) {
		return nil
	}
	if err := a.hub.Status().Patch(ctx, next, client.MergeFrom(cur)); err != nil {
		return fmt.Errorf("updating the status of Peer %s on the hub: %w", a.at.ClusterID, err)
	}
	return nil
}

// BuildStatus computes the Peer's status: a connection per accepted Peer (state from the
// health probes when there are any, else from WireGuard handshakes; a cluster reached through
// the hub's tunnel has the hub as `via`, and without probes that tunnel's state), one in state
// Error per refused Peer, and the Ready and PeersAccepted conditions. Existing conditions keep
// their transition times when unchanged. It is pure.
func BuildStatus(conds []metav1.Condition, generation int64, driver string, d Desired, applyErr error,
	stats []tunnel.PeerStats, probes map[string]ProbeStats, now time.Time) v1alpha1.PeerStatus {
	byCluster := map[string]tunnel.PeerStats{}
	for _, s := range stats {
		byCluster[s.Cluster] = s
	}
	st := v1alpha1.PeerStatus{Driver: driver, Conditions: slices.Clone(conds)}
	tunnels := map[string]v1alpha1.PeerConnection{}
	for _, p := range d.Tunnel.Peers {
		c := v1alpha1.PeerConnection{ClusterID: p.Cluster, State: v1alpha1.ConnectionConnecting}
		s, ok := byCluster[p.Cluster]
		if ok {
			c.RxBytes, c.TxBytes = clampInt64(s.RxBytes), clampInt64(s.TxBytes)
			if !s.LastHandshake.IsZero() {
				t := metav1.NewTime(s.LastHandshake.Truncate(time.Second))
				c.LastHandshake = &t
			}
		}
		probe, probed := probes[p.Cluster]
		switch {
		case applyErr != nil:
			c.State, c.Message = v1alpha1.ConnectionError, "the tunnel configuration could not be applied: "+applyErr.Error()
		case probed:
			setProbed(&c, probe)
		case ok && !s.LastHandshake.IsZero() && now.Sub(s.LastHandshake) < handshakeFresh:
			c.State = v1alpha1.ConnectionConnected
		default:
			c.Message = "no health probe answered and no recent handshake yet"
		}
		setFamilies(&c, d.Families[p.Cluster])
		tunnels[p.Cluster] = c
		st.Connections = append(st.Connections, c)
	}
	for id, via := range d.Via {
		c := v1alpha1.PeerConnection{ClusterID: id, Via: via, State: v1alpha1.ConnectionConnecting}
		if probe, probed := probes[id]; probed && applyErr == nil {
			setProbed(&c, probe)
		} else {
			c.State, c.Message = tunnels[via].State, tunnels[via].Message
		}
		setFamilies(&c, d.Families[id])
		st.Connections = append(st.Connections, c)
	}
	for _, r := range d.Refused {
		// A second Peer of a connected cluster ID (DuplicatePeer) is reported in the
		// condition only: connections are keyed by cluster ID, and a status with two would be
		// refused by the API server as a whole.
		if slices.ContainsFunc(st.Connections, func(c v1alpha1.PeerConnection) bool { return c.ClusterID == r.Cluster }) {
			continue
		}
		st.Connections = append(st.Connections, v1alpha1.PeerConnection{ClusterID: r.Cluster, State: v1alpha1.ConnectionError, Message: r.Message})
	}
	slices.SortFunc(st.Connections, func(a, b v1alpha1.PeerConnection) int { return strings.Compare(a.ClusterID, b.ClusterID) })

	ready := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonApplied, ObservedGeneration: generation,
		Message: fmt.Sprintf("%s tunnels to %d clusters configured", driver, len(d.Tunnel.Peers))}
	if len(d.Via) > 0 {
		ready.Message += fmt.Sprintf(", %d more reached through the hub's gateway", len(d.Via))
	}
	if applyErr != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonApplyFailed, applyErr.Error()
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	accepted := metav1.Condition{Type: ConditionPeersAccepted, Status: metav1.ConditionTrue, Reason: ReasonAllAccepted, ObservedGeneration: generation,
		Message: "every other cluster's Peer is accepted"}
	if len(d.Refused) > 0 {
		var msgs []string
		// The condition names the refusal the user most likely has to fix by hand: an
		// overlap, else a cluster on the other network, else a generic one.
		reason := ReasonPeersRefused
		for _, r := range d.Refused {
			msgs = append(msgs, r.Message)
			switch {
			case r.Reason == ReasonOverlappingSubnets:
				reason = ReasonOverlappingSubnets
			case r.Reason == ReasonAddressingMismatch && reason == ReasonPeersRefused:
				reason = ReasonAddressingMismatch
			}
		}
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, reason, strings.Join(msgs, "\n")
	}
	meta.SetStatusCondition(&st.Conditions, accepted)
	subnets := metav1.Condition{Type: ConditionSubnetsAccepted, Status: metav1.ConditionTrue, Reason: ReasonAllSubnetsAccepted, ObservedGeneration: generation,
		Message: "every accepted Peer's subnets lie inside its cluster's allocation"}
	if len(d.Withheld) > 0 {
		var msgs []string
		for _, r := range d.Withheld {
			msgs = append(msgs, r.Message)
		}
		subnets.Status, subnets.Reason, subnets.Message = metav1.ConditionFalse, ReasonSubnetsNotAllocated, strings.Join(msgs, "\n")
	}
	meta.SetStatusCondition(&st.Conditions, subnets)
	return st
}

// setFamilies sets the families a connection carries and why any other is not.
func setFamilies(c *v1alpha1.PeerConnection, f Families) {
	c.IPFamilies, c.FamilyMessage = slices.Clone(f.Carried), f.Message
}

// setProbed sets a connection's RTT, loss and state from its health probes.
func setProbed(c *v1alpha1.PeerConnection, probe ProbeStats) {
	c.RTT = v1alpha1.LatencyStats{Last: dur(probe.Last), Min: dur(probe.Min), Avg: dur(probe.Avg), Max: dur(probe.Max)}
	c.LossPercent = int32(min(max(probe.LossPercent, 0), 100)) //nolint:gosec // clamped to 0..100
	switch {
	case probe.Up:
		c.State, c.Message = v1alpha1.ConnectionConnected, ""
	case probe.Answered:
		c.State, c.Message = v1alpha1.ConnectionError, "the remote gateway stopped answering health probes"
	default:
		c.State, c.Message = v1alpha1.ConnectionConnecting, "waiting for the first answer to health probes"
	}
}

func dur(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

func clampInt64(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}
