package ovnmaster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/globalnet"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

// VpcFinalizer holds a Vpc until its OVN rows are gone: they are not Kubernetes objects, so no
// owner reference can take them, and they must not outlive the Vpc (a later Vpc of the same
// name would otherwise inherit a stale router's ports).
const VpcFinalizer = "octopus.io/vpc"

// Reasons of a Vpc's conditions, besides those in api/v1alpha1.
const (
	ReasonVpcApplied     = "Applied"
	ReasonVpcInvalid     = "InvalidSpec"
	ReasonVpcApplyFailed = "ApplyFailed"
	ReasonVpcBound       = "Bound"
	ReasonVpcDeleting    = "Deleting"
	// ReasonVpcNoGateway is the reason of ExternalIPAllocated=False for a Vpc that can have
	// no gateway.
	ReasonVpcNoGateway = "NoGateway"
)

// VpcApplier writes VPCs into the NB database; *ovn.Client is one.
type VpcApplier interface {
	ApplyVpc(ctx context.Context, v ovn.Vpc) (ovn.VpcResult, error)
	DeleteVpc(ctx context.Context, clusterID, vpc string) error
}

// VpcReconciler makes each Vpc's OVN router, switches and pods' ports match the Vpc and the
// pods placed in it (podnet.Placement), writes what each pod got into its annotations, and
// reports on the Vpc's conditions. The cluster's network (Reconciler) leaves those pods alone.
type VpcReconciler struct {
	// Client reads Vpcs, pods, VpcNatTunnels and VpcDnsForwards (the manager's cache) and
	// writes Vpcs' finalizers and status and pods' annotations.
	Client    client.Client
	NB        VpcApplier
	ClusterID string
	// GatewayConfigMap and GatewayLease are the cluster gateway's, as for Reconciler: every
	// VPC's gateway port is requested on the chassis the cluster's gateway port is, the
	// active gateway's node, and follows it. Both zero (interconnect mode) or no active
	// gateway: the VPCs have no gateway.
	GatewayConfigMap, GatewayLease types.NamespacedName
	// Global is the cluster's global CIDR laid out, nil when it has none: each Vpc's gateway
	// gets an external address of its pool (status.gateway.externalIP), written on the
	// gateway's port for the gateway node.
	Global *globalip.Layout
	// GlobalPool is the hub's globalnet pool (invalid: unknown), which VPC pods route through
	// the VPC's router (vpcAttachment).
	GlobalPool netip.Prefix
	Events     events.EventRecorder
	Log        logr.Logger
}

