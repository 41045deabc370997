// Package vxlan is the unencrypted tunnel driver, for underlays that are trusted (one data
// centre, a private link). One vxlan device per gateway (fixed VNI, dstport = ListenPort,
// local = LocalAddr, no learning) reaches every peer through static entries:
//
// Inner addressing: there is none of our own. Each gateway's device MAC is derived from its
// underlay address (MACFor: 02:6f + the IPv4 address, or + 4 bytes of a hash for IPv6). A peer
// subnet is routed "via <peer underlay address> dev <device> onlink"; the device's neighbour
// entry maps that address to the peer's derived MAC, and its FDB entry maps the MAC to the
// peer's underlay address as VXLAN destination. Neighbour tables are per device, so the entry
// does not disturb the underlay's own neighbour of the same address, and no address range has
// to be reserved and kept free of collisions. Both ends derive the same MACs from the
// addresses the gateways already exchange, so nothing new crosses the API.
//
// Byte counters: the kernel keeps none per VXLAN destination, so the driver's nftables table
// counts the underlay UDP packets to and from each peer (encapsulation included).
package vxlan

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/route"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/kernel"
)

// Name is what the driver reports.
const Name = "vxlan"

// Driver is the vxlan tunnel driver.
type Driver struct {
	log    logr.Logger
	device string
	nft    *kernel.NFT
	routes *route.Table

	mu      sync.Mutex
	closed  bool
	applied tunnel.Config
}

var _ tunnel.Driver = (*Driver)(nil)

// New prepares the driver; the device is created by the first Apply (it needs LocalAddr).
func New(opts tunnel.Options) (*Driver, error) {
	if opts.Device == "" {
		return nil, errors.New("a device name is required")
	}
	if err := kernel.ClaimLinkName(opts.Device); err != nil {
		return nil, err
	}
	nft, err := kernel.NewNFT(opts.Device)
	if err != nil {
		return nil, err
	}
	log := opts.Log.WithValues("device", opts.Device)
	routes, err := kernel.NewRouteTable(opts.Device, log)
	if err != nil {
		return nil, err
	}
	return &Driver{log: log, device: opts.Device, nft: nft, routes: routes}, nil
}

// Name is "vxlan".
func (d *Driver) Name() string { return Name }

// PublicKey is "": vxlan has no keys.
func (d *Driver) PublicKey() string { return "" }

// MACFor derives the tunnel MAC of the gateway with underlay address a.
func MACFor(a netip.Addr) net.HardwareAddr {
	a = a.Unmap()
	var tail []byte
	if a.Is4() {
		b := a.As4()
		tail = b[:]
	} else {
		sum := sha256.Sum256(a.AsSlice())
		tail = sum[:4]
	}
	return append(net.HardwareAddr(owner.VXLANMACPrefix), tail...)
}

// Apply creates or adjusts the device and makes its FDB, neighbours, routes, MSS clamp and
// counters match cfg; see tunnel.Driver.
func (d *Driver) Apply(ctx context.Context, cfg tunnel.Config) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("the vxlan driver is closed: create a new one")
	}
	routes, endpoints, err := validate(cfg)
	if err != nil {
		return err
	}
	mtu, err := kernel.MTU(cfg.MTU, kernel.UnderlayMTU(cfg.LocalAddr, endpoints), kernel.VXLANOverhead)
	if err != nil {
		return err
	}
	link, err := d.ensureLink(cfg, mtu)
	if err != nil {
		return err
	}
	var errs []error
	if err := syncNeighbours(link.Attrs().Index, cfg.LocalAddr.Is6(), endpoints); err != nil {
		errs = append(errs, err)
	}
	if err := d.routes.Apply(routes); err != nil {
		errs = append(errs, err)
	}
	counted := make([]kernel.Counted, 0, len(cfg.Peers))
	for _, p := range cfg.Peers {
		counted = append(counted, kernel.Counted{Cluster: p.Cluster, Remote: p.Endpoint.Addr(), RemotePort: cfg.ListenPort, LocalPort: cfg.ListenPort})
	}
	if err := d.nft.Sync(ctx, mtu, counted); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	d.applied = cfg
	return nil
}

