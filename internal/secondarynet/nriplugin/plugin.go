// Package nriplugin is the node side of the secondary network: an NRI plugin (containerd's
// Node Resource Interface) that gives every pod taking part its interface net1 when its
// sandbox starts, attached to the node's OVS integration bridge as the logical port the
// ovnmaster made for it, and removes it when the sandbox stops. It reads what the pod got
// from its network-status annotation (podnet) and hands the interface to the data plane
// (internal/datapath/podport).
//
// It fails closed: a pod that should be on the network and cannot be (no address yet, an
// address the ovnmaster refused, OVS failing) does not start. The error goes back to
// containerd, which fails the sandbox; the kubelet reports it in the pod's
// FailedCreatePodSandBox event and retries with backoff.
package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/ipam/hostaddr"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

// DefaultAddressWait bounds how long RunPodSandbox waits for the ovnmaster's address. The
// ovnmaster writes it within milliseconds of the pod's creation, usually before the kubelet
// even gets to the sandbox; the bound leaves the attachment itself time within NRI's
// request timeout (2 s by default in containerd), after which containerd would fail the
// sandbox with a less helpful message than ours.
const DefaultAddressWait = 1500 * time.Millisecond

// pollInterval is how often the pod is read again while it waits for its address, unless
// the Pods are watched (podWatch); watchRecheck is how often then, in case the watch lags.
const (
	pollInterval = 50 * time.Millisecond
	watchRecheck = 500 * time.Millisecond
)

// Config is what the plugin needs to know of its cluster and node.
type Config struct {
	// ClusterID names the cluster's logical switch ports (ovn.PortName).
	ClusterID string
	// CIDR is the cluster's secondary block: its prefix length is net1's, its gateway address
	// the next hop of Routes.
	CIDR netip.Prefix
	// Routes are the other clusters' secondary blocks (or the hub's whole secondary pool):
	// the pod reaches them over net1 through the gateway's port on the switch.
	Routes []netip.Prefix
	// Node is the node's OVS, where net1's node end goes.
	Node podport.Node
	// MTU of net1; 0 leaves the kernel's default.
	MTU int
	// AddressWait bounds the wait for the pod's address; 0 means DefaultAddressWait.
	AddressWait time.Duration
}

