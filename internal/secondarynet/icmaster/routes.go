package icmaster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/ovnic"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
)

// RouteInputs is what the InterconnectRoutes are translated against.
type RouteInputs struct {
	// Block is the cluster's own secondary block: a route into it would take the cluster's
	// own pods' traffic away from them.
	Block netip.Prefix
	// Transit is the AZ's own transit address with the transit network's prefix length: a
	// next hop must be another address of that network.
	Transit netip.Prefix
	// AutoRoute is ovn-ic-config's auto-route: true ignores every manual route.
	AutoRoute bool
	// Clusters are the AZs' transit addresses by cluster ID, as IC SB publishes them.
	Clusters map[string]netip.Addr
}

// RouteOutcome is what became of one InterconnectRoute.
type RouteOutcome struct {
	// NextHop is the resolved next hop (invalid when none could be found).
	NextHop netip.Addr
	// Ready, Reason and Message become its Ready condition.
	Ready           bool
	Reason, Message string
}

// DesiredRoutes translates InterconnectRoutes into the AZ's manual routes, and says per object
// (by name) what became of it. A route that cannot be applied is left out alone: the others
// still go in. Of two routes to one prefix, the older one wins (then the first by name), so
// that a newcomer never takes over a route in use.
func DesiredRoutes(items []v1alpha1.InterconnectRoute, in RouteInputs) ([]ovnic.Route, map[string]RouteOutcome) {
	sorted := slices.Clone(items)
	slices.SortFunc(sorted, func(a, b v1alpha1.InterconnectRoute) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	outcomes := make(map[string]RouteOutcome, len(sorted))
	var routes []ovnic.Route
	owner := map[netip.Prefix]string{}
	for _, r := range sorted {
		o := translate(r.Spec, in)
		if o.Ready {
			prefix := netip.MustParsePrefix(r.Spec.Prefix)
			if first, ok := owner[prefix]; ok {
				o = RouteOutcome{NextHop: o.NextHop, Reason: v1alpha1.ReasonDuplicatePrefix,
					Message: fmt.Sprintf("InterconnectRoute %s already routes %s: delete one of them", first, prefix)}
			} else {
				owner[prefix] = r.Name
				routes = append(routes, ovnic.Route{Prefix: prefix, NextHop: o.NextHop})
			}
		}
		outcomes[r.Name] = o
	}
	slices.SortFunc(routes, func(a, b ovnic.Route) int { return a.Prefix.Addr().Compare(b.Prefix.Addr()) })
	return routes, outcomes
}

// translate checks one route on its own; Ready means it may go onto the router.
func translate(spec v1alpha1.InterconnectRouteSpec, in RouteInputs) RouteOutcome {
	if in.AutoRoute {
		return RouteOutcome{Reason: v1alpha1.ReasonAutomaticRoutes, Message: fmt.Sprintf(
			"ignored: %s auto-route is true, so OVN-IC learns the other AZs' routes itself; set it to \"false\" for manual routes",
			icconfig.ConfigMapName)}
	}
	// The schema refuses these; checked again because an object written before the schema
	// (or by a client that skipped it) must not stop the others.
	prefix, err := netip.ParsePrefix(spec.Prefix)
	if err != nil || !prefix.Addr().Is4() || prefix != prefix.Masked() {
		return RouteOutcome{Reason: v1alpha1.ReasonRouteNotApplied, Message: fmt.Sprintf(
			"prefix %q: a masked IPv4 CIDR such as 10.113.0.0/24 is required", spec.Prefix)}
	}
	if in.Block.IsValid() && prefix.Overlaps(in.Block) {
		return RouteOutcome{Reason: v1alpha1.ReasonOverlapsOwnBlock, Message: fmt.Sprintf(
			"prefix %s overlaps this cluster's own secondary block %s: route only other clusters' blocks", prefix, in.Block)}
	}
	if in.Transit.IsValid() && prefix.Overlaps(in.Transit.Masked()) {
		return RouteOutcome{Reason: v1alpha1.ReasonRouteNotApplied, Message: fmt.Sprintf(
			"prefix %s overlaps the transit network %s: route only other clusters' blocks", prefix, in.Transit.Masked())}
	}
	var hop netip.Addr
	switch {
	case spec.TargetCluster != "":
		a, ok := in.Clusters[spec.TargetCluster]
		if !ok {
			return RouteOutcome{Reason: v1alpha1.ReasonUnknownCluster, Message: fmt.Sprintf(
				"cluster %s has no AZ on the transit switch in the IC SB database: check the ID, or wait until it joins the interconnection (its ovn-ic-config enable-ic \"true\")",
				spec.TargetCluster)}
		}
		hop = a
	default:
		a, err := netip.ParseAddr(spec.NextHop)
		if err != nil || !a.Is4() {
			return RouteOutcome{Reason: v1alpha1.ReasonInvalidNextHop, Message: fmt.Sprintf(
				"nextHop %q: an IPv4 address is required, the remote AZ's transit port address", spec.NextHop)}
		}
		hop = a
	}
	if in.Transit.IsValid() {
		if !in.Transit.Masked().Contains(hop) {
			return RouteOutcome{NextHop: hop, Reason: v1alpha1.ReasonInvalidNextHop, Message: fmt.Sprintf(
				"next hop %s is outside the transit network %s: name another AZ's transit address, or use targetCluster", hop, in.Transit.Masked())}
		}
		if hop == in.Transit.Addr() {
			return RouteOutcome{NextHop: hop, Reason: v1alpha1.ReasonInvalidNextHop, Message: fmt.Sprintf(
				"next hop %s is this cluster's own transit address: name another AZ's", hop)}
		}
	}
	return RouteOutcome{NextHop: hop, Ready: true, Reason: v1alpha1.ReasonRouteApplied,
		Message: fmt.Sprintf("%s via %s on the interconnection router", prefix, hop)}
}

// notApplied is every route's outcome when the AZ itself was not applied (no configuration,
// enable-ic off, the configuration or Apply refused): nothing of them is on the router.
func notApplied(items []v1alpha1.InterconnectRoute, reason, msg string) map[string]RouteOutcome {
	out := make(map[string]RouteOutcome, len(items))
	for _, r := range items {
		out[r.Name] = RouteOutcome{Reason: reason, Message: msg}
	}
	return out
}

// listRoutes lists the InterconnectRoutes.
func (r *Reconciler) listRoutes(ctx context.Context) ([]v1alpha1.InterconnectRoute, error) {
	var list v1alpha1.InterconnectRouteList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing InterconnectRoutes: %w", err)
	}
	return list.Items, nil
}

