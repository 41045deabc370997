package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
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
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/kernel"
)

// The VpcNatTunnel controller's control-plane half (issue 33): it resolves what a tunnel needs
// (the remote gateway, its global CIDR and ours, the local Vpc, the encapsulation) and reports
// it in the tunnel's status. The tunnel itself (links, route, SNAT) is not built yet, so a
// tunnel that has everything is Ready=False with reason DataPlanePending, never Ready.
//
// It runs in the agent's controller rather than in the ovnmaster because what it resolves is
// the agent's: the GatewayExIp copies are the agent's own (gatewayexip.go, cached in
// SystemNamespace only), and the local global CIDR is on this cluster's Cluster record on the
// hub, which only the agent reads (with the cluster's hub credential); the ovnmaster knows the
// cluster's secondary block and its NB database, neither of which the status needs. The VPC
// kinds are member CRDs in every cluster, so the controller can watch Vpcs where no ovnmaster
// runs (a tunnel there reports VpcFound=False). When the data plane is built it will consume
// this status (remote IP and global CIDRs) as its desired state; the OVN half of it (the VPC
// router's route and SNAT) belongs to the ovnmaster, which then reads the status, not the
// other way round.

// The controller reads the tunnels and writes their status; reads Vpcs to check natGwDp (the
// GatewayExIp copies it reads are granted with the syncer's rule, in SystemNamespace only):
// +kubebuilder:rbac:groups=octopus.io,resources=vpcnattunnels,verbs=get;list;watch
// +kubebuilder:rbac:groups=octopus.io,resources=vpcnattunnels/status,verbs=patch
// +kubebuilder:rbac:groups=octopus.io,resources=vpcs,verbs=get;list;watch

// Indexes of the VpcNatTunnels in the manager's cache, so that a GatewayExIp or a Vpc event
// re-reconciles exactly the tunnels naming it.
const (
	tunnelRemoteGatewayIndex = "octopus.io/vpcnattunnel-remote-gateway"
	tunnelVpcIndex           = "octopus.io/vpcnattunnel-vpc"
)

// remoteGatewayKey is how a tunnel and a GatewayExIp copy meet in tunnelRemoteGatewayIndex:
// by the copy's labels, which are unambiguous, rather than by its <gateway>-<cluster> name,
// which is not where IDs contain '-' (gatewayexip.go).
func remoteGatewayKey(clusterID, gateway string) string { return clusterID + "/" + gateway }

// GREProbe tells whether the kernel makes GRE links. GREAvailable returns an error only when
// it could not tell; it may be called from several reconciles at once.
type GREProbe interface {
	GREAvailable() (bool, error)
}

// GREProbeFunc makes a function a GREProbe.
type GREProbeFunc func() (bool, error)

// GREAvailable calls f.
func (f GREProbeFunc) GREAvailable() (bool, error) { return f() }

var _ GREProbe = GREProbeFunc(nil)

// KernelGREProbe asks this node's kernel once (kernel.GREAvailable makes and drops a network
// namespace for it, too costly for every reconcile) and keeps a definite answer for the life of
// the process: GRE comes and goes with a kernel or module change, which restarts the agent's
// node anyway. An error is not kept, so the next reconcile asks again. The answer is this
// node's; the data plane half must ask again on the VPC gateway's node, which builds the link.
func KernelGREProbe() GREProbe {
	var (
		mu     sync.Mutex
		known  bool
		answer bool
	)
	return GREProbeFunc(func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if known {
			return answer, nil
		}
		ok, err := kernel.GREAvailable()
		if err != nil {
			return false, fmt.Errorf("probing the kernel for GRE: %w", err)
		}
		known, answer = true, ok
		return answer, nil
	})
}

// VpcNatTunnelReconciler reports each VpcNatTunnel's resolution in its status.
type VpcNatTunnelReconciler struct {
	// Client reads tunnels and Vpcs and patches tunnels' status.
	Client client.Client
	// Copies reads the GatewayExIp copies (NewGatewayExIPCopies). Optional: Client.
	Copies client.Reader
	// LocalGlobalCIDR is this cluster's global CIDR from its Cluster on the hub; empty when it
	// has none (not globalnet).
	LocalGlobalCIDR string
	// GRE answers for tunnels of type gre.
	GRE GREProbe
}

