// Package ovnmaster is the Kubernetes side of the secondary network: it watches the pods of
// a member cluster and which node its active gateway is (the ConfigMap the gateway names itself
// in, else the Lease electing it), hands the whole set that should be on the network, with the
// active gateway's chassis, to the OVN data plane
// (internal/datapath/ovn), and writes what each pod got into its annotations (podnet). Its
// VpcReconciler does the same for each Vpc and the pods of the namespaces bound to it.
package ovnmaster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

// Applier applies a cluster's desired secondary network; *ovn.Client is one.
type Applier interface {
	Apply(ctx context.Context, n ovn.Network) (ovn.Result, error)
}

// networkRequest is the only request the reconciler gets: every pod event asks for the whole
// network to be reconciled, so a burst of events is one Apply, and Apply always sees every
// pod (it could not release a deleted pod's port from that pod's event alone, which may be
// missed, and must know every address in use to hand out a new one).
var networkRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "secondary-network"}}

// applyTimeout bounds one Apply, which otherwise waits as long as the NB database is
// unreachable; the pods then learn why, and the request is retried with backoff.
const applyTimeout = 10 * time.Second

// Event reasons and actions on pods (events.k8s.io).
const (
	ReasonAddressFailed = "SecondaryNetworkFailed"
	actionAllocate      = "AllocateSecondaryAddress"
)

// Reconciler makes the cluster's secondary network match its pods.
type Reconciler struct {
	// Client reads pods (from the manager's cache) and patches their annotations.
	Client client.Client
	// NB is the OVN northbound database.
	NB Applier
	// ClusterID and CIDR are the cluster's ID and secondary block.
	ClusterID string
	CIDR      netip.Prefix
	// GatewayConfigMap is the ConfigMap the active gateway names its node in
	// (v1alpha1.GatewayConfigMapName in octopus-system, key v1alpha1.GatewayConfigMapGatewayKey)
	// once it forwards: that node's chassis gets the gateway's port (GatewayChassis). Zero: not
	// consulted, the Lease alone decides.
	GatewayConfigMap types.NamespacedName
	// GatewayLease is the Lease electing the cluster's active gateway (v1alpha1.GatewayLeaseName
	// in octopus-system): its holder's chassis gets the gateway's port when the ConfigMap names
	// no node. Zero (and no node named): the network has no gateway port.
	GatewayLease types.NamespacedName
	// Events records why a pod got no address.
	Events events.EventRecorder
	Log    logr.Logger

	// gatewayChassis is the chassis the last successful Apply requested the gateway's port
	// on, to log its moves. Reconcile runs one at a time (one request, one worker).
	gatewayChassis string
}

