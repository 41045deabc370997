package hub

import (
	"context"
	"errors"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// Revoke ends cluster clusterID's access to the hub and its place in the cluster set, with the
// hub admin's client c, and touches no other cluster. It deletes the cluster's ServiceAccount,
// which invalidates every token of it at once (a token names the ServiceAccount's UID), and
// its RoleBinding, so that the ID can be enrolled again without waiting for the garbage
// collector. Then it deletes everything the cluster published, found by its ownership label:
// its Cluster, which every gateway needs to accept the cluster's Peer (desired.go refuses a
// Peer without one), its Peer, its heartbeat Lease, its service records and slices, which
// the importers then withdraw, and its VPC gateways' GatewayExIps, whose copies the members'
// syncers then delete. So no cluster keeps a tunnel, a route or an import of it once
// the watches deliver the deletions, rather than waiting for its heartbeat to go stale.
// Revoking a cluster that is not enrolled is not an error.
func Revoke(ctx context.Context, c client.Client, namespace, clusterID string) error {
	name := v1alpha1.ClusterServiceAccount(clusterID)
	meta := metav1.ObjectMeta{Namespace: namespace, Name: name}
	if err := c.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: meta}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("revoking cluster %s: deleting ServiceAccount %s/%s: %w", clusterID, namespace, name, err)
	}
	if err := c.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: meta}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("revoking cluster %s: deleting RoleBinding %s/%s: %w", clusterID, namespace, name, err)
	}
	// The Cluster first: from then on every gateway refuses the cluster's Peer.
	var errs []error
	for _, obj := range []client.Object{&v1alpha1.Cluster{}, &v1alpha1.Peer{}, &coordinationv1.Lease{}, &mcsv1beta1.ServiceImport{}, &discoveryv1.EndpointSlice{}, &v1alpha1.GatewayExIp{}} {
		err := c.DeleteAllOf(ctx, obj, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.ClusterLabel: clusterID})
		if client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("revoking cluster %s: deleting its %T objects in %s: %w", clusterID, obj, namespace, err))
		}
	}
	return errors.Join(errs...)
}
