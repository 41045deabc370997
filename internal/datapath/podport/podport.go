// Package podport gives a pod its interface on the secondary network: a veth pair whose pod
// end is net1, with the address and MAC of the pod's OVN logical port and routes to the other
// clusters' secondary blocks, and whose node end is a port of the node's OVS integration
// bridge carrying external_ids:iface-id=<logical port>, which ovn-controller binds to the
// logical port. A veth rather than an OVS internal port because OVS on the userspace (netdev)
// datapath, the only one these machines have, cannot move an internal port into another
// namespace: its internal ports are tap devices served by ovs-vswitchd's own thread.
//
// A gateway node has one more interface on the network, in its own namespace: the gateway's
// (AttachGateway, gateway.go).
//
// The package takes the desired interface and imports no Kubernetes client: the NRI plugin
// (internal/secondarynet/nriplugin) reads the pod's address from its annotation.
package podport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Attachment is one pod's interface on the secondary network.
type Attachment struct {
	// Sandbox is the pod sandbox's ID (required): it names the node end of the veth, so that
	// a pod recreated under the same name (a StatefulSet's) on the same node has a node end
	// of its own, which the old sandbox's late removal cannot take away.
	Sandbox string
	// PodNetns is the path of the pod's network namespace (required), e.g. /proc/PID/ns/net.
	PodNetns string
	// Node is where the integration bridge is (required).
	Node Node
	// Port is the pod's OVN logical switch port (required).
	Port string
	// Interface is the pod's interface name ("net1").
	Interface string
	// MAC and IP are the logical port's addresses; IP carries the block's prefix length,
	// which makes the block on-link.
	MAC net.HardwareAddr
	IP  netip.Prefix
	// Routes are sent over the interface to their next hop (the gateway's port on the
	// switch): the other clusters' secondary blocks.
	Routes []Route
	// MTU of the interface; 0 leaves the kernel's default.
	MTU int
}

// Route is a destination reached through a next hop on the switch.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

// Node is the node's side: the network namespace ovs-vswitchd runs in (the node end of the
// veth must be there, for ovs-vswitchd opens it with a packet socket of its own namespace),
// its database and its integration bridge.
type Node struct {
	// Netns is the path of ovs-vswitchd's network namespace; "" is the caller's.
	Netns string
	// OVSDB is the Open vSwitch database, in ovs-vsctl's --db syntax; "" is its default.
	OVSDB string
	// Bridge is the integration bridge ovn-controller manages ("br-int").
	Bridge string
}

// LinkName is the name of the node end of a sandbox's veth: "oct" and the first 12
// characters of the sandbox ID (containerd's are 64 hex digits), 15 bytes, the kernel's limit.
func LinkName(sandbox string) string {
	if len(sandbox) > 12 {
		sandbox = sandbox[:12]
	}
	return "oct" + sandbox
}

// externalIDSandbox marks the OVS interfaces this package made, with the sandbox they serve.
const externalIDSandbox = "octopus-sandbox"

// Attach makes the pod's interface as a described, replacing whatever an earlier attempt for
// the same sandbox left. On error nothing is left behind: the pod must not start half-attached.
func Attach(ctx context.Context, a Attachment) (err error) {
	if err := a.validate(); err != nil {
		return err
	}
	if err := Detach(ctx, a.Node, a.Sandbox); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, Detach(context.WithoutCancel(ctx), a.Node, a.Sandbox))
		}
	}()
	node, err := handleAt(a.Node.Netns)
	if err != nil {
		return err
	}
	defer node.close()
	pod, err := handleAt(a.PodNetns)
	if err != nil {
		return err
	}
	defer pod.close()

	// The pod's end is created under its final name in its namespace: the kernel refuses a
	// name already taken there (a retried sandbox's), so that one goes first.
	if old, err := pod.LinkByName(a.Interface); err == nil {
		if err := pod.LinkDel(old); err != nil {
			return fmt.Errorf("removing the earlier %s of the pod: %w", a.Interface, err)
		}
	}
	host := LinkName(a.Sandbox)
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: host, MTU: a.MTU},
		PeerName:  a.Interface,
		// The MAC is the pod end's from the start: the logical port's security drops every
		// frame from another.
		PeerHardwareAddr: a.MAC,
		PeerMTU:          uint32(a.MTU), //nolint:gosec // validate bounds MTU
		PeerNamespace:    netlink.NsFd(pod.ns),
	}
	if err := node.LinkAdd(veth); err != nil {
		return fmt.Errorf("creating the veth %s/%s: %w", host, a.Interface, err)
	}
	if err := a.configurePodEnd(pod); err != nil {
		return err
	}
	hostLink, err := node.LinkByName(host)
	if err != nil {
		return fmt.Errorf("finding the veth's node end %s: %w", host, err)
	}
	if _, err := keepOffNodeStack(node, hostLink); err != nil {
		return err
	}
	if err := node.LinkSetUp(hostLink); err != nil {
		return fmt.Errorf("setting %s up: %w", host, err)
	}
	// --no-wait: returns once the database has the port, without waiting for ovs-vswitchd
	// to apply it. containerd's NRI handles one sandbox event at a time, so a wait here
	// queues every pod starting on the node behind ovs-vswitchd's reconfiguration (seconds
	// per pod on a loaded node, past NRI's 2 s timeout, measured on the lab). The port then
	// forwards once ovs-vswitchd and ovn-controller have caught up, shortly after the pod
	// starts: its first packets may be lost.
	return vsctl(ctx, a.Node.OVSDB, "--no-wait", "--may-exist", "add-port", a.Node.Bridge, host, "--",
		"set", "Interface", host, "external_ids:iface-id="+a.Port, "external_ids:"+externalIDSandbox+"="+a.Sandbox)
}

