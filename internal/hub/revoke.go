package hub

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// Revoke ends cluster clusterID's access to the hub, with the hub admin's client c, and no
// other cluster's: it deletes the cluster's ServiceAccount, which invalidates every token of
// it at once (a token names the ServiceAccount's UID), and its RoleBinding, so that the ID can
// be enrolled again without waiting for the garbage collector. What the cluster published
// stays, for its Lease to go stale and the other clusters to withdraw its endpoints. Revoking
// a cluster that is not enrolled is not an error.
func Revoke(ctx context.Context, c client.Client, namespace, clusterID string) error {
	name := v1alpha1.ClusterServiceAccount(clusterID)
	meta := metav1.ObjectMeta{Namespace: namespace, Name: name}
	if err := c.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: meta}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("revoking cluster %s: deleting ServiceAccount %s/%s: %w", clusterID, namespace, name, err)
	}
	if err := c.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: meta}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("revoking cluster %s: deleting RoleBinding %s/%s: %w", clusterID, namespace, name, err)
	}
	return nil
}