// Reconcile makes one Vpc so.
func (r *VpcReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vpc := &v1alpha1.Vpc{}
	if err := r.Client.Get(ctx, req.NamespacedName, vpc); err != nil {
		// Gone: its finalizer went after its rows did.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var vpcs v1alpha1.VpcList
	if err := r.Client.List(ctx, &vpcs); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing Vpcs: %w", err)
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing pods: %w", err)
	}
	bound, conflicts := Bindings(vpcs.Items)
	deleting := !vpc.DeletionTimestamp.IsZero()
	if !deleting && !controllerutil.ContainsFinalizer(vpc, VpcFinalizer) {
		controllerutil.AddFinalizer(vpc, VpcFinalizer)
		if err := r.Client.Update(ctx, vpc); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding finalizer %s to Vpc %s: %w", VpcFinalizer, vpc.Name, err)
		}
	}
	if deleting && !controllerutil.ContainsFinalizer(vpc, VpcFinalizer) {
		return reconcile.Result{}, nil
	}

	var inVpc []*corev1.Pod
	for i := range pods.Items {
		pod := &pods.Items[i]
		if member(pod) && podnet.Placement(pod.Annotations, pod.Namespace, bound) == vpc.Name {
			inVpc = append(inVpc, pod)
		}
	}
	status := vpc.Status.DeepCopy()
	setCondition := func(typ string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: vpc.Generation})
	}
	switch c := conflicts[vpc.Name]; {
	case deleting:
		setCondition(v1alpha1.VpcConditionNamespacesBound, false, ReasonVpcDeleting,
			"the Vpc is being deleted: new pods of its namespaces go to the cluster's network, or to another Vpc listing them")
	case len(c) > 0:
		setCondition(v1alpha1.VpcConditionNamespacesBound, false, v1alpha1.ReasonNamespaceConflict, strings.Join(c, "; "))
	default:
		setCondition(v1alpha1.VpcConditionNamespacesBound, true, ReasonVpcBound, fmt.Sprintf("namespaces %v are bound to this Vpc", vpc.Spec.Namespaces))
	}

	if deleting {
		users, err := r.users(ctx, vpc.Name, inVpc)
		if err != nil {
			return reconcile.Result{}, err
		}
		if len(users) == 0 {
			if err := r.NB.DeleteVpc(ctx, r.ClusterID, vpc.Name); err != nil {
				setCondition(v1alpha1.VpcConditionReady, false, ReasonVpcDeleting, "deleting the VPC's OVN rows: "+err.Error())
				return reconcile.Result{}, errors.Join(r.patchStatus(ctx, vpc, status), fmt.Errorf("deleting VPC %s from OVN: %w", vpc.Name, err))
			}
			controllerutil.RemoveFinalizer(vpc, VpcFinalizer)
			if err := r.Client.Update(ctx, vpc); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("removing finalizer %s from Vpc %s: %w", VpcFinalizer, vpc.Name, err))
			}
			r.Log.Info("Deleted the VPC's OVN rows", "vpc", vpc.Name)
			return reconcile.Result{}, nil
		}
		// Its pods keep their ports until they go; each going is a pod event that brings
		// this Vpc back here.
		setCondition(v1alpha1.VpcConditionReady, false, v1alpha1.ReasonVpcInUse, fmt.Sprintf(
			"deletion waits: %s still use it; delete those (or their namespaces' pods) and the Vpc goes", strings.Join(users, ", ")))
	}

	desired, err := DesiredVpc(r.ClusterID, vpc)
	if err != nil {
		setCondition(v1alpha1.VpcConditionReady, false, ReasonVpcInvalid, err.Error())
		// Nothing to retry until the spec changes, which is an event of its own.
		return reconcile.Result{}, r.patchStatus(ctx, vpc, status)
	}
	chassis, err := activeGatewayChassis(ctx, r.Client, r.GatewayConfigMap, r.GatewayLease)
	if err != nil {
		// Applying without it would take the gateway's port from a working gateway.
		return reconcile.Result{}, fmt.Errorf("VPC %s: %w", vpc.Name, err)
	}
	var gateway string
	desired.Gateway, gateway = VpcGatewayOn(desired, chassis)
	external, err := r.externalIP(ctx, vpc, vpcs.Items)
	if err != nil {
		return reconcile.Result{}, errors.Join(r.patchStatus(ctx, vpc, status), fmt.Errorf("VPC %s: %w", vpc.Name, err))
	}
	setCondition(v1alpha1.VpcConditionExternalIP, external.ok, external.reason, external.message)
	status.Gateway = nil
	if external.ip.IsValid() {
		status.Gateway = &v1alpha1.VpcGatewayStatus{ExternalIP: external.ip.String()}
		if desired.Gateway != nil {
			desired.Gateway.ExternalIP = external.ip
		}
	}
	refused := map[ovn.PodKey]error{}
	for _, pod := range inVpc {
		k := ovn.PodKey{Namespace: pod.Namespace, Name: pod.Name}
		req, err := podnet.RequestedIP(pod.Annotations)
		if err != nil {
			if _, has, _ := podnet.Find(pod.Annotations); !has {
				refused[k] = err
				continue
			}
			req = netip.Addr{}
		}
		desired.Pods = append(desired.Pods, ovn.VpcPod{
			Pod:    ovn.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), RequestedIP: req},
			Subnet: pod.Annotations[podnet.VpcSubnetAnnotation],
		})
	}
	applyCtx, cancel := context.WithTimeout(ctx, applyTimeout)
	res, err := r.NB.ApplyVpc(applyCtx, desired)
	cancel()
	if err != nil {
		unavailable := fmt.Errorf("could not write VPC %s to the OVN northbound database, retrying: %w", vpc.Name, err)
		var writes []func() error
		for _, pod := range inVpc {
			if _, has, _ := podnet.Find(pod.Annotations); !has && pod.Annotations[podnet.ErrorAnnotation] == "" {
				k := ovn.PodKey{Namespace: pod.Namespace, Name: pod.Name}
				writes = append(writes, func() error { return r.pods().setPodError(ctx, pod, cmpErr(refused[k], unavailable)) })
			}
		}
		if !deleting {
			setCondition(v1alpha1.VpcConditionReady, false, ReasonVpcApplyFailed, unavailable.Error())
		}
		return reconcile.Result{}, errors.Join(concurrently(writes), r.patchStatus(ctx, vpc, status), unavailable)
	}
	writes := make([]func() error, 0, len(inVpc))
	for _, pod := range inVpc {
		k := ovn.PodKey{Namespace: pod.Namespace, Name: pod.Name}
		if att, ok := res.Attached[k]; ok {
			where := vpcAttachment(desired, att, r.GlobalPool)
			writes = append(writes, func() error { return r.setVpcAddress(ctx, pod, att, where) })
			continue
		}
		writes = append(writes, func() error { return r.pods().setPodError(ctx, pod, cmpErr(refused[k], res.Failed[k])) })
	}
	if !deleting {
		setCondition(v1alpha1.VpcConditionReady, true, ReasonVpcApplied, fmt.Sprintf(
			"router, %d subnet(s) and %s in OVN; %d of %d pods attached", len(desired.Subnets), gateway, len(res.Attached), len(inVpc)))
	}
	return reconcile.Result{}, errors.Join(concurrently(writes), r.patchStatus(ctx, vpc, status))
}

