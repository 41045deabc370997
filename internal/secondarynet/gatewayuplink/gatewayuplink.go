// Package gatewayuplink keeps a gateway node's interface on its cluster's OVN logical switch
// (`octopus-ovn gateway-port`): at start and then every interval it writes the node's
// podfence table (the pods reach the node through the interface only for replies and ICMP)
// and calls podport.ReconcileGateway with the interface of the cluster's gateway port, which
// leaves what is right alone and repairs what drifted, so the active gateway's traffic is
// never cut by it.
//
// It runs on every gateway node, active or standing by, and needs no Kubernetes client: the
// cluster ID and the block (hence the port's name, address and MAC) are its configuration.
// Which node is active is the ovnmaster's business: it writes the port with
// options:requested-chassis = the node the gateway ConfigMap names (else the gateway Lease's
// holder), and OVN binds the port only on that chassis. The interface on a standby node is therefore harmless, and is what lets a takeover
// be one update of that row with no wait for an attach.
//
// It never detaches, not at stop (a rolling update of its pods must not cut the active
// gateway's traffic: the interface stays while the pod is replaced) and not when the node is
// no longer a gateway node (it cannot know without a client; its pod is simply not scheduled
// there any more, and the interface left behind carries nothing, as OVN binds the port only
// on the requested chassis). `podport.DetachGateway` removes it by hand.
//
// With Options.Vpcs it also keeps the VPC gateways (VpcLoop, vpc.go): unlike the cluster's
// interface, a VPC's gateway exists only on the node its port is requested on, each in a
// network namespace of its own, read from the NB rows the ovnmaster writes; those no longer
// requested here are removed.
package gatewayuplink

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/datapath/podfence"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/ipam/hostaddr"
	"github.com/octopus-mcs/octopus/internal/metricsserver"
)

// DefaultInterval is how often the interface is checked: a repair (someone flushed its
// address, OVS lost its port) takes at most this long.
const DefaultInterval = 10 * time.Second

// DefaultHealthPort is where `octopus-ovn gateway-port` answers /healthz and /readyz unless
// told otherwise: on the gateway node's address, so distinct from the ports of the other
// components there (the gateway's 9473/9474, the route agent's 9477/9478).
const DefaultHealthPort = 9479

// maxRetryDelay bounds the wait after a failure, when it is below the interval.
const maxRetryDelay = 5 * time.Second

// Config is the interface to keep.
type Config struct {
	// ClusterID names the gateway's logical port, "<cluster>_gateway" (required).
	ClusterID string
	// CIDR is the cluster's secondary block (required): the interface has its first host,
	// with the block's length, and the MAC derived from it, as the ovnmaster writes the port.
	CIDR netip.Prefix
	// Node is the node's Open vSwitch database and integration bridge, and the namespace
	// ovs-vswitchd runs in ("" is the caller's: the host's, for a hostNetwork pod).
	Node podport.Node
	// MTU of the interface; 0 leaves the kernel's default.
	MTU int
	// Protected are the cluster's own CIDRs (its pods, Services and secondary block), which
	// no VPC may open a connection to through its gateway's outside veth (podfence.Links).
	// VpcOptions.Protected must be the same: both loops write the node's one table.
	Protected []netip.Prefix
}

// ProtectedCIDRs are what Config.Protected holds: the cluster's secondary block and its own
// CIDRs given as text (gateway-port's --cluster-cidr), each a CIDR without host bits. An error
// names each CIDR that is not one and what to pass instead.
func ProtectedCIDRs(secondary netip.Prefix, cluster []string) ([]netip.Prefix, error) {
	protected := []netip.Prefix{secondary.Masked()}
	var errs []error
	for _, c := range cluster {
		p, err := netip.ParsePrefix(c)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%q: %w (pass the cluster's pod and service CIDRs, e.g. 10.244.0.0/16)", c, err))
		case p != p.Masked():
			errs = append(errs, fmt.Errorf("%q has host bits set: did you mean %s?", c, p.Masked()))
		default:
			protected = append(protected, p)
		}
	}
	return protected, errors.Join(errs...)
}