// Pods reads a pod from the API server.
type Pods interface {
	Get(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// podWatch is what Pods backed by a watch (nodePods) also offer: a wakeup at the pod's next
// change, so that waiting for the address costs no reads.
type podWatch interface {
	// Changed returns a channel closed at the pod's next change and a func to call once it is
	// no longer waited for.
	Changed(namespace, name string) (<-chan struct{}, func())
}

// Interfaces makes and removes pods' interfaces; Podport is the real one.
type Interfaces interface {
	Attach(ctx context.Context, a podport.Attachment) error
	Detach(ctx context.Context, n podport.Node, sandbox string) error
	Sweep(ctx context.Context, n podport.Node, keep map[string]bool) (removed []string, attached map[string]bool, err error)
}

// Podport is Interfaces on the node's kernel and OVS.
type Podport struct{}

// Attach is podport.Attach.
func (Podport) Attach(ctx context.Context, a podport.Attachment) error { return podport.Attach(ctx, a) }

// Detach is podport.Detach.
func (Podport) Detach(ctx context.Context, n podport.Node, sandbox string) error {
	return podport.Detach(ctx, n, sandbox)
}

// Sweep is podport.Sweep.
func (Podport) Sweep(ctx context.Context, n podport.Node, keep map[string]bool) ([]string, map[string]bool, error) {
	return podport.Sweep(ctx, n, keep)
}

// Plugin handles the sandbox events of one node.
type Plugin struct {
	cfg        Config
	gateway    netip.Addr
	pods       Pods
	interfaces Interfaces
	log        logr.Logger
	// detaching counts the removals running on their own (detach), catchingUp the late
	// attachments after a registration (Synchronize).
	detaching, catchingUp sync.WaitGroup
	// metrics receive the RunPodSandbox hook's durations: New's own, Run's the process's,
	// which it serves.
	metrics *metrics
	// registration is the plugin's readiness: Run starts each attempt, Synchronize completes
	// it, Run ends it when the connection to containerd is lost.
	registration registration
}

// detachTimeout bounds one removal of a pod's net1, which runs after its call has returned.
const detachTimeout = 30 * time.Second

// New checks cfg and returns the plugin.
func New(cfg Config, pods Pods, interfaces Interfaces, log logr.Logger) (*Plugin, error) {
	block, err := hostaddr.NewBlock(cfg.CIDR)
	if err != nil {
		return nil, fmt.Errorf("the cluster's secondary CIDR: %w", err)
	}
	if cfg.ClusterID == "" {
		return nil, errors.New("the cluster ID is required")
	}
	if cfg.Node.Bridge == "" {
		return nil, errors.New("the integration bridge is required")
	}
	for _, r := range cfg.Routes {
		// The hub's whole secondary pool is the usual route; the cluster's own block inside
		// it is on-link, more specific, and wins. A route inside the block would take part
		// of the cluster's own pods to the gateway.
		if r.Overlaps(cfg.CIDR) && r.Bits() >= cfg.CIDR.Bits() {
			return nil, fmt.Errorf("route %s is inside the cluster's own block %s, which is on-link", r, cfg.CIDR)
		}
	}
	if cfg.AddressWait <= 0 {
		cfg.AddressWait = DefaultAddressWait
	}
	return &Plugin{cfg: cfg, gateway: block.Gateway(), pods: pods, interfaces: interfaces, log: log, metrics: newMetrics()}, nil
}

// RunPodSandbox gives the pod its net1, or fails the sandbox saying why. containerd waits for
// it before it goes on with the pod, so its duration is measured (metrics).
func (p *Plugin) RunPodSandbox(ctx context.Context, sb *api.PodSandbox) error {
	start := time.Now()
	s, err := p.attach(ctx, sb)
	if err != nil {
		err = p.refuse(sb, err)
	}
	if s.member {
		p.metrics.observe(time.Since(start), s, err)
	}
	return err
}

// steps is how long the parts of an attach took, for RunPodSandbox's metrics.
type steps struct {
	// member: the sandbox is on the network, as the pod read from the API server says too.
	member bool
	// wait is the address wait's duration, attach the attachment's, when attachTried (the
	// wait succeeded).
	wait, attach time.Duration
	attachTried  bool
}

// attach gives a sandbox on the network its net1; nil for a sandbox that is not on it.
func (p *Plugin) attach(ctx context.Context, sb *api.PodSandbox) (steps, error) {
	var s steps
	netnsPath, ok := podNetns(sb)
	if !ok || !member(sb) {
		return s, nil
	}
	start := time.Now()
	addr, err := p.waitAddress(ctx, sb)
	s.wait = time.Since(start)
	if errors.Is(err, errNotMember) {
		return s, nil
	}
	s.member = true
	if err != nil {
		return s, err
	}
	attaching := time.Now()
	a, err := p.attachment(sb, netnsPath, addr)
	if err == nil {
		err = p.interfaces.Attach(ctx, a)
	}
	s.attach, s.attachTried = time.Since(attaching), true
	if err != nil {
		return s, err
	}
	p.log.V(1).Info("Attached the pod to the secondary network", "pod", key(sb), "sandbox", sb.GetId(),
		"ip", a.IP, "mac", a.MAC.String(), "port", a.Port, "waited", s.wait, "took", time.Since(start))
	return s, nil
}

// Synchronize catches up, at every registration, with what happened while the plugin was
// away. It removes the interfaces of sandboxes that stopped meanwhile: those containerd no
// longer lists, and those it lists stopped (their veth went with the pod's namespace;
// podport.Sweep). And it gives net1 to the running sandboxes on the network that lack it:
// containerd starts sandboxes without a plugin it is not connected to, which happens while the
// plugin restarts, before its pod first runs on a node, and for a moment whenever containerd
// drops it (it does when one of its calls overruns NRI's timeout on a loaded node). Those
// attachments run after the registration, which has a timeout of its own; until then such a
// pod runs without net1. The running pods' interfaces are left as they are: a restarted plugin
// does not disturb them.
func (p *Plugin) Synchronize(ctx context.Context, sandboxes []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	// containerd sends a plugin the sandboxes' events once its Synchronize returned without an
	// error, which this one never returns: from then on the plugin is ready (until Run sees
	// the connection end).
	defer p.registration.synchronized()
	keep := make(map[string]bool, len(sandboxes))
	for _, sb := range sandboxes {
		keep[sb.GetId()] = true
	}
	removed, attached, err := p.interfaces.Sweep(ctx, p.cfg.Node, keep)
	if len(removed) > 0 {
		p.log.Info("Removed the interfaces of sandboxes gone while the plugin was away", "sandboxes", removed)
	}
	if err != nil {
		// Not a reason to refuse the registration: new pods would not start.
		p.log.Error(err, "Removing the interfaces of sandboxes gone while the plugin was away")
	}
	if attached == nil {
		// The interfaces could not be listed: attaching now could double what is there.
		p.log.Info("Pods started while the plugin was away may lack net1 until the next registration")
		return nil, nil
	}
	var missing []*api.PodSandbox
	for _, sb := range sandboxes {
		if _, ok := podNetns(sb); ok && !attached[sb.GetId()] && member(sb) {
			missing = append(missing, sb)
		}
	}
	if len(missing) > 0 {
		p.catchingUp.Add(1)
		go func() {
			defer p.catchingUp.Done()
			p.catchUp(context.WithoutCancel(ctx), missing)
		}()
	}
	return nil, nil
}

// catchUp attaches the sandboxes that started while the plugin was away, one after the other
// as containerd's own calls are; a failure is logged (the pod runs already, there is no call
// to fail), and the next registration tries again.
func (p *Plugin) catchUp(ctx context.Context, sandboxes []*api.PodSandbox) {
	for _, sb := range sandboxes {
		ctx, cancel := context.WithTimeout(ctx, detachTimeout)
		_, err := p.attach(ctx, sb)
		cancel()
		if err != nil {
			p.log.Error(err, "A pod started while the plugin was away still has no net1", "pod", key(sb), "sandbox", sb.GetId())
			continue
		}
		p.log.Info("Gave net1 to a pod started while the plugin was away", "pod", key(sb), "sandbox", sb.GetId())
	}
}

// member tells whether a sandbox is for the network as far as its own data says: not in a
// system namespace, not opted out (RunPodSandbox reads the pod to be sure).
func member(sb *api.PodSandbox) bool {
	return !podnet.SystemNamespace(sb.GetNamespace()) && !podnet.OptedOut(sb.GetAnnotations())
}

// DefaultSweepInterval is how often SweepStopped runs in Run. A stopped sandbox's OVS port
// stays bound to its logical port: should a pod of the same name (a StatefulSet's) start on
// another node, both chassis would claim that port until the sweep.
const DefaultSweepInterval = 10 * time.Second

// SweepStopped removes the interfaces of sandboxes that stopped without the plugin removing
// them: a stop containerd did not send (it drops a plugin whose call overran NRI's timeout,
// and the stops of that moment pass without it, docs/architecture.md §6s) or a removal that
// failed. Run calls it every DefaultSweepInterval, between registrations too.
func (p *Plugin) SweepStopped(ctx context.Context) {
	removed, _, err := p.interfaces.Sweep(ctx, p.cfg.Node, nil)
	if len(removed) > 0 {
		p.log.Info("Removed the interfaces of stopped sandboxes", "sandboxes", removed)
	}
	if err != nil {
		p.log.Error(err, "Removing the interfaces of stopped sandboxes")
	}
}

// StopPodSandbox removes the pod's net1 and its OVS port. The kernel would remove the veth
// with the pod's namespace; the OVS port it would leave behind, bound to the logical port.
func (p *Plugin) StopPodSandbox(ctx context.Context, sb *api.PodSandbox) error {
	return p.detach(ctx, sb)
}

// RemovePodSandbox does what StopPodSandbox does, for sandboxes removed without a stop
// the plugin saw (it was not running then).
func (p *Plugin) RemovePodSandbox(ctx context.Context, sb *api.PodSandbox) error {
	return p.detach(ctx, sb)
}

func (p *Plugin) detach(ctx context.Context, sb *api.PodSandbox) error {
	if _, ok := podNetns(sb); !ok || podnet.SystemNamespace(sb.GetNamespace()) {
		return nil
	}
	// Answered at once, the removal runs on its own: containerd gives each call NRI's 2 s and,
	// when a stop overruns it on a loaded node, drops the plugin, so that the stops of that
	// moment pass without it and their OVS ports stay (docs/architecture.md §6s). Detach is
	// idempotent, so the stop's and the removal's may overlap.
	id, pod := sb.GetId(), key(sb)
	p.detaching.Add(1)
	go func() {
		defer p.detaching.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), detachTimeout)
		defer cancel()
		if err := p.interfaces.Detach(ctx, p.cfg.Node, id); err != nil {
			// Logged here: no caller waits for it, and a port left behind (until the next
			// registration's Synchronize) must be traceable in the plugin's log.
			p.log.Error(err, "Removing a pod's secondary network interface failed", "pod", pod, "sandbox", id)
		}
	}()
	return nil
}

