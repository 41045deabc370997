package podport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
)

// The gateway's interface on a gateway node: a veth in the node's own network namespace (the
// one ovs-vswitchd runs in), GatewayLink carrying the gateway address and GatewayBridgePort a
// port of br-int bound to the cluster's gateway logical port. "oct" + "gw" cannot be a pod's
// node end (LinkName): sandbox IDs are hex digits.
//
// A veth rather than an OVS internal port, although the interface stays in ovs-vswitchd's
// namespace where an internal port could live: an internal port's device is ovs-vswitchd's,
// which resets it behind our back (checked on the userspace datapath: its MTU went from 1400
// back to 1500 when another port was added to the bridge, and deleting the port deletes the
// device with its address). The veth is ours alone, MAC, MTU and address; ovs-vswitchd only
// opens its other end by name, as it does a pod's, on the path the pods' ports already prove.
const (
	GatewayLink       = "octgw"
	GatewayBridgePort = "octgw-ovs"
)

// externalIDGateway marks the OVS interface of the gateway's port; its value is the logical
// port. It is not externalIDSandbox, so Sweep, which removes the ports of stopped sandboxes,
// never takes it.
const externalIDGateway = "octopus-gateway"

// Gateway is a gateway node's interface on the secondary network.
type Gateway struct {
	// Node is where the integration bridge is, and where the interface goes: the gateway's
	// own namespace (required).
	Node Node
	// Port is the gateway's logical switch port (required): ovn-controller binds it to
	// GatewayBridgePort, on the chassis the port is requested on only.
	Port string
	// MAC and IP are the logical port's addresses (required); IP carries the block's prefix
	// length, which makes the cluster's block on-link through GatewayLink.
	MAC net.HardwareAddr
	IP  netip.Prefix
	// MTU of both ends; 0 leaves the kernel's default.
	MTU int
}

func (g Gateway) validate() error {
	var errs []error
	if g.Node.Bridge == "" {
		errs = append(errs, errors.New("no integration bridge"))
	}
	if g.Port == "" {
		errs = append(errs, errors.New("no logical port"))
	}
	if len(g.MAC) != 6 {
		errs = append(errs, fmt.Errorf("MAC %q is not an Ethernet address", g.MAC))
	}
	if !g.IP.IsValid() || !g.IP.Addr().Is4() {
		errs = append(errs, fmt.Errorf("address %v is not an IPv4 prefix", g.IP))
	}
	if g.MTU < 0 || g.MTU > 65535 {
		errs = append(errs, fmt.Errorf("MTU %d out of range", g.MTU))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gateway interface: %w", err)
	}
	return nil
}

// AttachGateway makes the node's gateway interface as g describes, or corrects the one that
// is there: the veth (MAC, MTU, up), the address (others on GatewayLink go) and the OVS port
// with its iface-id. It is meant to be called again and again, on every gateway node, active
// or standing by: what is already right is left alone, so an Attach on the active gateway
// does not interrupt its traffic. On error part of it may be done; the next call finishes it,
// and DetachGateway removes it all.
func AttachGateway(ctx context.Context, g Gateway) error {
	_, err := ReconcileGateway(ctx, g)
	return err
}

// ReconcileGateway is AttachGateway saying what it changed, one phrase per change ("added
// 10.112.0.1/16 to octgw"); none when the node was right as it was. For a caller that runs it
// periodically and logs only what it had to repair. On error, changed holds what was done
// before it.
func ReconcileGateway(ctx context.Context, g Gateway) (changed []string, err error) {
	if err := g.validate(); err != nil {
		return nil, err
	}
	node, err := handleAt(g.Node.Netns)
	if err != nil {
		return nil, err
	}
	defer node.close()
	c := &changes{}
	link, fresh, err := ensureGatewayVeth(node, g, c)
	if err != nil {
		return c.list, err
	}
	// The gateway node's own packets (and, once it routes the other clusters' blocks, every
	// forwarded one) cross ovs-vswitchd's packet socket in software, like a pod's.
	bridgePortIndex, err := configureVethEnds(vethEnds{inner: node, innerName: GatewayLink, node: node, bridgePort: GatewayBridgePort}, link, g.IP, c)
	if err != nil {
		return c.list, err
	}
	return c.list, ensureOVSPort(ctx, g.Node, GatewayBridgePort, bridgePortIndex, g.Port, externalIDGateway, g.Port, fresh, c)
}