// Gateway is the interface the configuration describes, or why it describes none.
func (c Config) Gateway() (podport.Gateway, error) {
	if msgs := validation.IsDNS1123Label(c.ClusterID); len(msgs) > 0 {
		return podport.Gateway{}, fmt.Errorf("cluster ID %q: %v", c.ClusterID, msgs)
	}
	block, err := hostaddr.NewBlock(c.CIDR)
	if err != nil {
		return podport.Gateway{}, fmt.Errorf("secondary CIDR: %w", err)
	}
	ip := block.Gateway()
	return podport.Gateway{
		Node: c.Node, Port: ovn.GatewayPortName(c.ClusterID),
		MAC: ovn.MACFor(ip), IP: netip.PrefixFrom(ip, c.CIDR.Bits()), MTU: c.MTU,
	}, nil
}

// Options configure a Loop.
type Options struct {
	Config
	// Interval between two checks of the interface (DefaultInterval when zero).
	Interval time.Duration
	// Log gets a line for each change made and each failure; nothing while all is right.
	Log logr.Logger
	// Vpcs, when set, also keeps the VPC gateways requested on this node's chassis (a
	// VpcLoop beside the Loop); nil keeps the cluster's gateway interface alone.
	Vpcs *VpcOptions
}

// Loop keeps the interface as configured until its context ends.
type Loop struct {
	gateway  podport.Gateway
	interval time.Duration
	log      logr.Logger
	// reconcile is podport.ReconcileGateway; tests replace it to fail on demand.
	reconcile func(context.Context, podport.Gateway) ([]string, error)
	// guard writes the node's podfence table for the interface, before every check of
	// it, so that the interface is never up unguarded and a deleted table comes back.
	guard func(context.Context) error
	// last is the error of the last attempt (nil after a success); errNotAttached before
	// the first success.
	last atomic.Pointer[error]
	// attached: an attempt succeeded; changes after that are repairs.
	attached bool
}

var errNotAttached = errors.New("the gateway's interface was not attached yet")

// New checks the options and returns a Loop for them.
func New(o Options) (*Loop, error) {
	g, err := o.Gateway()
	if err != nil {
		return nil, err
	}
	if o.Interval < 0 {
		return nil, fmt.Errorf("interval %v is negative", o.Interval)
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	l := &Loop{gateway: g, interval: o.Interval, log: o.Log, reconcile: podport.ReconcileGateway}
	l.guard = nodeGuard(o.Node.Netns, o.Protected)
	l.set(errNotAttached)
	return l, nil
}

func (l *Loop) set(err error) { l.last.Store(&err) }

// guardedLinks are the node's interfaces that podfence keeps the pods off the node's services
// through: the cluster's gateway interface and every VPC gateway's outside veth, whether or
// not this node holds any yet (the table is the same in both loops, so that either writes it
// before the interfaces it keeps are up). A VPC is also kept off the cluster's services the
// node DNATs (its ClusterIPs and NodePorts) and off the cluster's protected CIDRs; the
// secondary network's pods are the cluster's own and reach them anyway.
func guardedLinks(protected []netip.Prefix) podfence.Links {
	return podfence.Links{
		Input:     []string{podport.GatewayLink, podport.VpcGatewayOutsideNodeLinkPattern},
		DNAT:      []string{podport.VpcGatewayOutsideNodeLinkPattern},
		Protected: protected,
	}
}

// nodeGuard writes the node's podfence table for guardedLinks(protected) in the namespace at
// netnsPath.
// The nft writer is made at the first call rather than here, so that a missing nft binary is a
// failed check that says so (and retries), and the constructors' tests, which replace the
// guard, need none.
func nodeGuard(netnsPath string, protected []netip.Prefix) func(context.Context) error {
	links := guardedLinks(protected)
	var mu sync.Mutex
	var guard *podfence.Guard
	return func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if guard == nil {
			made, err := podfence.New()
			if err != nil {
				return err
			}
			guard = made
		}
		return guard.GuardIn(ctx, netnsPath, links)
	}
}

// Ready is nil once the interface was attached, as long as the last check succeeded.
func (l *Loop) Ready() error {
	err := *l.last.Load()
	if err != nil && !errors.Is(err, errNotAttached) {
		return fmt.Errorf("the last check of the gateway's interface failed: %w", err)
	}
	return err
}

