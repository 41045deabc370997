package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/go-logr/logr"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/nat"
	"github.com/octopus-mcs/octopus/internal/globalnet"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// NATWriter is the globalnet NAT of the gateway's node (nat.NAT; a fake in tests).
type NATWriter interface {
	Apply(ctx context.Context, s nat.State) error
	Delete(ctx context.Context) error
}

// newNAT is the default of Options.NewNAT: nftables in the process's network namespace.
func newNAT() (NATWriter, error) { return nat.New(nat.Options{}) }

// What the active gateway of a globalnet cluster reads in its member cluster to translate.
// +kubebuilder:rbac:groups=octopus.io,resources=globalingressips,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=octopus.io,resources=globalegressips,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// natRequest is the globalnet NAT's only request: the whole desired state is applied at once.
var natRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "globalnet-nat"}}

// natDeleteTimeout bounds deleting the table when the active term ends, whose context is done.
const natDeleteTimeout = 10 * time.Second

// globalnetNAT keeps the node's NAT at the state that the cluster's GlobalIngressIPs, the
// Services and EndpointSlices they name, its GlobalEgressIPs and the pods they select, and the
// accepted remote Peers' subnets ask for
// (docs/architecture.md §6h): every change is one nat.Apply of the whole state, an atomic
// replacement of what the kernel holds. It runs only in the active term of a globalnet
// cluster's gateway.
type globalnetNAT struct {
	layout globalip.Layout
	device string // the tunnel link: see nat.State.TunnelDevice
	nat    NATWriter
	cache  cache.Cache
	log    logr.Logger
	resync time.Duration

	mu sync.Mutex
	// remote are the accepted Peers' subnets, as the tunnel reconcile last saw them.
	remote []netip.Prefix
	// synced is set by the first reconcile: the cache can be read from then on.
	synced bool
	// applied is the last State applied, for logging changes only.
	applied *nat.State
}

// newGlobalnetNAT prepares the NAT of layout and a cache of the member cluster's records,
// Services and EndpointSlices.
func newGlobalnetNAT(member *rest.Config, layout globalip.Layout, device string, w NATWriter, resync time.Duration, log logr.Logger) (*globalnetNAT, error) {
	c, err := cache.New(member, cache.Options{Scheme: kube.Scheme, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, fmt.Errorf("creating the member cache of the globalnet NAT: %w", err)
	}
	return &globalnetNAT{layout: layout, device: device, nat: w, cache: c, log: log, resync: resync}, nil
}

// run applies the NAT on every change until ctx is done.
func (g *globalnetNAT) run(ctx context.Context) error {
	err := kube.SingleKeyController{
		Name:  "globalnet-nat",
		Cache: g.cache,
		Watches: []kube.Watch{
			{Object: &v1alpha1.GlobalIngressIP{}}, {Object: &corev1.Service{}}, {Object: &discoveryv1.EndpointSlice{}},
			// A pod's egress range follows its labels and address.
			{Object: &v1alpha1.GlobalEgressIP{}}, {Object: &corev1.Pod{}},
		},
		Trigger: natRequest, Reconciler: g, Log: g.log.WithName("controller"),
	}.Run(ctx)
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("watching GlobalIngressIPs, GlobalEgressIPs, Services, EndpointSlices and Pods for the globalnet NAT: %w", err)
	}
	return nil
}

// Reconcile applies the desired state; it retries after retryInterval on failure.
func (g *globalnetNAT) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	g.mu.Lock()
	g.synced = true
	err := g.applyLocked(ctx)
	g.mu.Unlock()
	if err != nil {
		g.log.Error(err, "Applying the globalnet NAT; retrying", "retryIn", retryInterval.String())
		return reconcile.Result{RequeueAfter: retryInterval}, nil
	}
	return reconcile.Result{RequeueAfter: g.resync}, nil
}

// setRemote records the accepted Peers' subnets and applies them once the cache has synced
// (before, the first reconcile will).
func (g *globalnetNAT) setRemote(ctx context.Context, remote []netip.Prefix) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if slices.Equal(g.remote, remote) {
		return nil
	}
	g.remote = slices.Clone(remote)
	if !g.synced {
		return nil
	}
	return g.applyLocked(ctx)
}

func (g *globalnetNAT) applyLocked(ctx context.Context) error {
	s, err := globalnet.DesiredNAT(ctx, g.cache, g.layout, g.remote)
	if err != nil {
		return err
	}
	s.TunnelDevice = g.device
	if err := g.nat.Apply(ctx, s); err != nil {
		return fmt.Errorf("applying the globalnet NAT (%d services, %d pods, %d pods with their own egress range, %d remote CIDRs): %w",
			len(s.Services), len(s.Pods), len(s.PodEgress), len(s.RemoteCIDRs), err)
	}
	if g.applied == nil || len(g.applied.Services) != len(s.Services) || len(g.applied.Pods) != len(s.Pods) ||
		len(g.applied.PodEgress) != len(s.PodEgress) || !slices.Equal(g.applied.RemoteCIDRs, s.RemoteCIDRs) {
		g.log.Info("Globalnet NAT applied", "globalCIDR", g.layout.CIDR.String(), "services", len(s.Services), "pods", len(s.Pods),
			"podEgress", len(s.PodEgress), "remoteCIDRs", s.RemoteCIDRs)
	}
	g.applied = &s
	return nil
}

// remove deletes the node's NAT: a gateway that is not the active one must not translate, or
// its node's pods' traffic would reach the active gateway already translated and the replies
// find no connection there.
func (g *globalnetNAT) remove() error {
	ctx, cancel := context.WithTimeout(context.Background(), natDeleteTimeout)
	defer cancel()
	if err := g.nat.Delete(ctx); err != nil {
		return fmt.Errorf("deleting the globalnet NAT: %w", err)
	}
	return nil
}

// removeStaleNAT deletes a NAT table left on this node by an earlier active term (a process
// that stopped and now stands by): called whenever another node is the active gateway.
func removeStaleNAT(o Options) {
	w, err := o.NewNAT()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), natDeleteTimeout)
		defer cancel()
		err = w.Delete(ctx)
	}
	if err != nil {
		o.Log.Error(err, "Removing a globalnet NAT table left by this node's earlier active term")
	}
}

// globalnetLayout is the layout of a globalnet cluster's global CIDR (its egress range sized by
// the Cluster's spec, as the controller's allocator sizes it), and false for others.
func globalnetLayout(c *v1alpha1.Cluster) (globalip.Layout, bool, error) {
	if c.Spec.Addressing != v1alpha1.AddressingGlobalnet {
		return globalip.Layout{}, false, nil
	}
	l, err := globalnet.ClusterLayout(c.Spec)
	if err != nil {
		return globalip.Layout{}, false, errors.Join(err, errors.New("the gateway cannot translate for this cluster"))
	}
	return l, true, nil
}
