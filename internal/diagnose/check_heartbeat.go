package diagnose

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/heartbeat"
)

var heartbeatCheck = check{
	Check:  Check{Name: "heartbeat", Summary: "every cluster's agent renews its heartbeat Lease on the hub within the Lease's duration"},
	member: checkHeartbeat,
}

var errNoClusterID = errors.New("the cluster's ID is unknown (it has no readable hub credential)")

func checkHeartbeat(ctx context.Context, e *env, m *member) []Finding {
	if m.id == "" {
		return []Finding{notChecked("the heartbeat", errNoClusterID, "hub-access")}
	}
	leases, err := e.hub.leases.get(ctx)
	if err != nil {
		return []Finding{notChecked("the heartbeat", err, "hub-access")}
	}
	r, err := e.hub.reader.get(ctx)
	if err != nil {
		return []Finding{notChecked("the heartbeat", err, "hub-access")}
	}
	var cl *v1alpha1.Cluster
	for i := range r.clusters {
		if r.clusters[i].Name == m.id {
			cl = &r.clusters[i]
		}
	}
	return []Finding{judgeHeartbeat(m.id, heartbeatLease(leases, m.id), cl, e.opts.Now())}
}

// heartbeatLease finds a cluster's heartbeat Lease; one without the cluster's label is not
// its (the hub's admission policy makes the label the writer's ID).
func heartbeatLease(leases []coordinationv1.Lease, id string) *coordinationv1.Lease {
	for i := range leases {
		if leases[i].Name == v1alpha1.HeartbeatLeaseName(id) && leases[i].Labels[v1alpha1.ClusterLabel] == id {
			return &leases[i]
		}
	}
	return nil
}

// judgeHeartbeat judges a cluster's heartbeat Lease (nil when it has none) the way the other
// clusters' agents do (heartbeat.State), with the agent's own word from the Cluster's
// AgentConnected condition when it stopped cleanly.
func judgeHeartbeat(id string, lease *coordinationv1.Lease, cl *v1alpha1.Cluster, now time.Time) Finding {
	fix := fmt.Sprintf("make sure `octopus-agent controller` runs for %s and reaches the hub; its log says why not (`octopus join` starts it on the machine that ran join, logging under ~/.local/state/octopus/)", id)
	age, _ := heartbeat.Age(lease, now)
	lasts := ""
	if lease != nil && lease.Spec.LeaseDurationSeconds != nil {
		lasts = fmt.Sprintf(" (the Lease lasts %ds)", *lease.Spec.LeaseDurationSeconds)
	}
	switch heartbeat.State(lease, now) {
	case heartbeat.StateNeverSeen:
		return failure(fix, "the hub has no heartbeat from %s: its agent never ran or never reached the hub, so nothing tells the other clusters whether it is alive", id)
	case heartbeat.StateStale:
		why := "its agent is not running or cannot reach the hub"
		if cl != nil {
			if c := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ClusterConditionAgentConnected); c != nil && c.Reason == v1alpha1.ReasonAgentStopped {
				why = "its agent stopped (it said so at " + c.LastTransitionTime.UTC().Format(time.RFC3339) + ")"
			}
		}
		return failure(fix, "%s last renewed its heartbeat %s ago%s: %s; once the Lease has been expired for the agents' --stale-cluster-ttl, the other clusters withdraw its exported endpoints",
			id, age.Round(time.Second), lasts, why)
	}
	return ok("heartbeat renewed %s ago%s", age.Round(100*time.Millisecond), lasts)
}
