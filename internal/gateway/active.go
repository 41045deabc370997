package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/routeagent"
)

// active is the gateway while it holds the Lease: the data path of one active term. It is a
// reconciler of the hub's Peers and Clusters (kube.SingleKeyController) that computes the
// desired tunnels, applies them, publishes this cluster's Peer and mirrors the remote subnets
// for the route agents; it knows nothing of the election (election.go) that starts and stops
// it.
type active struct {
	o      Options
	at     hubAccess
	member client.Client
	hub    client.Client
	cache  cache.Cache
	driver tunnel.Driver
	// ingress is the tunnel ingress filter of the node for this active term.
	ingress IngressWriter
	prober  Prober
	// underlay is nil without Options.NewUnderlayProber.
	underlay UnderlayProber
	local    Local
	hcIP     netip.Addr
	// metrics are set from the status that reportStatus computes.
	metrics *metrics
	// process is the gateway process's context: still live when the active term ends, it
	// means the Lease was lost (rather than the process stopping).
	process context.Context
	// runCtx is the active term's context, for what readLocal starts.
	runCtx context.Context
	// gnat translates for a globalnet cluster (nil for others); gnatDone is closed when its
	// controller has returned.
	gnat     *globalnetNAT
	gnatDone chan struct{}

	// silence tracks the clusters' heartbeats; nil with a negative SilentClusterTTL.
	silence *silence

	mu        sync.Mutex
	desired   Desired
	applyErr  error
	published *v1alpha1.PeerSpec
	mirrored  []netip.Prefix
}

// run publishes the Peer, keeps the data plane at the desired state and reports status until
// ctx is done. The driver is closed on return, which tears the tunnels down: the standby that
// takes over brings them up with its own key. When the process stops (rather than the Lease
// being lost), the tunnels stay up until a successor has published its Peer (handOver).
func (a *active) run(ctx context.Context) error {
	o := a.o
	// The Node is read only for what the flags leave out: the hub's gateway may run where
	// the hub has no Node objects.
	node := &corev1.Node{}
	if !o.EndpointIP.IsValid() || !o.HealthCheckIP.IsValid() {
		if err := a.member.Get(ctx, client.ObjectKey{Name: o.NodeName}, node); err != nil {
			return fmt.Errorf("reading this gateway's Node %s: %w (is --node-name right? or pass --endpoint-ip and --health-check-ip)", o.NodeName, err)
		}
	}
	endpoint, hc, err := nodeAddresses(node, o.EndpointIP, o.HealthCheckIP)
	if err != nil {
		return err
	}
	a.hcIP = hc
	a.local = Local{ClusterID: a.at.ClusterID, Role: o.Role, Backend: o.Backend, ListenPort: o.ListenPort, LocalAddr: endpoint, MTU: o.MTU}

	// The filter comes before the tunnel device does, dropping everything out of it until
	// the first reconcile knows what this cluster advertises: a gateway never forwards
	// unfiltered. A filter that cannot be written ends the active term (fail closed: the
	// Lease goes to a standby that can filter, and the error is the process's). It goes after
	// the driver has closed (defers run last to first).
	if a.ingress, err = o.NewIngressFilter(); err != nil {
		return fmt.Errorf("opening the tunnel ingress filter (the gateway needs the nft binary and NET_ADMIN): %w", err)
	}
	if err := a.ingress.Apply(ctx, ingressState(a.local, hc, o.Device, Desired{})); err != nil {
		return fmt.Errorf("writing the tunnel ingress filter before the tunnel comes up: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), natDeleteTimeout)
		defer cancel()
		if err := a.ingress.Delete(dctx); err != nil {
			o.Log.Error(err, "Leaving the tunnel ingress filter behind")
		}
	}()

	a.driver, err = o.NewDriver(string(o.Backend), tunnel.Options{Device: o.Device, Log: o.Log.WithName("tunnel")})
	if err != nil {
		return fmt.Errorf("creating the %s tunnel driver: %w", o.Backend, err)
	}
	defer func() {
		if err := a.driver.Close(); err != nil {
			o.Log.Error(err, "Closing the tunnel driver")
		}
	}()
	a.runCtx = ctx
	if o.SilentClusterTTL > 0 {
		a.silence = newSilence(o.SilentClusterTTL)
	}
	defer a.stopNAT()
	o.Log.Info("Tunnel driver ready", "driver", a.driver.Name(), "device", o.Device, "endpoint", netip.AddrPortFrom(endpoint, o.ListenPort).String(), "healthCheckIP", hc.String())
	if o.NewProber != nil {
		if a.prober, err = o.NewProber(); err != nil {
			return fmt.Errorf("starting the health prober: %w", err)
		}
		defer func() { _ = a.prober.Close() }()
	}
	stopUnderlay, err := a.startUnderlayProber()
	if err != nil {
		return err
	}
	defer stopUnderlay()

	if a.hub, err = client.New(a.at.config, client.Options{Scheme: kube.Scheme}); err != nil {
		return fmt.Errorf("creating a client of the hub %s: %w", a.at.config.Host, err)
	}
	// The cache's lists and watches wait out a hub that cannot be dialled, so that the Peers
	// catch up as soon as it is back (kube.WaitForServerOnReads); the client's writes and the
	// status read fail fast.
	a.cache, err = cache.New(kube.WaitForServerOnReads(a.at.config), cache.Options{Scheme: kube.Scheme, DefaultNamespaces: map[string]cache.Config{a.at.Namespace: {}}})
	if err != nil {
		return fmt.Errorf("creating the cache of the hub: %w", err)
	}
	err = kube.SingleKeyController{
		Name:    "gateway",
		Cache:   a.cache,
		Watches: []kube.Watch{{Object: &v1alpha1.Peer{}, Predicates: []predicate.Predicate{specChanged}}, {Object: &v1alpha1.Cluster{}}},
		Trigger: tunnelsRequest,
		Later:   []kube.DelayedRequest{{Request: statusRequest, After: o.StatusInterval}},
		// The controller's own lines ("Starting workers", ...) come once per active term.
		Reconciler: a, Log: o.Log.WithName("controller"),
	}.Run(ctx)
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("watching Peers and Clusters on the hub: %w", err)
	}
	if a.process != nil && a.process.Err() != nil {
		// A clean stop (SIGTERM: a rolling update, a drain): the Lease is being released;
		// keep forwarding until the successor has taken over (handover.go).
		a.handOver()
	}
	return nil
}

