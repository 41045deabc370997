package gatewayuplink

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/datapath/vpcnat"
	"github.com/octopus-mcs/octopus/internal/metricsserver"
)

// VpcSource tells which VPC gateways are requested on a chassis: ovn.SBClient.VpcGatewaysOn (or
// ovn.Client's, from the NB), which reads the rows the ovnmaster's Vpc controller writes
// (ApplyVpc), so that the node needs no Kubernetes client. An error must mean "unknown", never
// "none": the loop then changes nothing.
type VpcSource interface {
	VpcGatewaysOn(ctx context.Context, clusterID, chassis string) ([]ovn.VpcGatewayPort, error)
}

// Waker is a VpcSource that says when its answer may have changed: the loop then checks at
// once instead of at its next interval, so that a VPC's gateway follows a takeover (or a new
// VPC gets its gateway) without waiting for it. A wake is a hint; the interval's checks go on,
// and repair what no database change announces.
type Waker interface {
	Wake() <-chan struct{}
}

var (
	_ VpcSource = (*ovn.Client)(nil)
	_ VpcSource = (*ovn.SBClient)(nil)
	_ VpcSource = (*DBSource)(nil)
	_ Waker     = (*DBSource)(nil)
)

// DBSource is a VpcSource that connects to the NB database, or with Southbound to the SB, at
// its first use, and again at the next after a failed connect: a database out of reach at start
// then delays the VPC gateways (the check fails, changing nothing, and is retried) without
// keeping the process, and the cluster's gateway interface with it, from starting. Once
// connected, the client reconnects by itself. The SB is the one to use on a gateway node: it
// reads it with the certificate the node's ovn-controller holds already (ovn.SBClient).
type DBSource struct {
	// Endpoint and TLS are the database's, as ovn.Options has them.
	Endpoint string
	TLS      *tls.Config
	// Southbound reads the SB bindings (ovn.ConnectSB) rather than the NB rows (ovn.Connect).
	Southbound bool
	// ConnectTimeout bounds a connect, which an endpoint that accepts and never answers would
	// otherwise hold forever; DefaultConnectTimeout when zero.
	ConnectTimeout time.Duration
	// Log receives the client's messages (optional).
	Log logr.Logger

	// mu guards the fields below; never held across a connect, so that Wake and Close do not
	// wait on a database.
	mu     sync.Mutex
	client gatewayClient
	closed bool
	wake   chan struct{}
}

// gatewayClient is what DBSource keeps of ovn.Client or ovn.SBClient.
type gatewayClient interface {
	VpcSource
	OnVpcGatewayChange(fn func())
	Close()
}

// DefaultConnectTimeout is DBSource's ConnectTimeout when it has none: no longer than the
// loop's interval (DefaultInterval), and long enough for a database on a loaded node.
const DefaultConnectTimeout = 10 * time.Second

// errSourceClosed is VpcGatewaysOn's answer after Close.
var errSourceClosed = errors.New("the OVN database source is closed")

// db names the source's database in errors.
func (s *DBSource) db() string {
	if s.Southbound {
		return "SB"
	}
	return "NB"
}