// SetupVpcNatTunnels adds a VpcNatTunnelReconciler to mgr, with indexes of the tunnels by the
// remote gateway and the Vpc they name, so that a GatewayExIp copy or a Vpc appearing,
// changing or going re-reconciles the tunnels naming it. It may be called after mgr has
// started.
func SetupVpcNatTunnels(mgr manager.Manager, copies ctrlcluster.Cluster, localGlobalCIDR string, gre GREProbe) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1alpha1.VpcNatTunnel{}, tunnelRemoteGatewayIndex, func(o client.Object) []string {
		t := o.(*v1alpha1.VpcNatTunnel)
		return []string{remoteGatewayKey(t.Spec.ClusterID, t.Spec.GatewayName)}
	}); err != nil {
		return fmt.Errorf("indexing VpcNatTunnels by remote gateway: %w", err)
	}
	if err := idx.IndexField(ctx, &v1alpha1.VpcNatTunnel{}, tunnelVpcIndex, func(o client.Object) []string {
		return []string{o.(*v1alpha1.VpcNatTunnel).Spec.NatGwDp}
	}); err != nil {
		return fmt.Errorf("indexing VpcNatTunnels by Vpc: %w", err)
	}
	r := &VpcNatTunnelReconciler{Client: mgr.GetClient(), Copies: copies.GetClient(), LocalGlobalCIDR: localGlobalCIDR, GRE: gre}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("vpcnattunnel").
		// Status updates (ours) change no generation; dropping them keeps a status write from
		// asking for another reconcile.
		For(&v1alpha1.VpcNatTunnel{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Kind(copies.GetCache(), client.Object(&v1alpha1.GatewayExIp{}),
			handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
				l := o.GetLabels()
				return r.tunnelsBy(ctx, tunnelRemoteGatewayIndex, remoteGatewayKey(l[v1alpha1.ClusterLabel], l[gatewayExIPGatewayLabel]))
			}), isGatewayExIPCopy)).
		Watches(&v1alpha1.Vpc{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.tunnelsBy(ctx, tunnelVpcIndex, o.GetName())
		})).
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("creating the VpcNatTunnel controller: %w", err)
	}
	return nil
}

// tunnelsBy are requests for the tunnels whose index holds key.
func (r *VpcNatTunnelReconciler) tunnelsBy(ctx context.Context, index, key string) []reconcile.Request {
	list := &v1alpha1.VpcNatTunnelList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index: key}); err != nil {
		logf.FromContext(ctx).Error(err, "Not listing the VpcNatTunnels to re-reconcile", "index", index, "key", key)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// Reconcile gathers what the tunnel names, computes its status and patches it when it changed.
func (r *VpcNatTunnelReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	t := &v1alpha1.VpcNatTunnel{}
	if err := r.Client.Get(ctx, req.NamespacedName, t); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	in := tunnelInputs{LocalGlobalCIDR: r.LocalGlobalCIDR}
	reader := r.Copies
	if reader == nil {
		reader = r.Client
	}
	copies := &v1alpha1.GatewayExIpList{}
	if err := reader.List(ctx, copies, client.InNamespace(v1alpha1.SystemNamespace), client.MatchingLabels{
		gatewayExIPManagedLabel: "true", v1alpha1.ClusterLabel: t.Spec.ClusterID, gatewayExIPGatewayLabel: t.Spec.GatewayName,
	}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the GatewayExIp copies of gateway %s of cluster %s: %w", t.Spec.GatewayName, t.Spec.ClusterID, err)
	}
	if len(copies.Items) > 0 {
		// The syncer copies one hub object per gateway and cluster; the first by name keeps
		// the answer stable should a stray second ever be there.
		slices.SortFunc(copies.Items, func(a, b v1alpha1.GatewayExIp) int { return strings.Compare(a.Name, b.Name) })
		in.Remote = &copies.Items[0]
	}
	vpc := &v1alpha1.Vpc{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Name: t.Spec.NatGwDp}, vpc); {
	case err == nil:
		in.Vpc = vpcLive
		if !vpc.DeletionTimestamp.IsZero() {
			in.Vpc = vpcDeleting
		}
	case client.IgnoreNotFound(err) != nil:
		return reconcile.Result{}, fmt.Errorf("reading Vpc %s (spec.natGwDp of VpcNatTunnel %s): %w", t.Spec.NatGwDp, t.Name, err)
	}
	if tunnelType(t) == v1alpha1.VpcTunnelGRE {
		in.GREAvailable, in.GREProbeErr = r.GRE.GREAvailable()
	}
	// A probe that could not tell is asked again (with backoff, and logged by
	// controller-runtime as the reconcile's error), whether or not the status changed;
	// everything else waits for an event.
	var retry error
	if in.GREProbeErr != nil {
		retry = fmt.Errorf("VpcNatTunnel %s of type gre: %w", t.Name, in.GREProbeErr)
	}
	next := t.DeepCopy()
	next.Status = tunnelStatus(t, in)
	if equality.Semantic.DeepEqual(t.Status, next.Status) {
		return reconcile.Result{}, retry
	}
	if err := r.Client.Status().Patch(ctx, next, client.MergeFrom(t)); err != nil {
		return reconcile.Result{}, fmt.Errorf("updating the status of VpcNatTunnel %s: %w", t.Name, err)
	}
	ready := meta.FindStatusCondition(next.Status.Conditions, v1alpha1.VpcNatTunnelConditionReady)
	log.Info("Updated a VpcNatTunnel's status", "vpcNatTunnel", t.Name, "remoteIP", next.Status.RemoteIP, "ready", ready.Status, "reason", ready.Reason)
	return reconcile.Result{}, retry
}

