package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlcluster "sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// Where the member's copies of the other clusters' GatewayExIps live (issue 33).
//
// The copies are in the Octopus namespace (v1alpha1.SystemNamespace), named as the prototype
// names them, <gateway>-<cluster> (v1alpha1.GatewayExIpName), so that a VpcNatTunnel finds
// its remote gateway by clusterId and gatewayName as the prototype's users expect. Not
// cluster-scoped: the kind is namespaced because the hub keeps every cluster's GatewayExIps
// in its one namespace, and one CRD serves both (a cluster can be the hub too). Not in any
// other namespace: tenants may be allowed to write objects in theirs, and a VpcNatTunnel must
// trust only what this agent copied from the hub, so readers look in SystemNamespace alone,
// where only Octopus writes.
//
// Every copy carries v1alpha1.ClusterLabel (the source cluster) and gatewayExIPGatewayLabel
// (the gateway's name), and gatewayExIPManagedLabel, which is how the syncer tells its copies
// from anything else in the namespace: it never deletes or overwrites an object without it.
// The members' names are ambiguous where IDs contain '-' ("x-a-b" is gateway x of cluster a-b
// or gateway x-a of cluster b): when two hub objects map to one member name, the first in the
// order of their hub names is copied and the other is skipped with an error in the log, and
// the labels say which one a copy is.
const (
	gatewayExIPManagedLabel = "octopus.io/gatewayexip-copy"
	gatewayExIPGatewayLabel = "octopus.io/gateway"
)

// The controller keeps the copies of the other clusters' GatewayExIps in its namespace:
// +kubebuilder:rbac:groups=octopus.io,namespace=octopus-system,resources=gatewayexips,verbs=get;list;watch;create;update;patch;delete

// gatewayExIPKey is the one key the syncer's work queue holds: every event asks for a whole
// sync, since the set is small (a few gateways per cluster) and a whole sync is what makes
// deletions of the source (its object or its cluster) find every copy they concern.
var gatewayExIPKey = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: v1alpha1.SystemNamespace, Name: "gatewayexips"}}

// GatewayExIPSyncer copies every other cluster's GatewayExIp from the hub into the member
// cluster's SystemNamespace and keeps the copies equal to the hub's: it updates them, and
// deletes a copy when its source is gone from the hub, when its source cluster's Cluster is
// (leave and revoke delete it), or when the source no longer passes the checks of
// wantedGatewayExIPs. Its own cluster's GatewayExIps are never copied back.
type GatewayExIPSyncer struct {
	// Hub reads the hub namespace's GatewayExIps and Clusters (a cache).
	Hub client.Reader
	// Member writes the copies.
	Member client.Client
	// HubNamespace and ClusterID are the hub's namespace and this cluster's ID.
	HubNamespace string
	ClusterID    string
}

// NewGatewayExIPCopies adds to mgr a cache of the member's GatewayExIp copies, in
// v1alpha1.SystemNamespace alone: the controller's role may read them nowhere else, and a
// ByObject entry in the manager's own cache would need their CRD served when the manager is
// made, which is before join installs it. The syncer keeps the copies through it and the
// VpcNatTunnel controller reads them from it. It may be called after mgr has started.
func NewGatewayExIPCopies(mgr manager.Manager) (ctrlcluster.Cluster, error) {
	copies, err := ctrlcluster.New(mgr.GetConfig(), func(co *ctrlcluster.Options) {
		co.Scheme = kube.Scheme
		co.Cache = cache.Options{
			DefaultNamespaces: map[string]cache.Config{v1alpha1.SystemNamespace: {}},
			DefaultTransform:  cache.TransformStripManagedFields(),
		}
	})
	if err != nil {
		return nil, fmt.Errorf("creating the member's cache of GatewayExIp copies: %w", err)
	}
	if err := mgr.Add(copies); err != nil {
		return nil, fmt.Errorf("adding the member's cache of GatewayExIp copies: %w", err)
	}
	return copies, nil
}

// isGatewayExIPCopy selects the copies the syncer keeps.
var isGatewayExIPCopy = predicate.NewPredicateFuncs(func(o client.Object) bool {
	return o.GetNamespace() == v1alpha1.SystemNamespace && o.GetLabels()[gatewayExIPManagedLabel] == "true"
})

