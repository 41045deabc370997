package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/ipam"
)

// A CIDR claim is a ConfigMap on the hub named after the block it reserves. Allocation is
// race-free without a shared counter: the API server's create is a compare-and-swap on the
// object's key (etcd only creates it if the key has no revision yet), so of two clusters that
// pick the same free block, exactly one create succeeds and the other moves to the next block.
const (
	claimPoolLabel = "octopus.io/cidr-pool"
	claimCIDRKey   = "cidr"
)

// Names of the hub's address pools.
const (
	PoolGlobalnet = "globalnet"
	PoolSecondary = "secondary"
)

func claimName(pool string, block netip.Prefix) string {
	addr := strings.NewReplacer(".", "-", ":", "-").Replace(block.Addr().String())
	return fmt.Sprintf("cidr-%s-%s-%d", pool, strings.Trim(addr, "-"), block.Bits())
}

// claimBlock returns the block of pool held by clusterID, claiming the first free one if it
// holds none yet (so re-running a join keeps its block).
func claimBlock(ctx context.Context, c client.Client, namespace, clusterID, poolName string, pool ipam.Pool) (netip.Prefix, error) {
	claims := &corev1.ConfigMapList{}
	if err := c.List(ctx, claims, client.InNamespace(namespace), client.MatchingLabels{claimPoolLabel: poolName}); err != nil {
		return netip.Prefix{}, fmt.Errorf("listing %s CIDR claims: %w", poolName, err)
	}
	var used []netip.Prefix
	for _, cm := range claims.Items {
		p, err := netip.ParsePrefix(cm.Data[claimCIDRKey])
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("CIDR claim %s/%s is corrupt (%w); delete it if its cluster is gone", cm.Namespace, cm.Name, err)
		}
		if cm.Labels[v1alpha1.ClusterLabel] == clusterID {
			return p, nil
		}
		used = append(used, p)
	}
	for _, block := range pool.Candidates(used) {
		claim := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name: claimName(poolName, block), Namespace: namespace,
				Labels: map[string]string{v1alpha1.ClusterLabel: clusterID, claimPoolLabel: poolName},
			},
			Data: map[string]string{claimCIDRKey: block.String()},
		}
		err := c.Create(ctx, claim)
		if apierrors.IsAlreadyExists(err) {
			continue // another cluster won this block a moment ago
		}
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("claiming %s block %s: %w", poolName, block, err)
		}
		return block, nil
	}
	return netip.Prefix{}, fmt.Errorf("%w: every /%d of the %s pool %s is taken by %d clusters; deploy the hub with a larger pool",
		ipam.ErrPoolExhausted, pool.BlockBits, poolName, pool.CIDR, len(used))
}

// ErrDuplicateClusterID means another cluster already joined with the requested ID.
var ErrDuplicateClusterID = errors.New("duplicate cluster ID")