// tunnelInputs are what a tunnel's status is computed from.
type tunnelInputs struct {
	// Remote is the GatewayExIp copy of the remote gateway; nil while there is none.
	Remote *v1alpha1.GatewayExIp
	// Vpc is the state of the local Vpc spec.natGwDp names.
	Vpc vpcState
	// LocalGlobalCIDR is this cluster's global CIDR, empty without one.
	LocalGlobalCIDR string
	// GREAvailable and GREProbeErr are the probe's answer, asked for gre tunnels only.
	GREAvailable bool
	GREProbeErr  error
}

// vpcState is whether the Vpc a tunnel leaves from is there.
type vpcState int

const (
	vpcMissing vpcState = iota
	vpcLive
	// vpcDeleting: deleted, and kept by its finalizer while this tunnel names it
	// (the ovnmaster's InUse), so the tunnel must not wait for it.
	vpcDeleting
)

func tunnelType(t *v1alpha1.VpcNatTunnel) v1alpha1.VpcTunnelType {
	if t.Spec.Type == "" {
		return v1alpha1.VpcTunnelWireGuard
	}
	return t.Spec.Type
}

// tunnelStatus is the tunnel's status given in: its conditions set on a copy of the present
// ones (so a condition keeps its lastTransitionTime while its status stays), and the fields the
// prototype reported. Ready is False with the reason of the first thing missing, in the order a
// user would fix them: the type (it never comes by itself), the Vpc, the remote gateway, the
// global CIDR; and with DataPlanePending once all is there.
func tunnelStatus(t *v1alpha1.VpcNatTunnel, in tunnelInputs) v1alpha1.VpcNatTunnelStatus {
	st := v1alpha1.VpcNatTunnelStatus{Conditions: slices.Clone(t.Status.Conditions)}
	gen := t.Generation
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	var notReady []metav1.Condition // in the order Ready reports them

	hubName := v1alpha1.GatewayExIpHubName(t.Spec.ClusterID, t.Spec.GatewayName)
	copyName := v1alpha1.GatewayExIpName(t.Spec.GatewayName, t.Spec.ClusterID)
	var remoteCond metav1.Condition
	if in.Remote == nil {
		remoteCond = metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonRemoteGatewayNotFound,
			Message: fmt.Sprintf("waiting for GatewayExIp %s in %s (gateway %s of cluster %s, published on the hub as %s); the tunnel comes up when it appears",
				copyName, v1alpha1.SystemNamespace, t.Spec.GatewayName, t.Spec.ClusterID, hubName)}
	} else {
		st.RemoteIP = in.Remote.Spec.ExternalIP
		st.RemoteGlobalnetCIDR = in.Remote.Spec.GlobalnetCIDR
		remoteCond = metav1.Condition{Status: metav1.ConditionTrue, Reason: "Found",
			Message: fmt.Sprintf("GatewayExIp %s: external IP %s, global CIDR %s", in.Remote.Name, st.RemoteIP, st.RemoteGlobalnetCIDR)}
	}
	st.LocalGlobalnetCIDR = in.LocalGlobalCIDR

	var vpcCond metav1.Condition
	switch in.Vpc {
	case vpcLive:
		vpcCond = metav1.Condition{Status: metav1.ConditionTrue, Reason: "Found", Message: fmt.Sprintf("the tunnel leaves from Vpc %s", t.Spec.NatGwDp)}
	case vpcDeleting:
		vpcCond = metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonVpcNotFound,
			Message: fmt.Sprintf("spec.natGwDp: Vpc %s is being deleted and waits for this tunnel to go; delete the tunnel, or set spec.natGwDp to another local Vpc", t.Spec.NatGwDp)}
	default:
		vpcCond = metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonVpcNotFound,
			Message: fmt.Sprintf("spec.natGwDp: there is no Vpc %s in this cluster; create it, or set spec.natGwDp to the name of the local Vpc the tunnel leaves from (kubectl get vpcs)", t.Spec.NatGwDp)}
	}

	typ := tunnelType(t)
	var typeCond metav1.Condition
	switch {
	case typ != v1alpha1.VpcTunnelGRE:
		typeCond = metav1.Condition{Status: metav1.ConditionTrue, Reason: "Supported", Message: fmt.Sprintf("%s needs nothing of the kernel beyond what Octopus's gateways use", typ)}
	case in.GREProbeErr != nil:
		typeCond = metav1.Condition{Status: metav1.ConditionUnknown, Reason: "ProbeFailed", Message: fmt.Sprintf("spec.type gre: could not tell whether the kernel has GRE (%v); retrying", in.GREProbeErr)}
	case !in.GREAvailable:
		typeCond = metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonGREUnavailable,
			Message: "spec.type gre: this kernel has no GRE (ip_gre), so nothing is made for this tunnel; set spec.type to wireguard (encrypted, the default) or vxlan"}
	default:
		typeCond = metav1.Condition{Status: metav1.ConditionTrue, Reason: "Supported", Message: "the kernel makes GRE links"}
	}

	for _, c := range []struct {
		typ  string
		cond metav1.Condition
	}{
		{v1alpha1.VpcNatTunnelConditionTunnelTypeSupported, typeCond},
		{v1alpha1.VpcNatTunnelConditionVpcFound, vpcCond},
		{v1alpha1.VpcNatTunnelConditionRemoteGatewayFound, remoteCond},
	} {
		set(c.typ, c.cond.Status, c.cond.Reason, c.cond.Message)
		if c.cond.Status != metav1.ConditionTrue {
			notReady = append(notReady, c.cond)
		}
	}
	if in.LocalGlobalCIDR == "" {
		notReady = append(notReady, metav1.Condition{Reason: v1alpha1.ReasonNoGlobalCIDR,
			Message: "this cluster has no global CIDR on the hub: the VPC's traffic is SNATed to global egress addresses, so the cluster must join with globalnet addressing"})
	}
	if len(notReady) > 0 {
		msgs := make([]string, 0, len(notReady))
		for _, c := range notReady {
			msgs = append(msgs, c.Message)
		}
		set(v1alpha1.VpcNatTunnelConditionReady, metav1.ConditionFalse, notReady[0].Reason, strings.Join(msgs, "; "))
	} else {
		set(v1alpha1.VpcNatTunnelConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDataPlanePending,
			fmt.Sprintf("remote gateway %s at %s and Vpc %s found; the %s tunnel, its route to %s and the SNAT to %s are not built yet (issue 33's data plane is still to do)",
				copyName, st.RemoteIP, t.Spec.NatGwDp, typ, st.RemoteGlobalnetCIDR, st.LocalGlobalnetCIDR))
	}
	return st
}