// refuse is the error that fails the sandbox: containerd returns it to the kubelet, which
// puts it in the pod's FailedCreatePodSandBox event.
func (p *Plugin) refuse(sb *api.PodSandbox, err error) error {
	p.log.Info("Refusing to start a pod without its secondary network interface", "pod", key(sb), "sandbox", sb.GetId(), "reason", err.Error())
	return fmt.Errorf("octopus: pod %s cannot start without %s on the secondary network: %w", key(sb), podnet.InterfaceName, err)
}

// errNotMember: the pod, read from the API server, is not on the secondary network after all
// (host network, opted out after the sandbox's annotations were taken).
var errNotMember = errors.New("not on the secondary network")

// address is what the ovnmaster wrote on a pod: its network-status entry and, for a pod on a
// VPC, where on the VPC (vpc.Vpc empty: the cluster's network).
type address struct {
	status podnet.Status
	vpc    podnet.VpcAttachment
}

// waitAddress reads the pod until the ovnmaster has given it an address or said why not.
func (p *Plugin) waitAddress(ctx context.Context, sb *api.PodSandbox) (address, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.AddressWait)
	defer cancel()
	watch, watched := p.pods.(podWatch)
	recheck := pollInterval
	if watched {
		recheck = watchRecheck
	}
	for {
		var changed <-chan struct{}
		stop := func() {}
		if watched {
			// Before the read, so that a change after it wakes us.
			changed, stop = watch.Changed(sb.GetNamespace(), sb.GetName())
		}
		status, pending, err := p.readAddress(ctx, sb)
		if pending == nil {
			stop()
			return status, err
		}
		select {
		case <-ctx.Done():
			stop()
			return address{}, fmt.Errorf("no address after %s: %w", p.cfg.AddressWait, pending)
		case <-changed:
		case <-time.After(recheck):
		}
		stop()
	}
}

