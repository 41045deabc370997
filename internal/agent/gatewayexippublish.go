package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// gatewayExIPPublishKey is the publisher's one work item: the set is small (a cluster's
// VPCs), and a whole pass is what finds the hub objects of Vpcs that are gone.
var gatewayExIPPublishKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "gatewayexips-published"}}

// GatewayExIPPublisher publishes on the hub one GatewayExIp for each of this cluster's Vpcs
// that holds an external address (status.gateway.externalIP, which the ovnmaster allocates):
// named <cluster>.<vpc> (v1alpha1.GatewayExIpHubName; a VPC has one gateway, named after its
// VPC), labelled with the cluster (the hub's ownership rule) and the gateway, its externalip
// the address and its globalnetcidr the cluster's global CIDR. It deletes this cluster's
// GatewayExIps on the hub whose Vpc is gone, being deleted or without an address. Other
// clusters' members copy them (GatewayExIPSyncer).
type GatewayExIPPublisher struct {
	// Member reads the cluster's Vpcs (the manager's cache).
	Member client.Reader
	// Hub reads (a cache of the hub namespace's GatewayExIps) and writes this cluster's.
	Hub client.Client
	// HubNamespace, ClusterID and GlobalCIDR are the hub's namespace, this cluster's ID and
	// its global CIDR ("" for none: nothing is published, as no Vpc has an address).
	HubNamespace, ClusterID, GlobalCIDR string
}

// Reconcile makes this cluster's GatewayExIps on the hub equal to publishedGatewayExIPs.
func (p *GatewayExIPPublisher) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	vpcs := &v1alpha1.VpcList{}
	if err := p.Member.List(ctx, vpcs); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing Vpcs: %w", err)
	}
	want := publishedGatewayExIPs(p.HubNamespace, p.ClusterID, p.GlobalCIDR, vpcs.Items)
	have := &v1alpha1.GatewayExIpList{}
	if err := p.Hub.List(ctx, have, client.InNamespace(p.HubNamespace), client.MatchingLabels{v1alpha1.ClusterLabel: p.ClusterID}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing this cluster's GatewayExIps on the hub: %w", err)
	}
	var errs []error
	for i := range have.Items {
		cur := &have.Items[i]
		if _, ok := want[cur.Name]; ok {
			continue
		}
		if err := p.Hub.Delete(ctx, cur); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting GatewayExIp %s on the hub: %w", cur.Name, err))
			continue
		}
		log.Info("Deleted a GatewayExIp on the hub: its Vpc is gone or has no external address", "gatewayExIp", cur.Name)
	}
	for _, name := range sortedKeys(want) {
		desired := want[name]
		cur := &v1alpha1.GatewayExIp{}
		err := p.Hub.Get(ctx, client.ObjectKeyFromObject(desired), cur)
		switch {
		case apierrors.IsNotFound(err):
			if err := p.Hub.Create(ctx, desired); err != nil && !apierrors.IsAlreadyExists(err) {
				errs = append(errs, fmt.Errorf("publishing GatewayExIp %s on the hub: %w", name, err))
				continue
			}
			log.Info("Published a GatewayExIp on the hub", "gatewayExIp", name, "externalIP", desired.Spec.ExternalIP)
		case err != nil:
			errs = append(errs, fmt.Errorf("reading GatewayExIp %s on the hub: %w", name, err))
		case cur.Spec != desired.Spec || !labelsEqual(cur.Labels, desired.Labels):
			cur.Spec, cur.Labels = desired.Spec, desired.Labels
			if err := p.Hub.Update(ctx, cur); err != nil {
				errs = append(errs, fmt.Errorf("updating GatewayExIp %s on the hub: %w", name, err))
				continue
			}
			log.Info("Updated a GatewayExIp on the hub", "gatewayExIp", name, "externalIP", desired.Spec.ExternalIP)
		}
	}
	return reconcile.Result{}, errors.Join(errs...)
}

