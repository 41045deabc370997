package podport

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/octopus-mcs/octopus/internal/datapath/netnsrun"
)

// A VPC's gateway on the active gateway node lives in a network namespace of its own, the
// analogue of Kube-OVN's VPC NAT gateway pod: VPCs' link networks all use the same addresses
// (ovn.VpcGatewayLink), and their subnets may overlap each other's and the node's, so no two
// of them can share the node's routing table. The namespace holds VpcGatewayInterface, one end
// of a veth whose other end (VpcGatewayNodeLink) is a port of the integration bridge in the
// node's namespace (where ovs-vswitchd opens it by name, as a pod's) bound to the VPC's
// gateway logical port.
const (
	// VpcGatewayNetnsPrefix + the VPC's name is its gateway's namespace, a file in the
	// namespace directory (VpcGateway.NetnsDir, /run/netns by default, where `ip netns`
	// finds it). A VPC name is an RFC 1123 label, so the name is at most 70 bytes and holds
	// no '/'. Everything with this prefix in the directory is ours (VpcGatewaysOnNode).
	VpcGatewayNetnsPrefix = "octvpc-"
	// VpcGatewayInterface is the gateway's interface on the VPC's link network, inside its
	// namespace: the namespace is the gateway's alone, so one name serves every VPC.
	VpcGatewayInterface = "vpc"
	// vpcGatewayLinkPrefix starts the name of the veth's node end. "oct" + "v" is neither a
	// pod's node end ("oct" + sandbox hex digits, LinkName) nor the cluster gateway's "octgw".
	vpcGatewayLinkPrefix = "octv"
	// DefaultNetnsDir is where named network namespaces live (iproute2's NETNS_RUN_DIR).
	DefaultNetnsDir = "/run/netns"
)

// externalIDVpcGateway marks the OVS interface of a VPC gateway's port; its value is the VPC.
// It is neither externalIDSandbox, so Sweep (which removes the ports of stopped sandboxes)
// never takes it, nor externalIDGateway, the cluster gateway's.
const externalIDVpcGateway = "octopus-vpc-gateway"

// VpcGatewayNetns is the name of the VPC's gateway namespace in the namespace directory.
func VpcGatewayNetns(vpc string) string { return VpcGatewayNetnsPrefix + vpc }

// VpcGatewayNodeLink is the name of the node end of the VPC gateway's veth: a VPC name may be
// 63 bytes and an interface's at most 15, so "octv" and the first 11 hex digits of the name's
// SHA-256 (44 bits: two VPCs of one cluster meeting is out of reach).
func VpcGatewayNodeLink(vpc string) string {
	sum := sha256.Sum256([]byte(vpc))
	return vpcGatewayLinkPrefix + hex.EncodeToString(sum[:])[:15-len(vpcGatewayLinkPrefix)]
}

// VpcGateway is one VPC's gateway interface on a gateway node.
type VpcGateway struct {
	// Node is where the integration bridge is, and the node end of the veth (required).
	Node Node
	// NetnsDir is the directory of named network namespaces; "" is DefaultNetnsDir.
	NetnsDir string
	// Vpc is the VPC's name, an RFC 1123 label (required): it names the namespace.
	Vpc string
	// Port is the VPC's gateway logical port (required): ovn-controller binds it to the veth's
	// node end on the chassis it is requested on only.
	Port string
	// MAC and IP are the logical port's addresses (required); IP carries the link's prefix
	// length.
	MAC net.HardwareAddr
	IP  netip.Prefix
	// Via is the VPC router's address on the link (required): the VPC's Subnets are routed
	// back through it.
	Via     netip.Addr
	Subnets []netip.Prefix
	// MTU of both ends; 0 leaves the kernel's default.
	MTU int
	// ExternalIP is the VPC's external address (optional): the gateway holds it on its
	// outside veth (vpcoutside.go), and the node routes it there. The zero Addr: no outside
	// veth (one there goes).
	ExternalIP netip.Addr
}

// NetnsPath is the path of the gateway's namespace.
func (g VpcGateway) NetnsPath() string { return vpcNetnsPath(g.NetnsDir, g.Vpc) }

func vpcNetnsPath(dir, vpc string) string {
	if dir == "" {
		dir = DefaultNetnsDir
	}
	return filepath.Join(dir, VpcGatewayNetns(vpc))
}