// readAddress reads the pod once: its address, or why it cannot have one (err), or why it has
// none yet (pending, non-nil while it is worth waiting).
func (p *Plugin) readAddress(ctx context.Context, sb *api.PodSandbox) (_ address, pending, err error) {
	pod, err := p.pods.Get(ctx, sb.GetNamespace(), sb.GetName())
	switch {
	case err != nil:
		return address{}, fmt.Errorf("reading the pod: %w", err), nil
	case string(pod.UID) != sb.GetUid():
		// Pending, not refused: a watch may still hold the pod of that name that went before
		// (a StatefulSet's), the sandbox's pod coming with its next event.
		return address{}, fmt.Errorf("the pod named so has UID %s, not the sandbox's %s", pod.UID, sb.GetUid()), nil
	case pod.Spec.HostNetwork || podnet.OptedOut(pod.Annotations):
		return address{}, nil, errNotMember
	}
	status, found, err := podnet.Find(pod.Annotations)
	switch {
	case err != nil:
		return address{}, nil, err
	case found:
		// The ovnmaster writes both annotations in one patch: no VpcAnnotation beside the
		// entry means the cluster's network, not "not yet".
		vpc, _, err := podnet.FindVpc(pod.Annotations)
		return address{status: status, vpc: vpc}, nil, err
	case pod.Annotations[podnet.ErrorAnnotation] != "":
		return address{}, nil, errors.New(pod.Annotations[podnet.ErrorAnnotation])
	}
	return address{}, errors.New("the ovnmaster has not given it an address yet (is octopus-ovn master running?)"), nil
}