// vethEnds are a gateway veth's two ends: inner (in the namespace that holds the address: the
// node's for the cluster's gateway, its own for a VPC's) and bridgePort (the switch's end,
// always in the node's namespace).
type vethEnds struct {
	inner      *handle
	innerName  string
	node       *handle
	bridgePort string
}

// configureVethEnds gives a gateway veth what both kinds of gateway need: tx checksum offload
// off on the inner end (see disableTxChecksum; idempotent, so not reported), ip as its only
// address, the node's stack kept off the bridge port (like a pod's node end: see
// keepOffNodeStack, before it is up when the veth is new), and both ends up. It returns the
// bridge port's index, which the OVS port records (ensureOVSPort).
func configureVethEnds(e vethEnds, link netlink.Link, ip netip.Prefix, c *changes) (bridgePortIndex int, err error) {
	if err := disableTxChecksum(e.inner.ns, e.innerName); err != nil {
		return 0, err
	}
	if err := ensureOnlyAddr(e.inner, link, ip, c); err != nil {
		return 0, err
	}
	bridgePort, err := e.node.LinkByName(e.bridgePort)
	if err != nil {
		return 0, fmt.Errorf("finding %s: %w", e.bridgePort, err)
	}
	if changed, err := keepOffNodeStack(e.node, bridgePort); err != nil {
		return 0, err
	} else if changed {
		c.add("kept the node's stack off %s", e.bridgePort)
	}
	if err := ensureUp(e.inner, e.innerName, c); err != nil {
		return 0, err
	}
	return bridgePort.Attrs().Index, ensureUp(e.node, e.bridgePort, c)
}

// ensureMACAndMTU gives the inner end (link) mac, which the logical port's security demands
// (it drops frames from any other MAC), and both ends mtu unless it is 0.
func ensureMACAndMTU(e vethEnds, link netlink.Link, mac net.HardwareAddr, mtu int, c *changes) error {
	if !bytes.Equal(link.Attrs().HardwareAddr, mac) {
		if err := e.inner.LinkSetHardwareAddr(link, mac); err != nil {
			return fmt.Errorf("setting the MAC of %s to %s: %w", e.innerName, mac, err)
		}
		c.add("set the MAC of %s to %s", e.innerName, mac)
	}
	if mtu == 0 {
		return nil
	}
	for _, end := range []struct {
		h    *handle
		name string
	}{{e.inner, e.innerName}, {e.node, e.bridgePort}} {
		l, err := end.h.LinkByName(end.name)
		if err != nil {
			return fmt.Errorf("finding %s: %w", end.name, err)
		}
		if l.Attrs().MTU != mtu {
			if err := end.h.LinkSetMTU(l, mtu); err != nil {
				return fmt.Errorf("setting the MTU of %s to %d: %w", end.name, mtu, err)
			}
			c.add("set the MTU of %s to %d", end.name, mtu)
		}
	}
	return nil
}

// changes collects what a ReconcileGateway did.
type changes struct{ list []string }

func (c *changes) add(format string, args ...any) {
	c.list = append(c.list, fmt.Sprintf(format, args...))
}

// gatewayVsctlTimeout bounds the gateway loop's ovs-vsctl calls. No NRI deadline holds them,
// and a starved ovsdb-server on a loaded node (seconds between polls have been seen on the
// lab's two cores) must not read as a failed check that makes the gateway unready.
const gatewayVsctlTimeout = 5 * time.Second