// externalAddress is a Vpc's external address and what its ExternalIPAllocated condition says.
type externalAddress struct {
	ip              netip.Addr
	ok              bool
	reason, message string
}

// externalIP is vpc's external address (VpcExternalIPs over every Vpc and the cluster's
// GlobalIngressIPs and GlobalEgressIPs, which share the pool), or why it has none.
func (r *VpcReconciler) externalIP(ctx context.Context, vpc *v1alpha1.Vpc, vpcs []v1alpha1.Vpc) (externalAddress, error) {
	if r.Global == nil {
		return externalAddress{reason: v1alpha1.ReasonNoGlobalCIDR, message: "this cluster has no global CIDR (the ovnmaster's --global-cidr), so the VPC's gateway has no external address and SNATs nothing; join the cluster with a global CIDR to give it one"}, nil
	}
	if !VpcWantsExternalIP(vpc) {
		return externalAddress{reason: ReasonVpcNoGateway, message: "the Vpc can have no gateway (see Ready), so it holds no external address"}, nil
	}
	var ingress v1alpha1.GlobalIngressIPList
	if err := r.Client.List(ctx, &ingress); err != nil {
		return externalAddress{}, fmt.Errorf("listing GlobalIngressIPs (their addresses share the pool with the VPC gateways'): %w", err)
	}
	var egress v1alpha1.GlobalEgressIPList
	if err := r.Client.List(ctx, &egress); err != nil {
		return externalAddress{}, fmt.Errorf("listing GlobalEgressIPs (their ranges share the pool with the VPC gateways'): %w", err)
	}
	ip, ok := globalnet.VpcExternalIPs(*r.Global, vpcs, VpcWantsExternalIP, ingress.Items, egress.Items)[vpc.Name]
	if !ok {
		return externalAddress{reason: v1alpha1.ReasonPoolExhausted, message: fmt.Sprintf(
			"no free address in the pool %s of global CIDR %s (shared with global ingress addresses and GlobalEgressIP ranges): unexport services, delete GlobalEgressIPs or other Vpcs",
			r.Global.Pool, r.Global.CIDR)}, nil
	}
	return externalAddress{ip: ip, ok: true, reason: v1alpha1.ReasonAllocated, message: fmt.Sprintf(
		"%s is the VPC gateway's external address, in the pool %s of global CIDR %s", ip, r.Global.Pool, r.Global.CIDR)}, nil
}

// VpcWantsExternalIP says whether v should hold an external address: one that can have a
// gateway (a valid spec, no subnet over the gateway's link), whether or not a gateway node is
// active right now, so that a failover never costs the address other clusters reach it at;
// while being deleted, only the address it holds (its gateway lives until its rows go).
func VpcWantsExternalIP(v *v1alpha1.Vpc) bool {
	desired, err := DesiredVpc("", v)
	if err != nil {
		return false
	}
	if gw, _ := VpcGatewayOn(desired, "any"); gw == nil {
		return false
	}
	return v.DeletionTimestamp.IsZero() || v.Status.Gateway != nil
}