// The active gateway's two requests. One worker serves them, so a status report never runs
// during a reconcile.
var (
	// tunnelsRequest is made by every event of the hub's Peers and Clusters, and
	// requeues itself every ResyncInterval (retryInterval after a failure).
	tunnelsRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "tunnels"}}
	// statusRequest refreshes the Peer's status every StatusInterval.
	statusRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "status"}}
)

// specChanged lets through every Peer event but status-only updates: every gateway reports
// its status every few seconds, which changes nothing here.
var specChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
		!e.ObjectOld.GetDeletionTimestamp().Equal(e.ObjectNew.GetDeletionTimestamp())
}}

// Reconcile serves the active gateway's requests. Errors are logged and retried after a fixed
// retryInterval rather than returned to controller-runtime's exponential back-off: a gateway
// that cannot reach the hub for a while must catch up within a second once it is back.
func (a *active) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if req == statusRequest {
		if err := a.reportStatus(ctx); err != nil {
			a.o.Log.Error(err, "Updating the Peer's status")
		}
		return reconcile.Result{RequeueAfter: a.o.StatusInterval}, nil
	}
	next := a.o.ResyncInterval
	if err := a.reconcile(ctx); err != nil {
		a.o.Log.Error(err, "Reconciling the gateway; retrying", "retryIn", retryInterval.String())
		next = retryInterval
	}
	if err := a.reportStatus(ctx); err != nil {
		a.o.Log.Error(err, "Updating the Peer's status")
	}
	return reconcile.Result{RequeueAfter: next}, nil
}