// publishedGatewayExIPs are this cluster's GatewayExIps for the hub, by name: one per live
// Vpc with an external address inside the global CIDR (where the ovnmaster takes them from;
// the other clusters refuse any other), none without a global CIDR.
func publishedGatewayExIPs(hubNamespace, clusterID, globalCIDR string, vpcs []v1alpha1.Vpc) map[string]*v1alpha1.GatewayExIp {
	want := map[string]*v1alpha1.GatewayExIp{}
	global, err := netip.ParsePrefix(globalCIDR)
	if err != nil {
		return want
	}
	for i := range vpcs {
		v := &vpcs[i]
		if !v.DeletionTimestamp.IsZero() || v.Status.Gateway == nil {
			continue
		}
		ip, err := netip.ParseAddr(v.Status.Gateway.ExternalIP)
		if err != nil || !ip.Is4() || !global.Contains(ip) {
			continue
		}
		name := v1alpha1.GatewayExIpHubName(clusterID, v.Name)
		want[name] = &v1alpha1.GatewayExIp{
			ObjectMeta: metav1.ObjectMeta{Namespace: hubNamespace, Name: name, Labels: map[string]string{
				v1alpha1.ClusterLabel: clusterID, gatewayExIPGatewayLabel: v.Name,
			}},
			Spec: v1alpha1.GatewayExIPSpec{ExternalIP: ip.String(), GlobalnetCIDR: globalCIDR},
		}
	}
	return want
}

// vpcAddressChanged keeps the Vpc events that can change what is published: created, deleted,
// deletion started, or its external address changed.
var vpcAddressChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, okOld := e.ObjectOld.(*v1alpha1.Vpc)
		n, okNew := e.ObjectNew.(*v1alpha1.Vpc)
		if !okOld || !okNew {
			return true
		}
		return o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() || externalIPOf(o) != externalIPOf(n)
	},
}

func externalIPOf(v *v1alpha1.Vpc) string {
	if v.Status.Gateway == nil {
		return ""
	}
	return v.Status.Gateway.ExternalIP
}

// SetupGatewayExIPPublish adds a GatewayExIPPublisher to mgr, writing to the hub with the
// cluster's credential (hub) through a cache of the hub namespace's GatewayExIps labelled
// with this cluster (so that one deleted or edited on the hub is put back). It may be called
// after mgr has started.
func SetupGatewayExIPPublish(mgr manager.Manager, hub *rest.Config, hubNamespace, clusterID, globalCIDR string) error {
	if hub == nil || hubNamespace == "" || clusterID == "" {
		return errors.New("setting up the GatewayExIp publisher: hub configuration, namespace and cluster ID are required")
	}
	if _, err := netip.ParsePrefix(globalCIDR); err != nil && globalCIDR != "" {
		// Otherwise it would publish nothing, and say nothing of why.
		return fmt.Errorf("setting up the GatewayExIp publisher: the cluster's global CIDR %q: %w (its Cluster's spec.globalCIDR on the hub)", globalCIDR, err)
	}
	hubCluster, err := addHubNamespaceCache(mgr, hub, hubNamespace, "this cluster's GatewayExIps")
	if err != nil {
		return err
	}
	p := &GatewayExIPPublisher{Member: mgr.GetClient(), Hub: hubCluster.GetClient(), HubNamespace: hubNamespace, ClusterID: clusterID, GlobalCIDR: globalCIDR}
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{gatewayExIPPublishKey}
	})
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[v1alpha1.ClusterLabel] == clusterID })
	return ctrl.NewControllerManagedBy(mgr).
		Named("gatewayexip-publish").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		Watches(&v1alpha1.Vpc{}, all, builder.WithPredicates(vpcAddressChanged)).
		WatchesRawSource(source.Kind(hubCluster.GetCache(), client.Object(&v1alpha1.GatewayExIp{}), all, ours)).
		Complete(p)
}