// Reconcile applies the network of every pod and writes each pod's result.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing pods: %w", err)
	}
	var vpcs v1alpha1.VpcList
	if err := r.Client.List(ctx, &vpcs); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing Vpcs: %w", err)
	}
	bound, _ := Bindings(vpcs.Items)
	chassis, err := r.activeGatewayChassis(ctx)
	if err != nil {
		// Applying without it would take the gateway's port away from a working gateway.
		return reconcile.Result{}, err
	}
	n := ovn.Network{ClusterID: r.ClusterID, CIDR: r.CIDR, GatewayChassis: chassis}
	members := map[ovn.PodKey]*corev1.Pod{}
	refused := map[ovn.PodKey]error{}
	var leaving []*corev1.Pod
	for i := range pods.Items {
		pod := &pods.Items[i]
		k := ovn.PodKey{Namespace: pod.Namespace, Name: pod.Name}
		if !member(pod) {
			// Host-network and system pods have nothing to clean; a pod that opted out or
			// finished has its address released, and must not keep claiming it.
			leaving = append(leaving, pod)
			continue
		}
		if podnet.Placement(pod.Annotations, pod.Namespace, bound) != "" {
			continue // a VPC's pod: VpcReconciler's
		}
		members[k] = pod
		req, err := podnet.RequestedIP(pod.Annotations)
		if err != nil {
			if _, has, _ := podnet.Find(pod.Annotations); !has {
				refused[k] = err
				continue
			}
			// The request only matters when the port is made: a pod that has its address
			// keeps it whatever its annotation says now.
			req = netip.Addr{}
		}
		n.Pods = append(n.Pods, ovn.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), RequestedIP: req})
	}

	applyCtx, cancel := context.WithTimeout(ctx, applyTimeout)
	res, err := r.NB.Apply(applyCtx, n)
	cancel()
	if err != nil {
		// Nothing was written. Pods that have their address keep it (their ports are still
		// in the database), and pods that were told why they have none keep that reason; new
		// pods are told why they wait.
		unavailable := fmt.Errorf("could not write to the OVN northbound database, retrying: %w", err)
		var writes []func() error
		for k, pod := range members {
			if _, has, _ := podnet.Find(pod.Annotations); !has && pod.Annotations[podnet.ErrorAnnotation] == "" {
				writes = append(writes, func() error { return r.setPodError(ctx, pod, cmpErr(refused[k], unavailable)) })
			}
		}
		return reconcile.Result{}, errors.Join(concurrently(writes), fmt.Errorf("applying the secondary network: %w", err))
	}
	writes := make([]func() error, 0, len(members)+len(leaving))
	for k, pod := range members {
		if att, ok := res.Attached[k]; ok {
			writes = append(writes, func() error { return r.setPodAddress(ctx, pod, att) })
			continue
		}
		writes = append(writes, func() error { return r.setPodError(ctx, pod, cmpErr(refused[k], res.Failed[k])) })
	}
	for _, pod := range leaving {
		writes = append(writes, func() error {
			return r.patchAnnotations(ctx, pod, func(a map[string]string) error {
				delete(a, podnet.ErrorAnnotation)
				delete(a, podnet.VpcAnnotation)
				return setEntry(a, nil)
			})
		})
	}
	errs := []error{concurrently(writes)}
	if len(res.Failed)+len(refused) > 0 {
		r.Log.V(1).Info("Pods without a secondary address", "failed", len(res.Failed)+len(refused))
	}
	if chassis != r.gatewayChassis && res.GatewayFailed == nil {
		r.Log.Info("Moved the gateway's port on the secondary network to the active gateway's chassis",
			"port", ovn.GatewayPortName(r.ClusterID), "from", r.gatewayChassis, "to", chassis)
		r.gatewayChassis = chassis
	}
	if res.GatewayFailed != nil {
		// Returned, so the request is retried (with backoff) until the address is free.
		errs = append(errs, fmt.Errorf("the gateway's port on the secondary network: %w", res.GatewayFailed))
	}
	return reconcile.Result{}, errors.Join(errs...)
}

// activeGatewayChassis is the OVN chassis of the active gateway's node: the node the
// gateway ConfigMap names, else the holder of the gateway Lease (a gateway of an earlier
// version wrote no name), else "" (no Lease, or released by a gateway that stopped cleanly): no
// gateway port then. A node name is by convention the name of its chassis (ovn-controller's
// Open_vSwitch external_ids:system-id, set by whoever runs ovn-controller on the node).
//
// The ConfigMap first, because a new Lease holder does not forward yet: the gateway names
// itself there only once its tunnels are applied and its Peer published, and on a clean
// handover the old one keeps forwarding until then (make-before-break, internal/gateway's
// handover.go). Moving the port at the Lease change would send the pods' traffic to a node
// whose tunnels are not up. It is the route agents' rule (internal/routeagent/contract.go), so
// the pods' and the nodes' traffic leave the cluster through the same gateway.
func (r *Reconciler) activeGatewayChassis(ctx context.Context) (string, error) {
	return activeGatewayChassis(ctx, r.Client, r.GatewayConfigMap, r.GatewayLease)
}

// activeGatewayChassis is Reconciler.activeGatewayChassis for any reader of the gateway's
// ConfigMap and Lease: the Vpc controller binds every VPC's gateway port to the same chassis.
func activeGatewayChassis(ctx context.Context, c client.Reader, configMap, leaseKey types.NamespacedName) (string, error) {
	if configMap.Name != "" {
		cm := &corev1.ConfigMap{}
		err := c.Get(ctx, configMap, cm)
		switch {
		case err == nil:
			if node := NamedGateway(cm); node != "" {
				return node, nil
			}
		case !apierrors.IsNotFound(err):
			return "", fmt.Errorf("reading the gateway ConfigMap %s: %w", configMap, err)
		}
	}
	if leaseKey.Name == "" {
		return "", nil
	}
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, leaseKey, lease); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("reading the gateway Lease %s: %w", leaseKey, err)
	}
	return ChassisOf(lease), nil
}