// users are what keeps a deleted Vpc: its pods, and the VpcNatTunnels and VpcDnsForwards
// naming it, which would lose their network under them.
func (r *VpcReconciler) users(ctx context.Context, name string, pods []*corev1.Pod) ([]string, error) {
	var users []string
	for _, p := range pods {
		users = append(users, "pod "+p.Namespace+"/"+p.Name)
	}
	var tunnels v1alpha1.VpcNatTunnelList
	if err := r.Client.List(ctx, &tunnels); err != nil {
		return nil, fmt.Errorf("listing VpcNatTunnels: %w", err)
	}
	for _, t := range tunnels.Items {
		if t.Spec.NatGwDp == name {
			users = append(users, "VpcNatTunnel "+t.Name)
		}
	}
	var forwards v1alpha1.VpcDnsForwardList
	if err := r.Client.List(ctx, &forwards); err != nil {
		return nil, fmt.Errorf("listing VpcDnsForwards: %w", err)
	}
	for _, f := range forwards.Items {
		if f.Spec.Vpc == name {
			users = append(users, "VpcDnsForward "+f.Name)
		}
	}
	slices.Sort(users)
	const shown = 10
	if len(users) > shown {
		users = append(users[:shown], fmt.Sprintf("and %d more", len(users)-shown))
	}
	return users, nil
}

// DesiredVpc is the ovn.Vpc of a Vpc, without pods, or why the spec cannot be one. The API
// server's validation refuses such specs already (CEL); this keeps a Vpc written before that
// validation, or past it, from half-applying.
func DesiredVpc(clusterID string, vpc *v1alpha1.Vpc) (ovn.Vpc, error) {
	v := ovn.Vpc{ClusterID: clusterID, Name: vpc.Name}
	var errs []error
	for i, s := range vpc.Spec.Subnets {
		p, err := netip.ParsePrefix(s.CIDR)
		if err != nil || !p.Addr().Is4() || p.Masked() != p {
			errs = append(errs, fmt.Errorf("spec.subnets[%d].cidr %q is not an IPv4 network address with its prefix length; write it like 10.0.1.0/24", i, s.CIDR))
			continue
		}
		for j, o := range v.Subnets {
			if o.CIDR.Overlaps(p) {
				errs = append(errs, fmt.Errorf("spec.subnets[%d] (%s, %s) overlaps spec.subnets[%d] (%s, %s): give each subnet of a VPC a CIDR of its own", i, s.Name, p, j, o.Name, o.CIDR))
			}
		}
		v.Subnets = append(v.Subnets, ovn.Subnet{Name: s.Name, CIDR: p})
	}
	if len(vpc.Spec.Subnets) == 0 {
		errs = append(errs, errors.New("spec.subnets is empty: a VPC needs at least one subnet, such as {name: default, cidr: 10.0.1.0/24}"))
	}
	if err := errors.Join(errs...); err != nil {
		return ovn.Vpc{}, err
	}
	return v, nil
}

// VpcGatewayOn is v's gateway on chassis, the active gateway's node ("" for none), and what
// the Vpc's Ready condition says of it. A subnet over the gateway's link network
// (ovn.VpcGatewayLink) leaves the VPC without a gateway, saying which and what to do, rather
// than failing the whole VPC: its pods still meet each other.
func VpcGatewayOn(v ovn.Vpc, chassis string) (*ovn.VpcGateway, string) {
	if chassis == "" {
		return nil, "no gateway (no active gateway node)"
	}
	for i, s := range v.Subnets {
		if s.CIDR.Overlaps(ovn.VpcGatewayLink) {
			return nil, fmt.Sprintf("no gateway: spec.subnets[%d] (%s, %s) overlaps %s, the link between the VPC's router and its gateway; give the subnet a CIDR outside it",
				i, s.Name, s.CIDR, ovn.VpcGatewayLink)
		}
	}
	return &ovn.VpcGateway{Chassis: chassis}, "its gateway on " + chassis
}

