// Package icmaster is the Kubernetes side of OVN interconnection (issue 32): it reads the
// cluster's Kube-OVN-style `ovn-ic-config` ConfigMap (internal/secondarynet/icconfig), builds
// the desired state of the cluster's availability zone (AZ) from it and the cluster's secondary
// block, and applies that to the cluster's OVN NB database through internal/datapath/ovnic.
//
// The AZ is named after the cluster ID; its router joins the secondary network's switch at the
// block's gateway address (the address the pods already route other clusters' blocks through,
// so pods need no new route; in this mode the ovnmaster must leave that address free) and the
// transit switch at the address icconfig derives from the block. gw-nodes become the transit
// port's gateway chassis, highest priority first (a node's chassis is named after it).
//
// What it did is written where the user wrote: the ConfigMap's StatusAnnotation holds the last
// outcome, and refusals (a bad key, a foreign az-name, a prefix another AZ already advertises)
// are also Warning events on it. Every change of the ConfigMap is applied live: ovnic.Apply
// moves chassis, options and routes in place, and enable-ic turned off makes the AZ leave
// (ovnic.Leave: out of its NB and the IC SB, so that the others drop its routes).
package icmaster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/datapath/ovnic"
	"github.com/octopus-mcs/octopus/internal/ipam/hostaddr"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
)

// Annotations of the ovn-ic-config ConfigMap: ours, beside Kube-OVN's data keys.
const (
	// StatusAnnotation is what the icmaster last made of the ConfigMap: "Applied: ..." or
	// the reason it could not.
	StatusAnnotation = icconfig.StatusAnnotation
	// OptOutAnnotation "true" keeps the cluster's secondary block from being advertised to
	// other AZs (Kube-OVN's per-subnet disableInterConnection; the cluster has one block).
	OptOutAnnotation = "octopus.io/disable-interconnection"
)

// Event reasons on the ConfigMap (events.k8s.io).
const (
	ReasonInvalid    = "InterconnectionInvalid"
	ReasonOverlap    = "InterconnectionOverlap"
	ReasonApplied    = "InterconnectionApplied"
	actionInterlink  = "ApplyInterconnection"
	notReadyInterval = 2 * time.Second
	// overlapInterval re-checks a refused prefix: the AZ advertising it may leave.
	overlapInterval = 30 * time.Second
	applyTimeout    = 15 * time.Second
)

// Applier applies an AZ, or takes it out; *ovnic.Client is one, connected to one IC SB.
type Applier interface {
	Apply(ctx context.Context, az ovnic.AZ) error
	Leave(ctx context.Context, az string) error
	// TransitAddresses are the AZs' addresses on transit switch ts, by AZ name, from IC SB:
	// where an InterconnectRoute's targetCluster resolves.
	TransitAddresses(ctx context.Context, ts string) (map[string]netip.Addr, error)
}

// Connector connects an Applier to the AZ's NB and the given IC SB endpoint.
type Connector func(ctx context.Context, icsb string) (Applier, func(), error)

// Reconciler makes the AZ's NB match the ovn-ic-config ConfigMap.
type Reconciler struct {
	// Client reads the ConfigMap (from the manager's cache) and annotates it.
	Client client.Client
	// ConfigMap is where the configuration is (icconfig.ConfigMapNamespace/ConfigMapName).
	ConfigMap types.NamespacedName
	// ClusterID names the AZ; CIDR is the cluster's secondary block, Pool the hub's pool of
	// blocks (the transit address is derived from the block's place in it).
	ClusterID  string
	CIDR, Pool netip.Prefix
	// Connect connects to the databases; called again when ic-db-host or the ports change.
	Connect Connector
	Events  events.EventRecorder
	Log     logr.Logger

	mu      sync.Mutex
	applier Applier
	close   func()
	icsb    string
}

// Desired is the AZ a valid configuration asks for.
func Desired(cfg icconfig.Config, clusterID string, block, pool netip.Prefix, optOut bool) (ovnic.AZ, error) {
	b, err := hostaddr.NewBlock(block)
	if err != nil {
		return ovnic.AZ{}, fmt.Errorf("secondary block: %w", err)
	}
	transit, err := icconfig.TransitAddress(pool, block)
	if err != nil {
		return ovnic.AZ{}, err
	}
	return ovnic.AZ{
		Name:           clusterID,
		TransitSwitch:  icconfig.TransitSwitch,
		TransitAddress: transit,
		GatewayChassis: cfg.GatewayNodes,
		Subnets: []ovnic.Subnet{{
			Switch: ovn.SwitchName(clusterID), Address: netip.PrefixFrom(b.Gateway(), block.Bits()), OptOut: optOut,
		}},
		AutoRoutes: cfg.AutoRoute,
	}, nil
}