// externalIDIfindex records, on a gateway's Interface row, the ifindex of the device the port
// was added for: ovs-vswitchd does not reopen a device that came back under a port's name (on
// the userspace datapath it keeps reading the old one: "No such device", and the port carries
// nothing, seen with a VPC gateway's veth deleted). The record is ours, not OVS's ifindex
// column, which ovs-vswitchd fills in on its own schedule. A row recording another device's
// index is stale.
const externalIDIfindex = "octopus-ifindex"

// ensureOVSPort makes the veth end name (the device with index ifindex) a port of the node's
// bridge bound to the logical port lport and marked with key=value, reading the database first
// so that a node already right gets no transaction. A port added for another device (the veth
// was made again, by this check or by one that failed before re-adding the port) is removed,
// waiting until ovs-vswitchd has let the old device go, and added again. fresh says this check
// made the veth: a row of an earlier version records no ifindex, and then only fresh tells.
func ensureOVSPort(ctx context.Context, n Node, name string, ifindex int, lport, key, value string, fresh bool, c *changes) error {
	ports, err := vsctlOutputWithin(ctx, n.OVSDB, gatewayVsctlTimeout, "list-ports", n.Bridge)
	if err != nil {
		return err
	}
	index := strconv.Itoa(ifindex)
	if slices.Contains(strings.Fields(string(ports)), name) {
		// A missing key prints a blank line (--if-exists).
		out, err := vsctlOutputWithin(ctx, n.OVSDB, gatewayVsctlTimeout, "--if-exists", "get", "Interface", name,
			"external_ids:iface-id", "external_ids:"+key, "external_ids:"+externalIDIfindex)
		if err != nil {
			return err
		}
		values := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		var recorded string
		if len(values) == 3 {
			recorded = unquote(values[2])
		}
		stale := fresh || (recorded != "" && recorded != index)
		switch {
		case stale:
			if _, err := vsctlOutputWithin(ctx, n.OVSDB, gatewayVsctlTimeout, "--if-exists", "del-port", n.Bridge, name); err != nil {
				return err
			}
			c.add("removed %s from %s to add it again for its new device", name, n.Bridge)
		case len(values) == 3 && unquote(values[0]) == lport && unquote(values[1]) == value && recorded == index:
			return nil
		case len(values) == 3 && unquote(values[0]) == lport && unquote(values[1]) == value:
			// Bound right by an earlier version, which recorded no device: record this one.
			if _, err := vsctlOutputWithin(ctx, n.OVSDB, gatewayVsctlTimeout, "--no-wait", "set", "Interface", name,
				"external_ids:"+externalIDIfindex+"="+index); err != nil {
				return err
			}
			return nil
		}
	}
	// --no-wait: ovn-controller binds the port once ovs-vswitchd has opened it, a moment
	// later; waiting here would bound nothing but ovs-vsctl's timeout.
	if _, err := vsctlOutputWithin(ctx, n.OVSDB, gatewayVsctlTimeout, "--no-wait", "--may-exist", "add-port", n.Bridge, name, "--",
		"set", "Interface", name, "external_ids:iface-id="+lport, "external_ids:"+key+"="+value,
		"external_ids:"+externalIDIfindex+"="+index); err != nil {
		return err
	}
	c.add("bound %s in %s to the logical port %s", name, n.Bridge, lport)
	return nil
}

// unquote strips the quotes ovs-vsctl puts around a string that needs them.
func unquote(s string) string {
	if u, err := strconv.Unquote(strings.TrimSpace(s)); err == nil {
		return u
	}
	return strings.TrimSpace(s)
}