// NamedGateway is the node a gateway ConfigMap names as the active gateway; "" when it names
// none. Trimmed as the route agents trim it (routeagent.ActiveGateway), so both read one node.
func NamedGateway(cm *corev1.ConfigMap) string {
	return strings.TrimSpace(cm.Data[v1alpha1.GatewayConfigMapGatewayKey])
}

// ChassisOf is the chassis a gateway Lease names: its holder.
func ChassisOf(lease *coordinationv1.Lease) string {
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// member reports whether the pod belongs on the secondary network.
func member(pod *corev1.Pod) bool {
	return !pod.Spec.HostNetwork && !podnet.SystemNamespace(pod.Namespace) && !podnet.OptedOut(pod.Annotations) && !terminal(pod)
}

// terminal pods have stopped for good: their address goes back to the block.
func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// patchConcurrency is how many pods' annotations are written at once. One at a time, each new
// pod of a burst waited one API round trip per pod before it, and so did its sandbox, which
// waits for the address (internal/secondarynet/nriplugin). Writes that change nothing send no request.
const patchConcurrency = 8

// concurrently runs writes, patchConcurrency at a time, and joins their errors.
func concurrently(writes []func() error) error {
	errs := make([]error, len(writes))
	slots := make(chan struct{}, patchConcurrency)
	var wg sync.WaitGroup
	for i, write := range writes {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			errs[i] = write()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// setPodAddress writes the pod's network-status entry and clears any earlier error.
func (r *Reconciler) setPodAddress(ctx context.Context, pod *corev1.Pod, att ovn.Attachment) error {
	entry := podnet.Entry(att.IP.Addr(), att.MAC.String())
	return r.patchAnnotations(ctx, pod, func(a map[string]string) error {
		delete(a, podnet.ErrorAnnotation)
		delete(a, podnet.VpcAnnotation)
		return setEntry(a, &entry)
	})
}

// setPodError records why the pod has no address, as an annotation (which the NRI plugin
// reads to refuse the pod) and, when the reason is new, as an event.
func (r *Reconciler) setPodError(ctx context.Context, pod *corev1.Pod, reason error) error {
	msg := reason.Error()
	if pod.Annotations[podnet.ErrorAnnotation] == msg {
		return nil
	}
	if err := r.patchAnnotations(ctx, pod, func(a map[string]string) error {
		a[podnet.ErrorAnnotation] = msg
		delete(a, podnet.VpcAnnotation)
		return setEntry(a, nil)
	}); err != nil {
		return err
	}
	r.Events.Eventf(pod, nil, corev1.EventTypeWarning, ReasonAddressFailed, actionAllocate, "No address on the secondary network: %s", msg)
	return nil
}

func setEntry(a map[string]string, entry *podnet.Status) error {
	v, err := podnet.Set(a[podnet.NetworkStatusAnnotation], entry)
	if err != nil {
		return err
	}
	if v == "" {
		delete(a, podnet.NetworkStatusAnnotation)
	} else {
		a[podnet.NetworkStatusAnnotation] = v
	}
	return nil
}

// patchAnnotations applies change to a copy of the pod's annotations and patches the pod if
// they differ. A merge patch touches only the keys that changed, so it races with no other
// writer of the pod's annotations.
func (r *Reconciler) patchAnnotations(ctx context.Context, pod *corev1.Pod, change func(map[string]string) error) error {
	a := maps.Clone(pod.Annotations)
	if a == nil {
		a = map[string]string{}
	}
	if err := change(a); err != nil {
		return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if maps.Equal(a, pod.Annotations) {
		return nil
	}
	patched := pod.DeepCopy()
	patched.Annotations = a
	if err := r.Client.Patch(ctx, patched, client.MergeFrom(pod)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("annotating pod %s/%s: %w", pod.Namespace, pod.Name, err))
	}
	return nil
}