func (a Attachment) validate() error {
	var errs []error
	for what, v := range map[string]string{"sandbox ID": a.Sandbox, "pod network namespace": a.PodNetns,
		"integration bridge": a.Node.Bridge, "logical port": a.Port, "interface name": a.Interface} {
		if v == "" {
			errs = append(errs, fmt.Errorf("no %s", what))
		}
	}
	if len(a.MAC) != 6 {
		errs = append(errs, fmt.Errorf("MAC %q is not an Ethernet address", a.MAC))
	}
	if !a.IP.IsValid() {
		errs = append(errs, errors.New("no address"))
	}
	if a.MTU < 0 || a.MTU > 65535 {
		errs = append(errs, fmt.Errorf("MTU %d out of range", a.MTU))
	}
	for _, r := range a.Routes {
		if !r.Dst.IsValid() || !r.Via.IsValid() {
			errs = append(errs, fmt.Errorf("route %v via %v is incomplete", r.Dst, r.Via))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pod interface of sandbox %s: %w", a.Sandbox, err)
	}
	return nil
}

// configurePodEnd gives the pod's end its address and routes.
func (a Attachment) configurePodEnd(pod *handle) error {
	link, err := pod.LinkByName(a.Interface)
	if err != nil {
		return fmt.Errorf("finding the pod's %s: %w", a.Interface, err)
	}
	if err := disableTxChecksum(pod.ns, a.Interface); err != nil {
		return err
	}
	addr := &netlink.Addr{IPNet: ipNet(a.IP)}
	if err := pod.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("adding %s to the pod's %s: %w", a.IP, a.Interface, err)
	}
	if err := pod.LinkSetUp(link); err != nil {
		return fmt.Errorf("setting the pod's %s up: %w", a.Interface, err)
	}
	for _, r := range a.Routes {
		route := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipNet(r.Dst.Masked()), Gw: net.IP(r.Via.AsSlice())}
		if err := pod.RouteReplace(route); err != nil {
			return fmt.Errorf("routing %s via %s on the pod's %s: %w", r.Dst, r.Via, a.Interface, err)
		}
	}
	return nil
}

// Detach removes a sandbox's interface: its OVS port and the veth (deleting the node end
// deletes the pod's end too). Detaching what is not there does nothing, so it serves both
// the stop and the removal of a sandbox, and any retry.
func Detach(ctx context.Context, n Node, sandbox string) error {
	if sandbox == "" {
		return errors.New("detaching a pod interface: no sandbox ID")
	}
	host := LinkName(sandbox)
	if err := vsctl(ctx, n.OVSDB, "--no-wait", "--if-exists", "del-port", n.Bridge, host); err != nil {
		return err
	}
	node, err := handleAt(n.Netns)
	if err != nil {
		return err
	}
	defer node.close()
	link, err := node.LinkByName(host)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		return fmt.Errorf("finding %s: %w", host, err)
	}
	if err := node.LinkDel(link); err != nil {
		return fmt.Errorf("removing %s: %w", host, err)
	}
	return nil
}

// Sweep detaches the sandboxes this package attached to the node's bridge that have stopped,
// and returns their IDs and those of the sandboxes whose interface stays in place. A stopped
// sandbox is one whose veth's node end is gone: the kernel removes the veth with the pod's
// network namespace when the sandbox stops, but not its OVS port, which stays bound to a
// logical port that may soon be another pod's. Attach makes the node end before the OVS port,
// so a port without it is never an attachment in progress. When keep is not nil, the
// sandboxes it does not hold are detached too (the runtime no longer knows them). This is how
// a stop the plugin missed (it was not running, or its removal failed) never leaks a port for
// longer than until the next Sweep.
func Sweep(ctx context.Context, n Node, keep map[string]bool) (removed []string, attachedNow map[string]bool, err error) {
	sandboxes, running, err := attached(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	attachedNow = map[string]bool{}
	var errs []error
	for _, sb := range sandboxes {
		// A sandbox unknown to the runtime goes whatever its node end says.
		if running[sb] && (keep == nil || keep[sb]) {
			attachedNow[sb] = true
			continue
		}
		if err := Detach(ctx, n, sb); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, sb)
	}
	return removed, attachedNow, errors.Join(errs...)
}