// ensureGatewayVeth returns GatewayLink, creating the veth if it is missing or is not the
// pair it should be, and setting its MAC and MTU if they differ.
func ensureGatewayVeth(node *handle, g Gateway, c *changes) (link netlink.Link, created bool, err error) {
	link, err = node.LinkByName(GatewayLink)
	if err == nil {
		_, peerErr := node.LinkByName(GatewayBridgePort)
		if _, isVeth := link.(*netlink.Veth); !isVeth || peerErr != nil {
			// Not ours as it should be (half of an interrupted Attach, or someone else's
			// device under our name): start again.
			if err := node.LinkDel(link); err != nil {
				return nil, false, fmt.Errorf("removing the malformed %s: %w", GatewayLink, err)
			}
			c.add("removed the malformed %s", GatewayLink)
			link = nil
		}
	} else if !errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil, false, fmt.Errorf("finding %s: %w", GatewayLink, err)
	}
	if link == nil {
		if err := removeLink(node, GatewayBridgePort); err != nil {
			return nil, false, err
		}
		veth := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: GatewayLink, MTU: g.MTU, HardwareAddr: g.MAC},
			PeerName:  GatewayBridgePort,
			PeerMTU:   uint32(g.MTU), //nolint:gosec // validate bounds MTU
		}
		if err := node.LinkAdd(veth); err != nil {
			return nil, false, fmt.Errorf("creating the veth %s/%s: %w", GatewayLink, GatewayBridgePort, err)
		}
		c.add("created the veth %s/%s", GatewayLink, GatewayBridgePort)
		created = true
		if link, err = node.LinkByName(GatewayLink); err != nil {
			return nil, false, fmt.Errorf("finding %s: %w", GatewayLink, err)
		}
	}
	ends := vethEnds{inner: node, innerName: GatewayLink, node: node, bridgePort: GatewayBridgePort}
	if err := ensureMACAndMTU(ends, link, g.MAC, g.MTU, c); err != nil {
		return nil, false, err
	}
	return link, created, nil
}

// ensureOnlyAddr leaves want as the link's only IPv4 address: an address of an earlier block
// would keep routing that block into the switch.
func ensureOnlyAddr(node *handle, link netlink.Link, want netip.Prefix, c *changes) error {
	name := link.Attrs().Name
	addrs, err := node.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("listing the addresses of %s: %w", name, err)
	}
	found := false
	for _, a := range addrs {
		ones, _ := a.Mask.Size()
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if ok && netip.PrefixFrom(ip, ones) == want {
			found = true
			continue
		}
		if err := node.AddrDel(link, &a); err != nil {
			return fmt.Errorf("removing %s from %s: %w", a.IPNet, GatewayLink, err)
		}
		c.add("removed %s from %s", a.IPNet, name)
	}
	if found {
		return nil
	}
	if err := node.AddrAdd(link, &netlink.Addr{IPNet: ipNet(want)}); err != nil {
		return fmt.Errorf("adding %s to %s: %w", want, GatewayLink, err)
	}
	c.add("added %s to %s", want, name)
	return nil
}

// DetachGateway removes the node's gateway interface: the OVS port and the veth. Detaching
// what is not there does nothing.
func DetachGateway(ctx context.Context, n Node) error {
	if _, err := vsctlOutputWithin(ctx, n.OVSDB, gatewayVsctlTimeout, "--no-wait", "--if-exists", "del-port", n.Bridge, GatewayBridgePort); err != nil {
		return err
	}
	node, err := handleAt(n.Netns)
	if err != nil {
		return err
	}
	defer node.close()
	// Deleting one end deletes the pair; both are tried in case only one is left.
	return errors.Join(removeLink(node, GatewayLink), removeLink(node, GatewayBridgePort))
}

// removeLink deletes the named link; one that is not there is fine.
func removeLink(node *handle, name string) error {
	link, err := node.LinkByName(name)
	if err != nil {
		if errors.As(err, new(netlink.LinkNotFoundError)) {
			return nil
		}
		return fmt.Errorf("finding %s: %w", name, err)
	}
	if err := node.LinkDel(link); err != nil {
		return fmt.Errorf("removing %s: %w", name, err)
	}
	return nil
}