func (g VpcGateway) validate() error {
	var errs []error
	if g.Node.Bridge == "" {
		errs = append(errs, errors.New("no integration bridge"))
	}
	if err := validVpcName(g.Vpc); err != nil {
		errs = append(errs, err)
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
	if !g.Via.Is4() || (g.IP.IsValid() && !g.IP.Masked().Contains(g.Via)) {
		errs = append(errs, fmt.Errorf("router address %v is not an IPv4 address on the link %v", g.Via, g.IP.Masked()))
	}
	for _, s := range g.Subnets {
		if !s.IsValid() || !s.Addr().Is4() {
			errs = append(errs, fmt.Errorf("subnet %v is not an IPv4 prefix", s))
		}
	}
	if g.ExternalIP.IsValid() && (!g.ExternalIP.Is4() || g.ExternalIP.IsUnspecified()) {
		errs = append(errs, fmt.Errorf("external address %v is not an IPv4 unicast address", g.ExternalIP))
	}
	if g.MTU < 0 || g.MTU > 65535 {
		errs = append(errs, fmt.Errorf("MTU %d out of range", g.MTU))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gateway of VPC %q: %w", g.Vpc, err)
	}
	return nil
}

// validVpcName refuses what is not an RFC 1123 label: the name becomes a file name and an OVS
// external_id value.
func validVpcName(vpc string) error {
	if vpc == "" || len(vpc) > 63 || strings.Trim(vpc, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" ||
		strings.HasPrefix(vpc, "-") || strings.HasSuffix(vpc, "-") {
		return fmt.Errorf("VPC name %q is not an RFC 1123 label", vpc)
	}
	return nil
}

// ReconcileVpcGateway makes the VPC's gateway as g describes, or corrects the one that is
// there, and says what it changed, one phrase per change; none when the node was right. The
// namespace (made if missing), the veth (MAC, MTU, up), the gateway's address (others go), the
// routes back to the VPC's subnets via the router (others via a next hop on the interface
// go), and the OVS port with its iface-id. What is right is left alone, so a check of the
// active gateway does not interrupt its traffic. On error part of it may be done; the next
// call finishes it, and DetachVpcGateway removes it all.
func ReconcileVpcGateway(ctx context.Context, g VpcGateway) (changed []string, err error) {
	if err := g.validate(); err != nil {
		return nil, err
	}
	c := &changes{}
	path := g.NetnsPath()
	made, err := ensureNetns(path)
	if err != nil {
		return nil, err
	}
	if made {
		c.add("created the network namespace %s", path)
	}
	node, err := handleAt(g.Node.Netns)
	if err != nil {
		return c.list, err
	}
	defer node.close()
	gw, err := handleAt(path)
	if err != nil {
		return c.list, err
	}
	defer gw.close()

	hostName := VpcGatewayNodeLink(g.Vpc)
	link, fresh, err := ensureVpcGatewayVeth(node, gw, g, c)
	if err != nil {
		return c.list, err
	}
	// As on a pod's net1: the gateway's packets cross ovs-vswitchd's packet socket in software.
	bridgePortIndex, err := configureVethEnds(vethEnds{inner: gw, innerName: VpcGatewayInterface, node: node, bridgePort: hostName}, link, g.IP, c)
	if err != nil {
		return c.list, err
	}
	if err := ensureUp(gw, "lo", c); err != nil {
		return c.list, err
	}
	// The gateway forwards: the VPC's packets go on out of the namespace (and the answers back
	// in). The namespace's own setting, nobody else's.
	if changed, err := ensureForwarding(gw); err != nil {
		return c.list, err
	} else if changed {
		c.add("turned IPv4 forwarding on in %s", path)
	}
	// Routes last: the kernel refuses a next hop that is not on-link yet (address, up).
	if err := ensureVpcRoutes(gw, link.Attrs().Index, g, c); err != nil {
		return c.list, err
	}
	if err := ensureVpcOutside(node, gw, g, c); err != nil {
		return c.list, err
	}
	return c.list, ensureOVSPort(ctx, g.Node, hostName, bridgePortIndex, g.Port, externalIDVpcGateway, g.Vpc, fresh, c)
}

// ensureUp sets the named link up if it is not.
func ensureUp(h *handle, name string, c *changes) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("finding %s: %w", name, err)
	}
	if l.Attrs().Flags&net.FlagUp != 0 {
		return nil
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("setting %s up: %w", name, err)
	}
	c.add("set %s up", name)
	return nil
}