// vpcAttachment is where att is in v, for the pod's VpcAnnotation: its subnet, and the routes
// through the VPC's router — the VPC's other subnets, and globalPool, the global addresses of
// every cluster, which the router sends to the VPC's gateway (its default route) to be SNATed
// to the VPC's external address. The pod's eth0 keeps its default route (its cluster's
// services, DNS, the API server); without the pool route a VPC pod would reach global
// addresses only through eth0, never its VPC's gateway. A pool that overlaps one of the VPC's
// subnets is not routed: the subnet's own addresses must stay on the subnet.
func vpcAttachment(v ovn.Vpc, att ovn.Attachment, globalPool netip.Prefix) podnet.VpcAttachment {
	a := podnet.VpcAttachment{Vpc: v.Name}
	poolApart := globalPool.IsValid()
	for _, s := range v.Subnets {
		poolApart = poolApart && !s.CIDR.Overlaps(globalPool)
		if s.CIDR.Contains(att.IP.Addr()) && a.Subnet == "" {
			a.Subnet, a.CIDR = s.Name, s.CIDR
			continue
		}
		a.Routes = append(a.Routes, s.CIDR)
	}
	if poolApart {
		a.Routes = append(a.Routes, globalPool)
	}
	return a
}

// Bindings maps each namespace to the Vpc it is bound to, and says, for each Vpc that lists a
// namespace another holds, which and who holds it. A namespace listed by two Vpcs is the older
// one's (creationTimestamp, then name), so a new Vpc can never take a namespace from a working
// one. A Vpc being deleted binds nothing: new pods of its namespaces go elsewhere and its
// deletion can finish.
func Bindings(vpcs []v1alpha1.Vpc) (bound map[string]string, conflicts map[string][]string) {
	live := make([]*v1alpha1.Vpc, 0, len(vpcs))
	for i := range vpcs {
		if vpcs[i].DeletionTimestamp.IsZero() {
			live = append(live, &vpcs[i])
		}
	}
	slices.SortFunc(live, func(a, b *v1alpha1.Vpc) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	bound, conflicts = map[string]string{}, map[string][]string{}
	for _, v := range live {
		for _, ns := range v.Spec.Namespaces {
			if holder, taken := bound[ns]; taken {
				conflicts[v.Name] = append(conflicts[v.Name], fmt.Sprintf(
					"spec.namespaces: namespace %s is already bound to Vpc %s (the older); remove it from this Vpc's spec.namespaces or from %s's", ns, holder, holder))
				continue
			}
			bound[ns] = v.Name
		}
	}
	return bound, conflicts
}

// setVpcAddress writes the pod's network-status entry and its VpcAnnotation in one patch.
func (r *VpcReconciler) setVpcAddress(ctx context.Context, pod *corev1.Pod, att ovn.Attachment, where podnet.VpcAttachment) error {
	entry := podnet.Entry(att.IP.Addr(), att.MAC.String())
	return r.pods().patchAnnotations(ctx, pod, func(a map[string]string) error {
		delete(a, podnet.ErrorAnnotation)
		a[podnet.VpcAnnotation] = where.Encode()
		return setEntry(a, &entry)
	})
}

// pods is the pod annotation writer the cluster's network uses too.
func (r *VpcReconciler) pods() *Reconciler {
	return &Reconciler{Client: r.Client, Events: r.Events, Log: r.Log}
}

// patchStatus writes the Vpc's status if it changed.
func (r *VpcReconciler) patchStatus(ctx context.Context, vpc *v1alpha1.Vpc, status *v1alpha1.VpcStatus) error {
	if equalConditions(vpc.Status.Conditions, status.Conditions) && equality.Semantic.DeepEqual(vpc.Status.Gateway, status.Gateway) {
		return nil
	}
	patched := vpc.DeepCopy()
	patched.Status = *status
	if err := r.Client.Status().Patch(ctx, patched, client.MergeFrom(vpc)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("writing the status of Vpc %s: %w", vpc.Name, err)
	}
	return nil
}

// equalConditions ignores the transition times SetStatusCondition keeps when nothing changed.
func equalConditions(a, b []metav1.Condition) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.Condition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message && x.ObservedGeneration == y.ObservedGeneration
	})
}

// vpcsOf are the Vpc requests a pod's event concerns: the Vpc it is in and the one its
// namespace is bound to (they differ when the binding moved since the pod got its address).
func vpcsOf(pod *corev1.Pod, bound map[string]string) []reconcile.Request {
	var reqs []reconcile.Request
	for _, name := range []string{podnet.Placement(pod.Annotations, pod.Namespace, bound), bound[pod.Namespace]} {
		if name != "" && !slices.ContainsFunc(reqs, func(r reconcile.Request) bool { return r.Name == name }) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
		}
	}
	return reqs
}
