package cluster

import (
	"context"
	"fmt"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/heartbeat"
)

// Status is one cluster as the hub sees it.
type Status struct {
	ClusterID     string              `json:"clusterID"`
	PodCIDRs      []string            `json:"podCIDRs"`
	ServiceCIDRs  []string            `json:"serviceCIDRs"`
	Addressing    v1alpha1.Addressing `json:"addressing"`
	GlobalCIDR    string              `json:"globalCIDR,omitempty"`
	SecondaryCIDR string              `json:"secondaryCIDR,omitempty"`
	// HeartbeatAge is the time since the agent last renewed its Lease; nil if it never did.
	HeartbeatAge *time.Duration `json:"heartbeatAge,omitempty"`
	// State is heartbeat.StateConnected, StateStale or StateNeverSeen.
	State string `json:"state"`
	// AgentCondition is the agent's own AgentConnected condition as "Status/Reason", if any.
	AgentCondition string `json:"agentCondition,omitempty"`
}

// CollectStatus reads every cluster and heartbeat of the hub namespace, sorted by cluster ID.
func CollectStatus(ctx context.Context, hc client.Reader, namespace string, now time.Time) ([]Status, error) {
	clusters := &v1alpha1.ClusterList{}
	if err := hc.List(ctx, clusters, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing clusters on the hub: %w", err)
	}
	leases := &coordinationv1.LeaseList{}
	if err := hc.List(ctx, leases, client.InNamespace(namespace), client.HasLabels{v1alpha1.ClusterLabel}); err != nil {
		return nil, fmt.Errorf("listing heartbeats on the hub: %w", err)
	}
	byName := map[string]*coordinationv1.Lease{}
	for i := range leases.Items {
		byName[leases.Items[i].Name] = &leases.Items[i]
	}
	out := make([]Status, 0, len(clusters.Items))
	for _, cl := range clusters.Items {
		lease := byName[v1alpha1.HeartbeatLeaseName(cl.Spec.ClusterID)]
		if lease != nil && lease.Labels[v1alpha1.ClusterLabel] != cl.Spec.ClusterID {
			lease = nil
		}
		s := Status{
			ClusterID: cl.Spec.ClusterID, PodCIDRs: cl.Spec.PodCIDRs, ServiceCIDRs: cl.Spec.ServiceCIDRs,
			Addressing: cl.Spec.Addressing, GlobalCIDR: cl.Spec.GlobalCIDR, SecondaryCIDR: cl.Spec.SecondaryCIDR,
			State: heartbeat.State(lease, now),
		}
		if age, ok := heartbeat.Age(lease, now); ok {
			s.HeartbeatAge = &age
		}
		if c := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ClusterConditionAgentConnected); c != nil {
			s.AgentCondition = string(c.Status) + "/" + c.Reason
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ClusterID < out[j].ClusterID })
	return out, nil
}