// ensureNetns makes the named network namespace at path unless it is there, and says whether
// it made it. A file at path that is not a namespace (the mount point of one whose mount went)
// is replaced.
func ensureNetns(path string) (made bool, err error) {
	var st unix.Statfs_t
	switch err := unix.Statfs(path, &st); {
	case err == nil && st.Type == unix.NSFS_MAGIC:
		return false, nil
	case err == nil:
		if err := os.Remove(path); err != nil {
			return false, fmt.Errorf("removing %s, which is not a network namespace: %w", path, err)
		}
	case !errors.Is(err, unix.ENOENT):
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("making the namespace directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return false, fmt.Errorf("making the mount point %s: %w", path, err)
	}
	_ = f.Close()
	// A thread of its own unshares and bind-mounts its new namespace on path, as `ip netns
	// add` does in its process.
	err = netnsrun.InNew(func(self string) error {
		if err := unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting the new network namespace on %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		_ = os.Remove(path)
		return false, err
	}
	return true, nil
}

// ipForward is the namespace's IPv4 forwarding switch: /proc/sys/net is the opening thread's
// namespace's.
const ipForward = "/proc/sys/net/ipv4/ip_forward"

// ensureForwarding turns IPv4 forwarding on in the namespace of h, and says whether it was off.
func ensureForwarding(h *handle) (changed bool, err error) {
	err = netnsrun.InNamespace(h.ns, "of the VPC gateway", func() error {
		b, err := os.ReadFile(ipForward)
		if err != nil {
			return fmt.Errorf("reading %s: %w", ipForward, err)
		}
		if strings.TrimSpace(string(b)) == "1" {
			return nil
		}
		if err := os.WriteFile(ipForward, []byte("1\n"), 0o644); err != nil {
			return fmt.Errorf("turning IPv4 forwarding on: %w", err)
		}
		changed = true
		return nil
	})
	return changed, err
}

// removeNetns unmounts and removes the named namespace at path; one that is not there is fine.
func removeNetns(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting the network namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	return nil
}

// ensureVpcGatewayVeth returns VpcGatewayInterface in the gateway's namespace, creating the
// veth if either end is missing or they are not each other's peer, and setting MAC and MTU
// where they differ.
func ensureVpcGatewayVeth(node, gw *handle, g VpcGateway, c *changes) (link netlink.Link, created bool, err error) {
	hostName := VpcGatewayNodeLink(g.Vpc)
	link, err = gw.LinkByName(VpcGatewayInterface)
	if err != nil && !errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil, false, fmt.Errorf("finding %s: %w", VpcGatewayInterface, err)
	}
	host, hostErr := node.LinkByName(hostName)
	if hostErr != nil && !errors.As(hostErr, new(netlink.LinkNotFoundError)) {
		return nil, false, fmt.Errorf("finding %s: %w", hostName, hostErr)
	}
	_, vethIn := link.(*netlink.Veth)
	_, vethOut := host.(*netlink.Veth)
	// A veth reports its peer's index as its link (IFLA_LINK).
	if link == nil || host == nil || !vethIn || !vethOut || link.Attrs().ParentIndex != host.Attrs().Index {
		if link != nil || host != nil {
			// Half of an interrupted attach, or someone else's device under our name.
			if err := errors.Join(removeLink(gw, VpcGatewayInterface), removeLink(node, hostName)); err != nil {
				return nil, false, err
			}
			c.add("removed the malformed veth %s/%s", hostName, VpcGatewayInterface)
		}
		veth := &netlink.Veth{
			LinkAttrs:        netlink.LinkAttrs{Name: hostName, MTU: g.MTU},
			PeerName:         VpcGatewayInterface,
			PeerHardwareAddr: g.MAC,
			PeerMTU:          uint32(g.MTU), //nolint:gosec // validate bounds MTU
			PeerNamespace:    netlink.NsFd(gw.ns),
		}
		if err := node.LinkAdd(veth); err != nil {
			return nil, false, fmt.Errorf("creating the veth %s/%s: %w", hostName, VpcGatewayInterface, err)
		}
		c.add("created the veth %s/%s into %s", hostName, VpcGatewayInterface, g.NetnsPath())
		created = true
		if link, err = gw.LinkByName(VpcGatewayInterface); err != nil {
			return nil, false, fmt.Errorf("finding %s: %w", VpcGatewayInterface, err)
		}
	}
	ends := vethEnds{inner: gw, innerName: VpcGatewayInterface, node: node, bridgePort: hostName}
	if err := ensureMACAndMTU(ends, link, g.MAC, g.MTU, c); err != nil {
		return nil, false, err
	}
	return link, created, nil
}

// ensureVpcRoutes leaves on the gateway's interface exactly the routes to the VPC's subnets
// via its router: a route via a next hop there to anything else is a subnet the VPC no longer
// has. The link's connected route (no next hop) is the kernel's and stays.
func ensureVpcRoutes(gw *handle, index int, g VpcGateway, c *changes) error {
	routes, err := gw.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: index, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("listing the routes of %s: %w", VpcGatewayInterface, err)
	}
	want := map[netip.Prefix]bool{}
	for _, s := range g.Subnets {
		want[s.Masked()] = true
	}
	have := map[netip.Prefix]bool{}
	for _, r := range routes {
		if r.Gw == nil || r.Dst == nil {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		dst, ok := netip.AddrFromSlice(r.Dst.IP.To4())
		via, viaOK := netip.AddrFromSlice(r.Gw.To4())
		p := netip.PrefixFrom(dst, ones)
		if ok && viaOK && want[p] && via == g.Via {
			have[p] = true
			continue
		}
		if err := gw.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("removing the route to %s via %s: %w", r.Dst, r.Gw, err)
		}
		c.add("removed the route to %s via %s", r.Dst, r.Gw)
	}
	for _, s := range slices.SortedFunc(maps.Keys(want), comparePrefixes) {
		if have[s] {
			continue
		}
		route := &netlink.Route{LinkIndex: index, Dst: ipNet(s), Gw: net.IP(g.Via.AsSlice())}
		if err := gw.RouteReplace(route); err != nil {
			return fmt.Errorf("routing %s via %s on %s: %w", s, g.Via, VpcGatewayInterface, err)
		}
		c.add("routed %s via %s", s, g.Via)
	}
	return nil
}