// addHubNamespaceCache adds to mgr a cache of the hub namespace read with the cluster's
// credential (hub), for the controllers that keep GatewayExIps (of what, in errors).
func addHubNamespaceCache(mgr manager.Manager, hub *rest.Config, hubNamespace, of string) (ctrlcluster.Cluster, error) {
	hubCluster, err := ctrlcluster.New(kube.WaitForServerOnReads(hub), func(co *ctrlcluster.Options) {
		co.Scheme = kube.Scheme
		co.Cache = cache.Options{
			DefaultNamespaces: map[string]cache.Config{hubNamespace: {}},
			DefaultTransform:  cache.TransformStripManagedFields(),
		}
	})
	if err != nil {
		return nil, fmt.Errorf("creating the hub cache of %s: %w", of, err)
	}
	if err := mgr.Add(hubCluster); err != nil {
		return nil, fmt.Errorf("adding the hub cache of %s: %w", of, err)
	}
	return hubCluster, nil
}

// SetupGatewayExIPSync adds a GatewayExIPSyncer to mgr with a cache of the hub namespace's
// GatewayExIps and Clusters (hub, with the cluster's credential), keeping the copies in
// copies (NewGatewayExIPCopies). It may be called after mgr has started.
func SetupGatewayExIPSync(mgr manager.Manager, copies ctrlcluster.Cluster, hub *rest.Config, hubNamespace, clusterID string) error {
	if hub == nil || hubNamespace == "" || clusterID == "" {
		return errors.New("setting up the GatewayExIp sync: hub configuration, namespace and cluster ID are required")
	}
	hubCluster, err := addHubNamespaceCache(mgr, hub, hubNamespace, "GatewayExIps")
	if err != nil {
		return err
	}
	s := &GatewayExIPSyncer{Hub: hubCluster.GetClient(), Member: copies.GetClient(), HubNamespace: hubNamespace, ClusterID: clusterID}
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{gatewayExIPKey}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("gatewayexip-sync").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		// The copies themselves: one changed or deleted by someone else is put back.
		WatchesRawSource(source.Kind(copies.GetCache(), client.Object(&v1alpha1.GatewayExIp{}), all, isGatewayExIPCopy)).
		WatchesRawSource(source.Kind(hubCluster.GetCache(), client.Object(&v1alpha1.GatewayExIp{}), all)).
		WatchesRawSource(source.Kind(hubCluster.GetCache(), client.Object(&v1alpha1.Cluster{}), all)).
		Complete(s)
}

// Reconcile makes the member's copies equal to wantedGatewayExIPs.
func (s *GatewayExIPSyncer) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	hubList := &v1alpha1.GatewayExIpList{}
	if err := s.Hub.List(ctx, hubList, client.InNamespace(s.HubNamespace)); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the GatewayExIps on the hub: %w", err)
	}
	clusters := &v1alpha1.ClusterList{}
	if err := s.Hub.List(ctx, clusters, client.InNamespace(s.HubNamespace)); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the Clusters on the hub: %w", err)
	}
	want, refused := wantedGatewayExIPs(s.ClusterID, hubList.Items, clusters.Items)
	for _, err := range refused {
		log.Error(err, "Not copying a GatewayExIp from the hub")
	}
	have := &v1alpha1.GatewayExIpList{}
	if err := s.Member.List(ctx, have, client.InNamespace(v1alpha1.SystemNamespace), client.MatchingLabels{gatewayExIPManagedLabel: "true"}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the GatewayExIp copies in %s: %w", v1alpha1.SystemNamespace, err)
	}
	var errs []error
	for i := range have.Items {
		cur := &have.Items[i]
		if _, ok := want[cur.Name]; ok {
			continue
		}
		if err := s.Member.Delete(ctx, cur); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting the GatewayExIp copy %s: %w", cur.Name, err))
			continue
		}
		log.Info("Deleted a GatewayExIp copy whose source left the hub", "gatewayExIp", cur.Name, "cluster", cur.Labels[v1alpha1.ClusterLabel])
	}
	for _, name := range sortedKeys(want) {
		if err := s.put(ctx, want[name]); err != nil {
			errs = append(errs, err)
		}
	}
	return reconcile.Result{}, errors.Join(errs...)
}

// put creates or updates the copy desired, leaving alone an object of that name that is not
// a copy (one without gatewayExIPManagedLabel).
func (s *GatewayExIPSyncer) put(ctx context.Context, desired *v1alpha1.GatewayExIp) error {
	cur := &v1alpha1.GatewayExIp{}
	err := s.Member.Get(ctx, client.ObjectKeyFromObject(desired), cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := s.Member.Create(ctx, desired); err != nil {
			return fmt.Errorf("copying GatewayExIp %s: %w", desired.Name, err)
		}
		logf.FromContext(ctx).Info("Copied a GatewayExIp from the hub", "gatewayExIp", desired.Name, "cluster", desired.Labels[v1alpha1.ClusterLabel], "externalIP", desired.Spec.ExternalIP)
		return nil
	case err != nil:
		return fmt.Errorf("reading the GatewayExIp copy %s: %w", desired.Name, err)
	case cur.Labels[gatewayExIPManagedLabel] != "true":
		return fmt.Errorf("not copying GatewayExIp %s: an object of that name in %s was not made by Octopus; delete it", desired.Name, v1alpha1.SystemNamespace)
	case cur.Spec == desired.Spec && labelsEqual(cur.Labels, desired.Labels):
		return nil
	}
	cur.Spec = desired.Spec
	cur.Labels = desired.Labels
	if err := s.Member.Update(ctx, cur); err != nil {
		return fmt.Errorf("updating the GatewayExIp copy %s: %w", desired.Name, err)
	}
	return nil
}