// ensureLink returns our vxlan link with cfg's parameters, recreating it when an immutable one
// (VNI, port, local address) changed.
func (d *Driver) ensureLink(cfg tunnel.Config, mtu int) (netlink.Link, error) {
	mac := MACFor(cfg.LocalAddr)
	link, err := netlink.LinkByName(d.device)
	if err == nil {
		vx, ok := link.(*netlink.Vxlan)
		switch {
		case link.Attrs().Alias != owner.TunnelLinkAlias:
			return nil, fmt.Errorf("link %s exists and is not ours: choose another tunnel device name", d.device)
		case !ok || vx.VxlanId != owner.VXLANVNI || vx.Port != int(cfg.ListenPort) || !vx.SrcAddr.Equal(cfg.LocalAddr.AsSlice()) || vx.Learning:
			d.log.Info("Recreating the vxlan device: its VNI, port or local address changed", "port", cfg.ListenPort, "local", cfg.LocalAddr)
			if err := netlink.LinkDel(link); err != nil {
				return nil, fmt.Errorf("deleting vxlan device %s to recreate it: %w", d.device, err)
			}
			link = nil
		}
	} else {
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			return nil, fmt.Errorf("looking up %s: %w", d.device, err)
		}
		link = nil
	}
	if link == nil {
		vx := &netlink.Vxlan{
			LinkAttrs: netlink.LinkAttrs{Name: d.device, MTU: mtu, HardwareAddr: mac},
			VxlanId:   owner.VXLANVNI,
			SrcAddr:   cfg.LocalAddr.AsSlice(),
			Port:      int(cfg.ListenPort),
			Learning:  false, // every entry is static: learning would let any sender add one
		}
		if err := netlink.LinkAdd(vx); err != nil {
			return nil, fmt.Errorf("creating vxlan device %s (VNI %d, port %d, local %s): %w", d.device, owner.VXLANVNI, cfg.ListenPort, cfg.LocalAddr, err)
		}
		if link, err = netlink.LinkByName(d.device); err != nil {
			return nil, fmt.Errorf("looking up the new vxlan device %s: %w", d.device, err)
		}
		if err := netlink.LinkSetAlias(link, owner.TunnelLinkAlias); err != nil {
			_ = netlink.LinkDel(link)
			return nil, fmt.Errorf("marking vxlan device %s as ours: %w", d.device, err)
		}
		d.log.Info("Created the vxlan device", "vni", owner.VXLANVNI, "port", cfg.ListenPort, "local", cfg.LocalAddr, "mtu", mtu)
	}
	if link.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(link, mtu); err != nil {
			return nil, fmt.Errorf("setting the MTU of %s to %d: %w", d.device, mtu, err)
		}
	}
	if !slices.Equal(link.Attrs().HardwareAddr, mac) {
		if err := netlink.LinkSetHardwareAddr(link, mac); err != nil {
			return nil, fmt.Errorf("setting the MAC of %s to %s: %w", d.device, mac, err)
		}
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(link); err != nil {
			return nil, fmt.Errorf("setting %s up: %w", d.device, err)
		}
	}
	return link, nil
}

// syncNeighbours makes the device's FDB and neighbour entries exactly one pair per peer.
// Everything on our own device is ours, so stale entries are deleted without further marks.
func syncNeighbours(linkIndex int, ipv6 bool, peers []netip.Addr) error {
	family := netlink.FAMILY_V4
	if ipv6 {
		family = netlink.FAMILY_V6
	}
	want := map[netip.Addr]bool{}
	for _, p := range peers {
		want[p] = true
	}
	var errs []error
	fdb, err := netlink.NeighList(linkIndex, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("listing the FDB of our vxlan device: %w", err)
	}
	for _, n := range fdb {
		ip, _ := netip.AddrFromSlice(n.IP)
		if !want[ip.Unmap()] {
			if err := netlink.NeighDel(&n); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("deleting FDB entry %s → %s: %w", n.HardwareAddr, n.IP, err))
			}
		}
	}
	neighs, err := netlink.NeighList(linkIndex, family)
	if err != nil {
		return fmt.Errorf("listing the neighbours of our vxlan device: %w", err)
	}
	for _, n := range neighs {
		ip, _ := netip.AddrFromSlice(n.IP)
		if !want[ip.Unmap()] {
			if err := netlink.NeighDel(&n); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("deleting neighbour %s: %w", n.IP, err))
			}
		}
	}
	for _, p := range peers {
		mac := MACFor(p)
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: linkIndex, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT,
			Flags: netlink.NTF_SELF, IP: p.AsSlice(), HardwareAddr: mac}); err != nil {
			errs = append(errs, fmt.Errorf("adding FDB entry %s → %s: %w", mac, p, err))
		}
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: linkIndex, Family: family, State: netlink.NUD_PERMANENT,
			IP: p.AsSlice(), HardwareAddr: mac}); err != nil {
			errs = append(errs, fmt.Errorf("adding neighbour %s → %s: %w", p, mac, err))
		}
	}
	return errors.Join(errs...)
}