// Reconcile applies the ConfigMap and the InterconnectRoutes, then writes each route's status:
// whatever the request, the AZ is recomputed whole (one desired state, one Apply).
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	items, err := r.listRoutes(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	res, outcomes, err := r.reconcileAZ(ctx, items)
	return res, errors.Join(err, r.reportRoutes(ctx, items, outcomes))
}

// reconcileAZ applies the ConfigMap with the routes of items, and says what became of each.
func (r *Reconciler) reconcileAZ(ctx context.Context, items []v1alpha1.InterconnectRoute) (reconcile.Result, map[string]RouteOutcome, error) {
	notInterconnected := func(why string) map[string]RouteOutcome {
		return notApplied(items, v1alpha1.ReasonNotInterconnected, why)
	}
	var cm corev1.ConfigMap
	if err := r.Client.Get(ctx, r.ConfigMap, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			r.Log.V(1).Info("No interconnection configuration", "configMap", r.ConfigMap)
			return reconcile.Result{}, notInterconnected(fmt.Sprintf(
				"the cluster is not an OVN-IC AZ: there is no ConfigMap %s (octopus join --interconnect ovn-ic writes it)", r.ConfigMap)), nil
		}
		return reconcile.Result{}, nil, fmt.Errorf("reading %s: %w", r.ConfigMap, err)
	}
	cfg, err := icconfig.Parse(cm.Data)
	if err == nil {
		err = cfg.CheckAZName(r.ClusterID)
	}
	if err != nil {
		// Nothing to retry: the next change of the ConfigMap brings a new request.
		return reconcile.Result{}, notApplied(items, v1alpha1.ReasonRouteNotApplied, fmt.Sprintf("%s refused: %v", r.ConfigMap, err)),
			r.report(ctx, &cm, corev1.EventTypeWarning, ReasonInvalid, "Refused: "+err.Error())
	}
	if !cfg.Enabled {
		err := r.leave(ctx, &cm, cfg)
		return reconcile.Result{}, notInterconnected(fmt.Sprintf("the cluster is not an OVN-IC AZ: %s of %s is not \"true\"", icconfig.KeyEnable, r.ConfigMap)), err
	}
	az, err := Desired(cfg, r.ClusterID, r.CIDR, r.Pool, cm.Annotations[OptOutAnnotation] == "true")
	if err != nil {
		return reconcile.Result{}, notApplied(items, v1alpha1.ReasonRouteNotApplied, "AZ refused: "+err.Error()),
			r.report(ctx, &cm, corev1.EventTypeWarning, ReasonInvalid, "Refused: "+err.Error())
	}
	applier, err := r.connect(ctx, cfg.ICSB())
	if err != nil {
		_ = r.report(ctx, &cm, corev1.EventTypeWarning, ReasonInvalid, "Not applied: "+err.Error())
		return reconcile.Result{}, notApplied(items, v1alpha1.ReasonRouteNotApplied, "AZ not applied: "+err.Error()), err
	}
	in := RouteInputs{Block: r.CIDR, Transit: az.TransitAddress, AutoRoute: az.AutoRoutes}
	if !az.AutoRoutes && len(items) > 0 {
		if in.Clusters, err = applier.TransitAddresses(ctx, az.TransitSwitch); err != nil {
			return reconcile.Result{}, notApplied(items, v1alpha1.ReasonRouteNotApplied, "AZ not applied: "+err.Error()), err
		}
	}
	var outcomes map[string]RouteOutcome
	az.Routes, outcomes = DesiredRoutes(items, in)
	// What was not applied is said on every route that would have been.
	failed := func(err error) map[string]RouteOutcome {
		for name, o := range outcomes {
			if o.Ready {
				outcomes[name] = RouteOutcome{NextHop: o.NextHop, Reason: v1alpha1.ReasonRouteNotApplied, Message: "AZ not applied: " + err.Error()}
			}
		}
		return outcomes
	}
	applyCtx, cancel := context.WithTimeout(ctx, applyTimeout)
	err = applier.Apply(applyCtx, az)
	cancel()
	var overlap *ovnic.OverlapError
	switch {
	case errors.Is(err, ovnic.ErrNotReady):
		r.Log.V(1).Info("AZ not ready yet", "reason", err.Error())
		return reconcile.Result{RequeueAfter: notReadyInterval}, failed(err), r.report(ctx, &cm, corev1.EventTypeNormal, ReasonApplied, "Waiting: "+err.Error())
	case errors.As(err, &overlap):
		return reconcile.Result{RequeueAfter: overlapInterval}, failed(err), r.report(ctx, &cm, corev1.EventTypeWarning, ReasonOverlap, "Refused: "+err.Error())
	case err != nil:
		_ = r.report(ctx, &cm, corev1.EventTypeWarning, ReasonInvalid, "Not applied: "+err.Error())
		return reconcile.Result{}, failed(err), fmt.Errorf("applying AZ %s: %w", az.Name, err)
	}
	return reconcile.Result{}, outcomes, r.report(ctx, &cm, corev1.EventTypeNormal, ReasonApplied, summary(az))
}