// dial connects the client the source reads through. A failed connect returns a nil
// interface, never one holding a nil client.
func (s *DBSource) dial(ctx context.Context) (gatewayClient, error) {
	opts := ovn.Options{Endpoint: s.Endpoint, TLS: s.TLS, Log: s.Log}
	if s.Southbound {
		c, err := ovn.ConnectSB(ctx, opts)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	c, err := ovn.Connect(ctx, opts)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Wake delivers after each change of the VPC gateways' rows seen by the client, once connected
// (OnVpcGatewayChange); changes while a wake is pending make one.
func (s *DBSource) Wake() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wakeLocked()
}

func (s *DBSource) wakeLocked() chan struct{} {
	if s.wake == nil {
		s.wake = make(chan struct{}, 1)
	}
	return s.wake
}

// VpcGatewaysOn is the client's VpcGatewaysOn, connecting first if need be.
func (s *DBSource) VpcGatewaysOn(ctx context.Context, clusterID, chassis string) ([]ovn.VpcGatewayPort, error) {
	c, err := s.connected(ctx)
	if err != nil {
		return nil, err
	}
	return c.VpcGatewaysOn(ctx, clusterID, chassis)
}

// connected is the client, connecting it if there is none. Two callers connecting at once each
// connect; the second to finish keeps the first's client.
func (s *DBSource) connected(ctx context.Context) (gatewayClient, error) {
	s.mu.Lock()
	c, closed, wake := s.client, s.closed, s.wakeLocked()
	s.mu.Unlock()
	switch {
	case closed:
		return nil, errSourceClosed
	case c != nil:
		return c, nil
	}
	timeout := cmp.Or(s.ConnectTimeout, DefaultConnectTimeout)
	connectCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := s.dial(connectCtx)
	if err != nil {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		switch {
		case closed:
			return nil, errSourceClosed
		case ctx.Err() == nil && connectCtx.Err() != nil:
			return nil, fmt.Errorf("no answer from the OVN %s database at %s within %v: %w", s.db(), s.Endpoint, timeout, err)
		default:
			return nil, err
		}
	}
	c.OnVpcGatewayChange(func() {
		select {
		case wake <- struct{}{}:
		default: // one pending wake covers this change too
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		c.Close()
		return nil, errSourceClosed
	case s.client != nil:
		c.Close()
		return s.client, nil
	}
	s.client = c
	return c, nil
}

// Close disconnects, if connected; a connect under way is closed as it ends.
func (s *DBSource) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.client != nil {
		s.client.Close()
		s.client = nil
	}
}

// VpcOptions configure a VpcLoop.
type VpcOptions struct {
	// ClusterID is the cluster whose VPCs' gateways are kept (required).
	ClusterID string
	// Chassis is this node's OVN chassis name, its Open_vSwitch external_ids:system-id (the
	// node's name) (required): the VPC gateway ports requested on it are attached here.
	Chassis string
	// Node is the node's Open vSwitch database, integration bridge and ovs-vswitchd's namespace.
	Node podport.Node
	// NetnsDir is where the gateways' namespaces are made; "" is podport.DefaultNetnsDir.
	NetnsDir string
	// MTU of the gateways' interfaces; 0 leaves the kernel's default.
	MTU int
	// Source lists the gateways to keep (required).
	Source VpcSource
	// Interval between two checks (DefaultInterval when zero).
	Interval time.Duration
	// Protected are the cluster's own CIDRs, kept from the VPCs as Config.Protected says (the
	// same CIDRs: both loops write the node's one table).
	Protected []netip.Prefix
	// Log gets a line for each gateway attached, repaired or removed and for each failure.
	Log logr.Logger
}

// VpcLoop keeps on this node the gateways of the VPCs whose gateway port is requested on its
// chassis, each in a namespace of its own (podport.ReconcileVpcGateway), and removes those of
// VPCs that are gone or whose gateway moved to another chassis. Like Loop it never removes
// anything when it stops: a rolling update of its pod must not cut a VPC's way out.
type VpcLoop struct {
	o VpcOptions
	// reconcile, detach and present are podport's; tests replace them.
	reconcile func(context.Context, podport.VpcGateway) ([]string, error)
	detach    func(ctx context.Context, n podport.Node, dir, vpc string) error
	present   func(ctx context.Context, n podport.Node, dir string) ([]string, error)
	// snat is vpcnat's ApplyIn (the nft writer made at first use); tests replace it.
	snat func(ctx context.Context, netnsPath string, s vpcnat.SNAT) error
	// guard writes the node's podfence table (nodeGuard) before every check, so that no
	// gateway's outside veth is ever up unfenced; tests replace it.
	guard func(context.Context) error
	// last is the error of the last check (nil after one that succeeded); errNotChecked
	// before the first.
	last atomic.Pointer[error]
	// attached are the VPCs whose gateway a check of this loop attached: a change to them
	// afterwards is a repair.
	attached map[string]bool
}

var errNotChecked = errors.New("the VPC gateways were not checked yet")

// NewVpcLoop checks the options and returns a VpcLoop for them.
func NewVpcLoop(o VpcOptions) (*VpcLoop, error) {
	var errs []error
	if msgs := validation.IsDNS1123Label(o.ClusterID); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("cluster ID %q: %v", o.ClusterID, msgs))
	}
	if o.Chassis == "" {
		errs = append(errs, errors.New("no chassis name: pass the node's name, its OVN system-id"))
	}
	if o.Node.Bridge == "" {
		errs = append(errs, errors.New("no integration bridge"))
	}
	if o.Source == nil {
		errs = append(errs, errors.New("no source of the VPC gateways"))
	}
	if o.Interval < 0 {
		errs = append(errs, fmt.Errorf("interval %v is negative", o.Interval))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("VPC gateways: %w", err)
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	l := &VpcLoop{o: o, reconcile: podport.ReconcileVpcGateway, detach: podport.DetachVpcGateway,
		present: podport.VpcGatewaysOnNode, attached: map[string]bool{}, snat: lazySNAT(), guard: nodeGuard(o.Node.Netns, o.Protected)}
	l.set(errNotChecked)
	return l, nil
}

func (l *VpcLoop) set(err error) { l.last.Store(&err) }

// Ready is nil once a check succeeded, as long as the last one did.
func (l *VpcLoop) Ready() error {
	err := *l.last.Load()
	if err != nil && !errors.Is(err, errNotChecked) {
		return fmt.Errorf("the last check of the VPC gateways failed: %w", err)
	}
	return err
}

// Handler answers /healthz, and /readyz as Ready says.
func (l *VpcLoop) Handler() http.Handler { return metricsserver.HealthHandler(l.Ready) }

// Run checks the VPC gateways at once and then every interval until ctx ends, a failed check
// again sooner (as Loop.Run). It returns nil when ctx ends and leaves every gateway in place.
func (l *VpcLoop) Run(ctx context.Context) error {
	l.o.Log.Info("Keeping the VPC gateways requested on this chassis", "cluster", l.o.ClusterID, "chassis", l.o.Chassis,
		"bridge", l.o.Node.Bridge, "interval", l.o.Interval.String())
	var wake <-chan struct{}
	if w, ok := l.o.Source.(Waker); ok {
		wake = w.Wake()
	}
	repeat(ctx, l.o.Interval, l.once, wake)
	return nil
}

// vpcGatewayPlan is what a check does: the gateways to attach (or check), one per port
// requested here, and the VPCs whose gateway is on the node but no longer requested here.
func vpcGatewayPlan(o VpcOptions, desired []ovn.VpcGatewayPort, present []string) (attach []podport.VpcGateway, remove []string) {
	want := map[string]bool{}
	for _, d := range desired {
		want[d.Vpc] = true
		attach = append(attach, podport.VpcGateway{
			Node: o.Node, NetnsDir: o.NetnsDir, Vpc: d.Vpc, Port: d.Port, MAC: d.MAC, IP: d.IP,
			Via: d.Gateway, Subnets: slices.Clone(d.Subnets), MTU: o.MTU, ExternalIP: d.ExternalIP,
		})
	}
	for _, vpc := range present {
		if !want[vpc] {
			remove = append(remove, vpc)
		}
	}
	return attach, remove
}

// gatewaySNAT is the SNAT of g's namespace: the VPC's subnets to its external address, leaving
// by any interface but the VPC's link; none without an external address.
func gatewaySNAT(g podport.VpcGateway) vpcnat.SNAT {
	s := vpcnat.SNAT{EgressIP: g.ExternalIP, VpcInterface: podport.VpcGatewayInterface}
	if g.ExternalIP.IsValid() {
		s.Subnets = slices.Clone(g.Subnets)
	}
	return s
}

// lazySNAT is vpcnat's ApplyIn with a writer made at its first use: a node that keeps no VPC
// gateway does not need the nft binary. Every gateway kept does, with an external address or
// without one (its table is then removed).
func lazySNAT() func(context.Context, string, vpcnat.SNAT) error {
	var mu sync.Mutex
	var w *vpcnat.Writer
	return func(ctx context.Context, netnsPath string, s vpcnat.SNAT) error {
		mu.Lock()
		if w == nil {
			nw, err := vpcnat.New()
			if err != nil {
				mu.Unlock()
				return err
			}
			w = nw
		}
		mu.Unlock()
		return w.ApplyIn(ctx, netnsPath, s)
	}
}

// once runs one check: it reads what is requested here, attaches or repairs each, removes the
// rest, and logs each change and failure. An unreadable source changes nothing.
func (l *VpcLoop) once(ctx context.Context) error {
	err := l.check(ctx)
	if ctx.Err() != nil {
		return err // stopping: not a failure of the node
	}
	l.set(err)
	return err
}

func (l *VpcLoop) check(ctx context.Context) error {
	guardErr := l.guard(ctx)
	if guardErr != nil && ctx.Err() == nil {
		l.o.Log.Error(guardErr, "Failed to guard the node from the VPCs' outside veths; attaching nothing, retrying", "links", guardedLinks(l.o.Protected))
	}
	desired, err := l.o.Source.VpcGatewaysOn(ctx, l.o.ClusterID, l.o.Chassis)
	if err != nil {
		if ctx.Err() == nil {
			l.o.Log.Error(err, "Failed to read the VPC gateways requested on this chassis; changing nothing, retrying")
		}
		return err
	}
	present, err := l.present(ctx, l.o.Node, l.o.NetnsDir)
	if err != nil {
		if ctx.Err() == nil {
			l.o.Log.Error(err, "Failed to list the VPC gateways on this node; retrying")
		}
		return err
	}
	attach, remove := vpcGatewayPlan(l.o, desired, present)
	var errs []error
	if guardErr != nil {
		// No gateway is attached or repaired unfenced; removals go on, since a gateway that
		// moved to another node must not keep its external address here too.
		attach, errs = nil, []error{guardErr}
	}
	for _, g := range attach {
		changed, err := l.reconcile(ctx, g)
		if err != nil {
			if ctx.Err() == nil {
				l.o.Log.Error(err, "Failed to attach the VPC gateway; retrying", "vpc", g.Vpc, "port", g.Port, "changes", changed)
			}
			errs = append(errs, err)
			continue
		}
		// The SNAT after the interfaces: the table is written whole each check (one nft
		// transaction; the same again changes nothing a packet sees), and removed without an
		// external address.
		if err := l.snat(ctx, g.NetnsPath(), gatewaySNAT(g)); err != nil {
			if ctx.Err() == nil {
				l.o.Log.Error(err, "Failed to write the VPC gateway's SNAT; retrying", "vpc", g.Vpc, "externalIP", g.ExternalIP)
			}
			errs = append(errs, err)
			continue
		}
		if len(changed) > 0 {
			msg := "Repaired the VPC gateway"
			if !l.attached[g.Vpc] {
				msg = "Attached the VPC gateway"
			}
			l.o.Log.Info(msg, "vpc", g.Vpc, "port", g.Port, "netns", g.NetnsPath(), "changes", changed)
		}
		l.attached[g.Vpc] = true
	}
	for _, vpc := range remove {
		if err := l.detach(ctx, l.o.Node, l.o.NetnsDir, vpc); err != nil {
			if ctx.Err() == nil {
				l.o.Log.Error(err, "Failed to remove the VPC gateway; retrying", "vpc", vpc)
			}
			errs = append(errs, err)
			continue
		}
		l.o.Log.Info("Removed the VPC gateway: its port is not requested on this chassis", "vpc", vpc)
		delete(l.attached, vpc)
	}
	return errors.Join(errs...)
}
