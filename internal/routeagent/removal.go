package routeagent

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// removalCheckTimeout bounds what the agent does on its way out: one read of its namespace and
// one of its DaemonSet, then the withdrawal. The kubelet's grace period (30 s) is far longer.
const removalCheckTimeout = 5 * time.Second

// What the route agent reads on its way out (removal.go), for the Role that hack/generate.sh
// generates from these markers: whether its namespace and its DaemonSet are being deleted.
//
// +kubebuilder:rbac:groups="",resources=namespaces,resourceNames=octopus-system,verbs=get
// +kubebuilder:rbac:groups=apps,namespace=octopus-system,resources=daemonsets,resourceNames=octopus-route-agent,verbs=get

// removal says why the agent stops for good rather than for a restart: Octopus is being
// removed from the cluster when the agent's namespace is gone or terminating (`octopus leave`
// deletes it), or when the DaemonSet that runs the agent is (`helm uninstall` deletes it before
// the namespace). A rolling update, a crash or a drained node leave both in place. It returns
// "" when nothing says so, also when the API server cannot be asked: leaving the routes of a
// removed agent is the lesser harm than withdrawing those of one that restarts, which would
// cut the node off from the other clusters until it is back.
func removal(ctx context.Context, c client.Reader, daemonSet string) string {
	ns := &corev1.Namespace{}
	switch err := c.Get(ctx, client.ObjectKey{Name: v1alpha1.SystemNamespace}, ns); {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("namespace %s is gone", v1alpha1.SystemNamespace)
	case err == nil && ns.DeletionTimestamp != nil:
		return fmt.Sprintf("namespace %s is being deleted", v1alpha1.SystemNamespace)
	case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		// The agent's own access is gone: `helm uninstall` deletes the chart's
		// ServiceAccount and RBAC while the DaemonSet's pods are still stopping (their
		// deletion by the garbage collector comes after), so an agent stopped late can no
		// longer read what would say so. A restart, a rolling update or a drained node never
		// take the agent's credential away; an API server that is down answers nothing at all.
		return fmt.Sprintf("the agent may no longer read namespace %s (its ServiceAccount or RBAC was removed): %v", v1alpha1.SystemNamespace, err)
	}
	if daemonSet == "" {
		return ""
	}
	ds := &appsv1.DaemonSet{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: daemonSet}, ds); {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("DaemonSet %s/%s is gone", v1alpha1.SystemNamespace, daemonSet)
	case err == nil && ds.DeletionTimestamp != nil:
		return fmt.Sprintf("DaemonSet %s/%s is being deleted", v1alpha1.SystemNamespace, daemonSet)
	}
	return ""
}

// withdrawIfRemoved withdraws every route of the agent when it stops because Octopus is being
// removed from the cluster (removal), so that uninstalling leaves nothing on the node.
func withdrawIfRemoved(o Options) {
	ctx, cancel := context.WithTimeout(context.Background(), removalCheckTimeout)
	defer cancel()
	c, err := client.New(o.Member, client.Options{Scheme: kube.Scheme})
	if err != nil {
		o.Log.Error(err, "Cannot ask the member cluster whether Octopus is being removed; leaving the routes in place")
		return
	}
	why := removal(ctx, c, o.DaemonSet)
	if why == "" {
		o.Log.Info("Route agent stopping; its routes stay for the next one")
		return
	}
	if err := o.Routes.Apply(nil); err != nil {
		o.Log.Error(err, "Octopus is being removed, but withdrawing the node's routes to remote clusters failed", "because", why)
		return
	}
	o.Log.Info("Octopus is being removed: withdrew the node's routes to remote clusters", "because", why)
}