// Stats reports the underlay bytes counted to and from each peer of the last applied Config.
func (d *Driver) Stats() ([]tunnel.PeerStats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("the vxlan driver is closed")
	}
	counters, err := d.nft.Counters(context.Background())
	if err != nil {
		return nil, err
	}
	out := make([]tunnel.PeerStats, 0, len(d.applied.Peers))
	for _, p := range d.applied.Peers {
		rx, tx := kernel.CounterNames(p.Cluster)
		out = append(out, tunnel.PeerStats{Cluster: p.Cluster, RxBytes: counters[rx], TxBytes: counters[tx]})
	}
	return out, nil
}

// Close deletes the device (the kernel drops its routes, FDB and neighbours with it) and our
// nftables table.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.routes.Close()
	return errors.Join(kernel.DeleteLink(d.device), d.nft.Delete(context.Background()))
}

// Validate tells whether Apply would accept cfg. The gateway's tests use it to prove that no
// list of Peers makes the whole configuration fail.
func Validate(cfg tunnel.Config) error {
	_, _, err := validate(cfg)
	return err
}

// validate checks cfg and returns the routes (peer subnet → the peer's underlay address) and
// the peers' underlay addresses.
func validate(cfg tunnel.Config) ([]route.Route, []netip.Addr, error) {
	if cfg.ListenPort == 0 {
		return nil, nil, errors.New("the tunnel listen port is 0: set Config.ListenPort")
	}
	if !cfg.LocalAddr.IsValid() {
		return nil, nil, errors.New("vxlan needs this gateway's underlay address: set Config.LocalAddr")
	}
	local := cfg.LocalAddr.Unmap()
	var routes []route.Route
	seenSubnet := map[netip.Prefix]bool{}
	seenCluster := map[string]bool{}
	seenAddr := map[netip.Addr]string{}
	var endpoints []netip.Addr
	for _, p := range cfg.Peers {
		if seenCluster[p.Cluster] {
			return nil, nil, fmt.Errorf("peer %s appears twice in the tunnel configuration", p.Cluster)
		}
		seenCluster[p.Cluster] = true
		ep := p.Endpoint.Addr().Unmap()
		switch {
		case !p.Endpoint.IsValid():
			return nil, nil, fmt.Errorf("peer %s: endpoint %s is not an address and port", p.Cluster, p.Endpoint)
		case ep.Is4() != local.Is4():
			return nil, nil, fmt.Errorf("peer %s: endpoint %s and local address %s are of different IP families", p.Cluster, ep, local)
		case p.Endpoint.Port() != cfg.ListenPort:
			// One vxlan device has one destination port (the netlink library cannot set a
			// per-FDB-entry port), so all gateways must listen on the same one.
			return nil, nil, fmt.Errorf("peer %s listens on port %d, this gateway on %d: vxlan needs the same tunnel port on every cluster", p.Cluster, p.Endpoint.Port(), cfg.ListenPort)
		}
		if o, ok := seenAddr[ep]; ok {
			return nil, nil, fmt.Errorf("peers %s and %s share the endpoint address %s", o, p.Cluster, ep)
		}
		seenAddr[ep] = p.Cluster
		endpoints = append(endpoints, ep)
		for _, s := range p.Subnets {
			if !s.IsValid() || s.Addr().Is4() != ep.Is4() {
				return nil, nil, fmt.Errorf("peer %s: subnet %s is invalid or not of its endpoint's IP family", p.Cluster, s)
			}
			s = s.Masked()
			if seenSubnet[s] {
				return nil, nil, fmt.Errorf("subnet %s is claimed by two peers", s)
			}
			seenSubnet[s] = true
			routes = append(routes, route.Route{Dst: s, Via: ep})
		}
	}
	return routes, endpoints, nil
}