func labelsEqual(a, b map[string]string) bool { return labels.Equals(a, b) }

// wantedGatewayExIPs are the member's copies of the hub's GatewayExIps, keyed by name, and why
// others were refused. A hub object is copied only when it is another cluster's (never this
// cluster's own, which this cluster made), its name is <cluster>.<gateway> with that cluster
// its ClusterLabel (the hub's admission policy enforces it; checked again here, as every
// consumer checks what it takes from the hub), that cluster is still on the hub (a revoked or
// departed cluster's gateways go with its Cluster), and its global CIDR and external address
// lie inside the cluster's registered global CIDR (the trust model: a cluster may advertise
// only its own ranges, docs/trust.md).
func wantedGatewayExIPs(clusterID string, hub []v1alpha1.GatewayExIp, clusters []v1alpha1.Cluster) (map[string]*v1alpha1.GatewayExIp, []error) {
	global := make(map[string]string, len(clusters))
	for _, cl := range clusters {
		global[cl.Name] = cl.Spec.GlobalCIDR
	}
	slices.SortFunc(hub, func(a, b v1alpha1.GatewayExIp) int { return strings.Compare(a.Name, b.Name) })
	want := map[string]*v1alpha1.GatewayExIp{}
	var refused []error
	for _, g := range hub {
		owner := g.Labels[v1alpha1.ClusterLabel]
		source, gateway, ok := strings.Cut(g.Name, ".")
		switch {
		case owner == clusterID || source == clusterID:
			continue
		case !ok || source != owner || gateway == "":
			refused = append(refused, fmt.Errorf("GatewayExIp %s on the hub: its name is not <cluster>.<gateway> of its owner %q", g.Name, owner))
			continue
		}
		cidr, ok := global[source]
		if !ok {
			continue // the cluster left or was revoked: its gateways go with it
		}
		if err := insideGlobalCIDR(g.Spec.GlobalnetCIDR, g.Spec.ExternalIP, cidr); err != nil {
			refused = append(refused, fmt.Errorf("GatewayExIp %s of cluster %s: %w", g.Name, source, err))
			continue
		}
		name := v1alpha1.GatewayExIpName(gateway, source)
		if prev, taken := want[name]; taken {
			refused = append(refused, fmt.Errorf("GatewayExIp %s of cluster %s: its member name %s is taken by gateway %s of cluster %s (the members' <gateway>-<cluster> names are ambiguous where IDs hold '-'; rename one gateway)",
				g.Name, source, name, prev.Labels[gatewayExIPGatewayLabel], prev.Labels[v1alpha1.ClusterLabel]))
			continue
		}
		want[name] = &v1alpha1.GatewayExIp{
			ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.SystemNamespace, Name: name, Labels: map[string]string{
				gatewayExIPManagedLabel: "true", v1alpha1.ClusterLabel: source, gatewayExIPGatewayLabel: gateway,
			}},
			Spec: g.Spec,
		}
	}
	return want, refused
}

// insideGlobalCIDR checks that the GatewayExIp's global CIDR (advertised) and external
// address (external) lie inside its cluster's registered global CIDR: the external address is
// where other clusters send that VPC's tunnels, so one outside would let a member point them
// at another cluster's address, or at a node of the cluster that copies it.
func insideGlobalCIDR(advertised, external, registered string) error {
	p, err := netip.ParsePrefix(advertised)
	if err != nil {
		return fmt.Errorf("globalnetcidr %q: %w", advertised, err)
	}
	r, err := netip.ParsePrefix(registered)
	if err != nil {
		return fmt.Errorf("globalnetcidr %s: the cluster has no global CIDR on the hub to check it against", advertised)
	}
	if !r.Contains(p.Addr()) || p.Bits() < r.Bits() {
		return fmt.Errorf("globalnetcidr %s is not inside the cluster's global CIDR %s", advertised, registered)
	}
	ip, err := netip.ParseAddr(external)
	if err != nil {
		return fmt.Errorf("externalip %q: %w", external, err)
	}
	if !r.Contains(ip) {
		return fmt.Errorf("externalip %s is not inside the cluster's global CIDR %s (a VPC's external address comes from it)", external, registered)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