// attached lists the sandboxes with an OVS port of ours, and of those the ones whose veth's
// node end is there.
func attached(ctx context.Context, n Node) ([]string, map[string]bool, error) {
	out, err := vsctlOutput(ctx, n.OVSDB, "--format=json", "--columns=external_ids", "list", "Interface")
	if err != nil {
		return nil, nil, err
	}
	sandboxes, err := parseExternalIDs(out, externalIDSandbox)
	if err != nil {
		return nil, nil, err
	}
	node, err := handleAt(n.Netns)
	if err != nil {
		return nil, nil, err
	}
	defer node.close()
	running := map[string]bool{}
	for _, sb := range sandboxes {
		ok, err := hasLink(node, LinkName(sb))
		if err != nil {
			return nil, nil, err
		}
		running[sb] = ok
	}
	return sandboxes, running, nil
}

// hasLink says whether the namespace of node has a link of that name.
func hasLink(node *handle, name string) (bool, error) {
	_, err := node.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &notFound):
		return false, nil
	default:
		return false, fmt.Errorf("finding %s: %w", name, err)
	}
}

// parseExternalIDs reads the values of external_ids:key of the interfaces that have it from
// `ovs-vsctl --format=json --columns=external_ids list Interface`: rows of one cell, an OVSDB
// map ["map", [[key, value], ...]]. With externalIDSandbox, the sandbox IDs of pods' ports.
func parseExternalIDs(out []byte, key string) ([]string, error) {
	var table struct {
		Data [][]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(out, &table); err != nil {
		return nil, fmt.Errorf("reading ovs-vsctl's interfaces: %w", err)
	}
	var ids []string
	for _, row := range table.Data {
		if len(row) != 1 {
			continue
		}
		var cell []json.RawMessage
		if json.Unmarshal(row[0], &cell) != nil || len(cell) != 2 {
			continue
		}
		var pairs [][2]string
		if json.Unmarshal(cell[1], &pairs) != nil {
			continue
		}
		for _, kv := range pairs {
			if kv[0] == key && kv[1] != "" {
				ids = append(ids, kv[1])
			}
		}
	}
	return ids, nil
}

// handle is a netlink handle in a network namespace.
type handle struct {
	*netlink.Handle
	ns netns.NsHandle
}

// handleAt opens a netlink handle in the namespace at path; "" is the caller's.
func handleAt(path string) (*handle, error) {
	var ns netns.NsHandle
	var err error
	if path == "" {
		ns, err = netns.Get()
	} else {
		ns, err = netns.GetFromPath(path)
	}
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %q: %w", path, err)
	}
	var h *netlink.Handle
	if path == "" {
		// The caller's namespace: no setns, which needs CAP_SYS_ADMIN even into one's own
		// namespace (the gateway node's octopus-ovn gateway-port has NET_ADMIN alone).
		h, err = netlink.NewHandle()
	} else {
		h, err = netlink.NewHandleAt(ns)
	}
	if err != nil {
		_ = ns.Close()
		return nil, fmt.Errorf("netlink in network namespace %q: %w", path, err)
	}
	return &handle{Handle: h, ns: ns}, nil
}

func (h *handle) close() {
	h.Close()
	_ = h.ns.Close()
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// podVsctlTimeout bounds a pod's ovs-vsctl calls below the NRI request's deadline.
const podVsctlTimeout = time.Second

// vsctl runs ovs-vsctl against db for a pod's port: podVsctlTimeout bounds the wait for the
// database.
func vsctl(ctx context.Context, db string, args ...string) error {
	_, err := vsctlOutputWithin(ctx, db, podVsctlTimeout, args...)
	return err
}

// vsctlOutput is vsctl returning ovs-vsctl's standard output.
func vsctlOutput(ctx context.Context, db string, args ...string) ([]byte, error) {
	return vsctlOutputWithin(ctx, db, podVsctlTimeout, args...)
}

// vsctlOutputWithin runs ovs-vsctl against db, waiting at most timeout (whole seconds, at
// least one) for the database, and returns its standard output.
func vsctlOutputWithin(ctx context.Context, db string, timeout time.Duration, args ...string) ([]byte, error) {
	full := []string{fmt.Sprintf("--timeout=%d", max(1, int(timeout/time.Second)))}
	if db != "" {
		full = append(full, "--db="+db)
	}
	cmd := exec.CommandContext(ctx, "ovs-vsctl", append(full, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ovs-vsctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