// reportRoutes writes each route's outcome into its status, patching only those that changed;
// every route is written even when one fails.
func (r *Reconciler) reportRoutes(ctx context.Context, items []v1alpha1.InterconnectRoute, outcomes map[string]RouteOutcome) error {
	var errs []error
	for i := range items {
		item := &items[i]
		o, ok := outcomes[item.Name]
		if !ok {
			continue
		}
		patched := item.DeepCopy()
		patched.Status.NextHop = ""
		if o.NextHop.IsValid() {
			patched.Status.NextHop = o.NextHop.String()
		}
		status := metav1.ConditionFalse
		if o.Ready {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&patched.Status.Conditions, metav1.Condition{
			Type: v1alpha1.InterconnectRouteConditionReady, Status: status, Reason: o.Reason,
			Message: o.Message, ObservedGeneration: item.Generation,
		})
		if equalStatus(item.Status, patched.Status) {
			continue
		}
		r.Log.Info("InterconnectRoute handled", "interconnectRoute", item.Name, "ready", o.Ready, "reason", o.Reason, "message", o.Message)
		if err := r.Client.Status().Patch(ctx, patched, client.MergeFrom(item)); err != nil {
			if err := client.IgnoreNotFound(err); err != nil {
				errs = append(errs, fmt.Errorf("writing the status of InterconnectRoute %s: %w", item.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func equalStatus(a, b v1alpha1.InterconnectRouteStatus) bool {
	if a.NextHop != b.NextHop || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}