// Run attaches the interface, then checks it every interval until ctx ends; a failed attempt
// is retried sooner (1 s, doubling up to 5 s or the interval). It returns nil when ctx ends
// and leaves the interface in place (package comment).
func (l *Loop) Run(ctx context.Context) error {
	l.log.Info("Keeping the gateway's interface on the switch", "port", l.gateway.Port,
		"address", l.gateway.IP, "mac", l.gateway.MAC.String(), "bridge", l.gateway.Node.Bridge, "interval", l.interval.String())
	repeat(ctx, l.interval, l.once, nil)
	// Not detaching is the point: see the package comment.
	return nil
}

// repeat runs once now and then every interval until ctx ends; after a failure it runs again
// sooner, 1 s then doubling up to 5 s (or the interval), and at once when wake (nil for never)
// delivers.
func repeat(ctx context.Context, interval time.Duration, once func(context.Context) error, wake <-chan struct{}) {
	retry := time.Second
	for {
		wait := interval
		if err := once(ctx); err != nil {
			wait = min(retry, interval, maxRetryDelay)
			retry *= 2
		} else {
			retry = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		case <-wake:
		}
	}
}

// once runs one check and logs what it changed or why it failed.
func (l *Loop) once(ctx context.Context) error {
	if err := l.guard(ctx); err != nil {
		if ctx.Err() == nil {
			l.log.Error(err, "Failed to guard the gateway node from the secondary network; retrying", "links", guardedLinks)
		}
		l.set(err)
		return err
	}
	changed, err := l.reconcile(ctx, l.gateway)
	if err != nil {
		if ctx.Err() != nil {
			// Stopping: the interrupted attempt is not a failure of the node.
			return err
		}
		// What it changed before failing goes with the error, not as an attach.
		l.log.Error(err, "Failed to attach the gateway's interface; retrying", "port", l.gateway.Port, "changes", changed)
		l.set(err)
		return err
	}
	if len(changed) > 0 {
		msg := "Repaired the gateway's interface"
		if !l.attached {
			msg = "Attached the gateway's interface"
		}
		l.log.Info(msg, "port", l.gateway.Port, "changes", changed)
	}
	l.set(nil)
	l.attached = true
	return nil
}

// Handler answers /healthz with 200 while the process serves, and /readyz with 200 once the
// interface was attached and as long as the last check succeeded, 503 with the reason
// otherwise.
func (l *Loop) Handler() http.Handler {
	return metricsserver.HealthHandler(l.Ready)
}

// Run keeps the interface as o describes (and the VPC gateways, with o.Vpcs) until ctx ends,
// serving the probes on healthAddr ("" or "0": none): ready while every loop's last check
// succeeded.
func Run(ctx context.Context, o Options, healthAddr string) error {
	l, err := New(o)
	if err != nil {
		return err
	}
	loops := []func(context.Context) error{l.Run}
	ready := []func() error{l.Ready}
	if o.Vpcs != nil {
		v, err := NewVpcLoop(*o.Vpcs)
		if err != nil {
			return err
		}
		loops, ready = append(loops, v.Run), append(ready, v.Ready)
	}
	loopCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Each loop returns only when its context ends; the first to return ends the others.
	loopDone := make(chan error, len(loops))
	for _, run := range loops {
		go func() { loopDone <- run(loopCtx) }()
	}
	waitLoops := func(first error) error {
		cancel()
		errs := []error{first}
		for range len(loops) - 1 {
			errs = append(errs, <-loopDone)
		}
		return errors.Join(errs...)
	}
	if healthAddr == "" || healthAddr == "0" {
		return waitLoops(<-loopDone)
	}
	handler := metricsserver.HealthHandler(func() error {
		var errs []error
		for _, r := range ready {
			errs = append(errs, r())
		}
		return errors.Join(errs...)
	})
	srv := &http.Server{Addr: healthAddr, Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	select {
	case err := <-served:
		cancel()
		errs := []error{fmt.Errorf("serving the probes on %s: %w", healthAddr, err)}
		for range loops {
			errs = append(errs, <-loopDone)
		}
		return errors.Join(errs...)
	case err := <-loopDone:
		err = waitLoops(err)
		shutdown, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer stop()
		return errors.Join(err, srv.Shutdown(shutdown))
	}
}