// reconcile applies the tunnel configuration computed from the hub's Peers, publishes our
// Peer and mirrors the remote subnets for the route agents. Everything that can be done is
// done; errors are joined.
func (a *active) reconcile(ctx context.Context) error {
	var errs []error
	if err := a.readLocal(ctx); err != nil {
		return err
	}
	peers := &v1alpha1.PeerList{}
	if err := a.cache.List(ctx, peers); err != nil {
		return fmt.Errorf("listing Peers on the hub: %w", err)
	}
	d := Compute(a.local, peers.Items)
	// The filter first: a tunnel to a new Peer is up only once its traffic is filtered, and
	// one that cannot be filtered is not brought up (retried in a second; the tunnels already
	// up stay under the filter last written).
	if err := a.ingress.Apply(ctx, ingressState(a.local, a.hcIP, a.o.Device, d)); err != nil {
		return fmt.Errorf("updating the tunnel ingress filter (%d peers), so not applying their tunnels: %w", len(d.Tunnel.Peers), err)
	}
	applyErr := a.driver.Apply(ctx, d.Tunnel)
	if applyErr != nil {
		applyErr = fmt.Errorf("applying the tunnel configuration (%d peers): %w", len(d.Tunnel.Peers), applyErr)
		errs = append(errs, applyErr)
	} else if err := a.o.AddressDevice(a.o.Device, a.hcIP); err != nil {
		errs = append(errs, err)
	}
	// Published only now, with the remote Peers configured: a remote gateway starts its
	// handshake as soon as it sees our (new) key, and one that arrived before our device knew
	// it would be dropped and retried only after WireGuard's 5 s rekey timeout.
	if err := a.publish(ctx); err != nil {
		errs = append(errs, err)
	}
	if a.prober != nil {
		a.prober.SetTargets(d.Targets)
	}
	if a.underlay != nil {
		a.underlay.SetTargets(underlayTargets(d))
	}
	a.mu.Lock()
	changed := !reflect.DeepEqual(a.desired, d)
	a.desired, a.applyErr = d, applyErr
	a.mu.Unlock()
	if changed {
		var ids []string
		for _, p := range d.Tunnel.Peers {
			ids = append(ids, p.Cluster)
		}
		a.o.Log.Info("Tunnel configuration applied", "peers", ids, "refused", len(d.Refused), "ok", applyErr == nil)
		for _, r := range d.Refused {
			a.o.Log.Info("Refused a Peer", "cluster", r.Cluster, "reason", r.Reason, "message", r.Message)
		}
		for _, r := range d.Withheld {
			a.o.Log.Info("Withheld subnets of a Peer", "cluster", r.Cluster, "reason", r.Reason, "message", r.Message)
		}
	}
	remote := d.RemoteSubnets()
	if a.gnat != nil && applyErr == nil {
		if err := a.gnat.setRemote(ctx, remote); err != nil {
			errs = append(errs, err)
		}
	}
	// The hub's gateway has no route agents to tell.
	routed := routedOnPrimary(a.local, remote)
	if applyErr == nil && a.o.Role == v1alpha1.PeerRoleMember && (a.mirrored == nil || !slices.Equal(routed, a.mirrored)) {
		// Written after the Apply and the Peer's publication: naming this node as the
		// gateway moves the route agents here (make-before-break, handover.go).
		cm := routeagent.GatewayConfigMap(a.o.NodeName, routed)
		cm.Labels = kube.ManagedLabels()
		if err := kube.Apply(ctx, a.member, cm); err != nil {
			errs = append(errs, fmt.Errorf("mirroring remote subnets for the route agents: %w", err))
		} else {
			a.mirrored = routed
			if a.mirrored == nil {
				a.mirrored = []netip.Prefix{}
			}
		}
	}
	return errors.Join(errs...)
}

// readLocal refreshes what this gateway knows of the cluster set: every member's addressing
// and allocation (what its Peer may advertise) from its Cluster on the hub, which clusters
// are silent from their heartbeat Leases, and what this gateway advertises: a member's pod
// and service CIDRs (minus the opted-out ones), or its global or secondary CIDR, and
// topology, from its own Cluster; for the hub's gateway, which has no cluster behind it, only
// its health-check address, and the hub topology (the Peer's default, mesh, would misreport
// it).
func (a *active) readLocal(ctx context.Context) error {
	clusters := &v1alpha1.ClusterList{}
	if err := a.cache.List(ctx, clusters); err != nil {
		return fmt.Errorf("listing Clusters on the hub: %w", err)
	}
	a.local.PeerAddressing = map[string]v1alpha1.Addressing{}
	a.local.Allocated = map[string][]netip.Prefix{}
	for _, o := range clusters.Items {
		a.local.PeerAddressing[o.Spec.ClusterID] = o.Spec.Addressing
		// Keyed by the object's name, which the CRD ties to spec.clusterID and the hub's
		// admission policy to the writer.
		if o.Name == o.Spec.ClusterID && o.DeletionTimestamp == nil {
			a.local.Allocated[o.Spec.ClusterID] = Allocation(o.Spec)
		}
	}
	if a.silence != nil {
		// Read from the cache without a watch of its own: a Lease renewal every few seconds
		// per cluster must not trigger a reconcile; the resync notices a silence in time.
		leases := &coordinationv1.LeaseList{}
		if err := a.cache.List(ctx, leases); err != nil {
			return fmt.Errorf("listing the heartbeat Leases on the hub: %w", err)
		}
		a.local.Silent = a.silence.observe(leases.Items, time.Now())
	}
	if a.o.Role == v1alpha1.PeerRoleHub {
		a.local.Subnets, a.local.Topology = []netip.Prefix{netip.PrefixFrom(a.hcIP, a.hcIP.BitLen())}, v1alpha1.TopologyHub
		return nil
	}
	c := &v1alpha1.Cluster{}
	if err := a.cache.Get(ctx, client.ObjectKey{Namespace: a.at.Namespace, Name: a.at.ClusterID}, c); err != nil {
		return fmt.Errorf("reading this cluster's Cluster %s on the hub: %w", a.at.ClusterID, err)
	}
	subnets, err := Advertised(c.Spec, a.o.ExcludeSubnets)
	if err != nil {
		return err
	}
	a.local.Subnets, a.local.Topology, a.local.Private, a.local.Addressing = subnets, c.Spec.Topology, nil, c.Spec.Addressing
	block, gatewayAddr, isSecondary, err := secondaryBlock(c)
	if err != nil {
		return err
	}
	if isSecondary {
		// Other clusters reach this one's pods at their net1 addresses, in the secondary
		// block, and probe the gateway port's address, which is this cluster's alone (the
		// default health-check address, the first host of the pod CIDR, is the same in every
		// cluster when primary CIDRs overlap). The primary CIDRs stay private, but a Peer's
		// subnets must not overlap them still: routes to them would shadow our own pods. No
		// NAT: the tunnel carries the pods' own addresses.
		a.local.Subnets, a.local.Private, a.hcIP = []netip.Prefix{block}, subnets, gatewayAddr
		return nil
	}
	layout, isGlobalnet, err := globalnetLayout(c)
	if err != nil || !isGlobalnet {
		return err
	}
	// Other clusters reach this one only through its global CIDR, and probe the layout's
	// health-check address: the default one, the first host of the pod CIDR, is the same in
	// every cluster of an overlapping fleet. Our own CIDRs stay private, but a Peer's subnets
	// must not overlap them still: routes to them would shadow our own pods.
	a.local.Subnets, a.local.Private, a.hcIP = []netip.Prefix{layout.CIDR}, subnets, layout.HealthCheck
	if a.gnat == nil {
		return a.startNAT(layout)
	}
	return nil
}