// leave takes the AZ out of the interconnection when enable-ic is not "true": its rows out of
// its NB, and it out of the IC SB that ic-db-host names (no host: there is nothing to leave).
func (r *Reconciler) leave(ctx context.Context, cm *corev1.ConfigMap, cfg icconfig.Config) error {
	const status = "Not interconnected: " + icconfig.KeyEnable + " is not \"true\""
	if len(cfg.DBHosts) == 0 {
		return r.report(ctx, cm, corev1.EventTypeNormal, ReasonApplied, status)
	}
	applier, err := r.connect(ctx, cfg.ICSB())
	if err != nil {
		_ = r.report(ctx, cm, corev1.EventTypeWarning, ReasonInvalid, "Not left: "+err.Error())
		return err
	}
	leaveCtx, cancel := context.WithTimeout(ctx, applyTimeout)
	err = applier.Leave(leaveCtx, r.ClusterID)
	cancel()
	if err != nil {
		_ = r.report(ctx, cm, corev1.EventTypeWarning, ReasonInvalid, "Not left: "+err.Error())
		return err
	}
	return r.report(ctx, cm, corev1.EventTypeNormal, ReasonApplied, status+"; "+icconfig.LeftStatus(r.ClusterID))
}

func summary(az ovnic.AZ) string {
	adv := fmt.Sprintf("routes: manual (%d)", len(az.Routes))
	if az.AutoRoutes {
		adv = "routes: automatic"
	}
	if az.Subnets[0].OptOut {
		adv += ", " + az.Subnets[0].Address.Masked().String() + " opted out"
	}
	return fmt.Sprintf("Applied: AZ %s on transit switch %s at %s, gateway chassis %v, %s",
		az.Name, az.TransitSwitch, az.TransitAddress, az.GatewayChassis, adv)
}

// connect returns the applier for icsb, connecting anew when the endpoint changed.
func (r *Reconciler) connect(ctx context.Context, icsb string) (Applier, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.applier != nil && r.icsb == icsb {
		return r.applier, nil
	}
	if r.close != nil {
		r.close()
		r.applier, r.close = nil, nil
	}
	// Bounded: a database that never answers is reported and retried, not waited on forever.
	connectCtx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	a, closeFn, err := r.Connect(connectCtx, icsb)
	if err != nil {
		return nil, fmt.Errorf("connecting to the AZ's NB and the IC SB %s: %w", icsb, err)
	}
	r.applier, r.close, r.icsb = a, closeFn, icsb
	return a, nil
}

// Close closes the databases' connections.
func (r *Reconciler) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.close != nil {
		r.close()
	}
}

// report writes msg into the ConfigMap's StatusAnnotation, and records an event when it is
// new (a retry that finds the same thing says nothing new).
func (r *Reconciler) report(ctx context.Context, cm *corev1.ConfigMap, eventType, reason, msg string) error {
	if cm.Annotations[StatusAnnotation] == msg {
		return nil
	}
	r.Log.Info("Interconnection configuration handled", "configMap", r.ConfigMap, "status", msg)
	if r.Events != nil {
		r.Events.Eventf(cm, nil, eventType, reason, actionInterlink, "%s", msg)
	}
	patched := cm.DeepCopy()
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	patched.Annotations[StatusAnnotation] = msg
	if err := r.Client.Patch(ctx, patched, client.MergeFrom(cm)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("annotating %s: %w", r.ConfigMap, err))
	}
	return nil
}