// attachment is the interface the pod's network-status entry describes: on the cluster's
// network, or on the VPC its VpcAnnotation names, whose subnet gives net1 its prefix length
// and whose router (the subnet's first host) is the way to the VPC's other subnets. A VPC's
// pod gets no route to other clusters: nothing joins a VPC to the cluster's network.
func (p *Plugin) attachment(sb *api.PodSandbox, netnsPath string, addr address) (podport.Attachment, error) {
	s := addr.status
	if len(s.IPs) != 1 {
		return podport.Attachment{}, fmt.Errorf("its %s entry %s has %d addresses, want 1", podnet.NetworkStatusAnnotation, podnet.NetworkName, len(s.IPs))
	}
	ip, err := netip.ParseAddr(s.IPs[0])
	if err != nil {
		return podport.Attachment{}, fmt.Errorf("its address: %w", err)
	}
	mac, err := net.ParseMAC(s.MAC)
	if err != nil {
		return podport.Attachment{}, fmt.Errorf("its MAC: %w", err)
	}
	pod := ovn.PodKey{Namespace: sb.GetNamespace(), Name: sb.GetName()}
	a := podport.Attachment{
		Sandbox: sb.GetId(), PodNetns: netnsPath, Node: p.cfg.Node, Interface: podnet.InterfaceName, MAC: mac, MTU: p.cfg.MTU,
	}
	if v := addr.vpc; v.Vpc != "" {
		block, err := hostaddr.NewBlock(v.CIDR)
		if err != nil {
			return podport.Attachment{}, fmt.Errorf("its VPC %s's subnet %s: %w", v.Vpc, v.Subnet, err)
		}
		if !v.CIDR.Contains(ip) {
			return podport.Attachment{}, fmt.Errorf("its address %s is not in subnet %s (%s) of its VPC %s", ip, v.Subnet, v.CIDR, v.Vpc)
		}
		a.Port, a.IP = ovn.VpcPortName(p.cfg.ClusterID, v.Vpc, pod), netip.PrefixFrom(ip, v.CIDR.Bits())
		for _, r := range v.Routes {
			a.Routes = append(a.Routes, podport.Route{Dst: r, Via: block.Gateway()})
		}
		return a, nil
	}
	if !p.cfg.CIDR.Contains(ip) {
		return podport.Attachment{}, fmt.Errorf("its address %s is not in the cluster's secondary block %s", ip, p.cfg.CIDR)
	}
	a.Port, a.IP = ovn.PortName(p.cfg.ClusterID, pod), netip.PrefixFrom(ip, p.cfg.CIDR.Bits())
	for _, r := range p.cfg.Routes {
		a.Routes = append(a.Routes, podport.Route{Dst: r, Via: p.gateway})
	}
	return a, nil
}

// podNetns is the path of the sandbox's network namespace, and false for a host-network pod
// (its sandbox has no network namespace of its own). The sandbox's process's link in /proc
// works from any mount namespace of the node's PID namespace, where the path containerd
// records (/var/run/netns/cni-...) may be a mount private to containerd's.
func podNetns(sb *api.PodSandbox) (string, bool) {
	for _, ns := range sb.GetLinux().GetNamespaces() {
		if ns.GetType() != "network" || ns.GetPath() == "" {
			continue
		}
		if pid := sb.GetPid(); pid > 0 {
			return "/proc/" + strconv.FormatUint(uint64(pid), 10) + "/ns/net", true
		}
		return ns.GetPath(), true
	}
	return "", false
}

func key(sb *api.PodSandbox) string { return sb.GetNamespace() + "/" + sb.GetName() }