// startNAT starts the globalnet NAT for the rest of the active term.
func (a *active) startNAT(layout globalip.Layout) error {
	w, err := a.o.NewNAT()
	if err != nil {
		return fmt.Errorf("opening the globalnet NAT: %w", err)
	}
	g, err := newGlobalnetNAT(a.o.Member, layout, a.o.Device, w, a.o.ResyncInterval, a.o.Log.WithName("globalnet"))
	if err != nil {
		return err
	}
	a.gnat, a.gnatDone = g, make(chan struct{})
	go func() {
		defer close(a.gnatDone)
		if err := g.run(a.runCtx); err != nil {
			a.o.Log.Error(err, "The globalnet NAT stopped")
		}
	}()
	return nil
}

// stopNAT waits for the NAT's controller at the end of the active term and, when the Lease
// was lost rather than the process stopping, deletes the node's NAT. A process that stops
// keeps it: its restart, active again, replaces it atomically, and one that stands by deletes
// it (removeStaleNAT).
func (a *active) stopNAT() {
	if a.gnat == nil {
		return
	}
	<-a.gnatDone
	if a.process != nil && a.process.Err() != nil {
		return
	}
	if err := a.gnat.remove(); err != nil {
		a.o.Log.Error(err, "Deleting the globalnet NAT after losing the Lease")
		return
	}
	a.o.Log.Info("Deleted the globalnet NAT: no longer the active gateway")
}

// publish server-side-applies this cluster's Peer on the hub when its spec changed.
func (a *active) publish(ctx context.Context) error {
	spec := v1alpha1.PeerSpec{
		ClusterID: a.at.ClusterID, Hostname: a.o.NodeName, Role: a.o.Role, Topology: a.local.Topology,
		Backend: a.o.Backend, PublicKey: a.driver.PublicKey(),
		Endpoint:      v1alpha1.PeerEndpoint{PrivateIP: a.local.LocalAddr.String(), Port: int32(a.local.ListenPort)},
		HealthCheckIP: a.hcIP.String(),
	}
	for _, s := range a.local.Subnets {
		spec.Subnets = append(spec.Subnets, s.String())
	}
	if a.published != nil && reflect.DeepEqual(*a.published, spec) {
		return nil
	}
	p := &v1alpha1.Peer{
		ObjectMeta: metavOf(a.at.ClusterID, a.at.Namespace),
		Spec:       spec,
	}
	if err := kube.Apply(ctx, a.hub, p); err != nil {
		return fmt.Errorf("publishing Peer %s on the hub: %w", a.at.ClusterID, err)
	}
	a.published = &spec
	a.o.Log.Info("Published the Peer", "name", a.at.ClusterID, "publicKey", spec.PublicKey, "subnets", spec.Subnets)
	return nil
}