func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// DetachVpcGateway removes the VPC's gateway from the node: its OVS port, the veth and the
// namespace (dir "" is DefaultNetnsDir). Detaching what is not there does nothing.
func DetachVpcGateway(ctx context.Context, n Node, dir, vpc string) error {
	if err := validVpcName(vpc); err != nil {
		return fmt.Errorf("detaching a VPC gateway: %w", err)
	}
	hostName := VpcGatewayNodeLink(vpc)
	// Every step is tried whatever the others do: a database out of reach must not keep the
	// namespace (which DetachVpcGateway is the only one to remove).
	_, portErr := vsctlOutputWithin(ctx, n.OVSDB, gatewayVsctlTimeout, "--no-wait", "--if-exists", "del-port", n.Bridge, hostName)
	var linkErr error
	if node, err := handleAt(n.Netns); err != nil {
		linkErr = err
	} else {
		// Deleting the node end deletes the pair (and the node's route to the external
		// address with the outside one).
		linkErr = errors.Join(removeLink(node, hostName), removeLink(node, VpcGatewayOutsideNodeLink(vpc)))
		node.close()
	}
	return errors.Join(portErr, linkErr, removeNetns(vpcNetnsPath(dir, vpc)))
}

// VpcGatewaysOnNode lists the VPCs that have a gateway namespace in dir ("" is
// DefaultNetnsDir) or an OVS port of ours on the node's bridge, sorted: what DetachVpcGateway
// may have to remove.
func VpcGatewaysOnNode(ctx context.Context, n Node, dir string) ([]string, error) {
	if dir == "" {
		dir = DefaultNetnsDir
	}
	found := map[string]bool{}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("listing the network namespaces in %s: %w", dir, err)
	}
	for _, e := range entries {
		if vpc, ok := strings.CutPrefix(e.Name(), VpcGatewayNetnsPrefix); ok && validVpcName(vpc) == nil {
			found[vpc] = true
		}
	}
	out, err := vsctlOutputWithin(ctx, n.OVSDB, gatewayVsctlTimeout, "--format=json", "--columns=external_ids", "list", "Interface")
	if err != nil {
		return nil, err
	}
	vpcs, err := parseExternalIDs(out, externalIDVpcGateway)
	if err != nil {
		return nil, err
	}
	for _, vpc := range vpcs {
		if validVpcName(vpc) == nil {
			found[vpc] = true
		}
	}
	names := make([]string, 0, len(found))
	for vpc := range found {
		names = append(names, vpc)
	}
	slices.Sort(names)
	return names, nil
}
