// Package wireguard is the encrypted tunnel driver. Where the kernel has no WireGuard module
// (as on the development machines) it runs the embedded userspace implementation,
// wireguard-go, on a TUN device in the current network namespace and configures it in-process
// (no UAPI socket: nothing outside the process can reconfigure it).
package wireguard

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/crypto/curve25519"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/route"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/kernel"
)

// NameUserspace is what Name reports for the embedded wireguard-go.
const NameUserspace = "wireguard-go"

// Driver is the wireguard-go tunnel driver.
type Driver struct {
	log       logr.Logger
	name      string
	devName   string
	publicKey string
	dev       *device.Device
	tun       *ownedTUN
	nft       *kernel.NFT
	routes    *route.Table

	mu      sync.Mutex
	closed  bool
	applied tunnel.Config
}

var _ tunnel.Driver = (*Driver)(nil)

// New generates a fresh key pair (the private key lives only in this process's memory, so a
// restarted gateway has a new identity; docs/architecture.md §6e) and creates the device,
// down and without peers. Apply brings it up.
func New(opts tunnel.Options) (*Driver, error) {
	if opts.Device == "" {
		return nil, errors.New("a device name is required")
	}
	var priv [32]byte
	if _, err := rand.Read(priv[:]); err != nil {
		return nil, fmt.Errorf("generating a WireGuard private key: %w", err)
	}
	// Curve25519 clamping, as `wg genkey` does.
	priv[0] &= 248
	priv[31] = (priv[31] & 127) | 64
	pub, err := curve25519.X25519(priv[:], curve25519.Basepoint)
	if err != nil {
		return nil, fmt.Errorf("deriving the WireGuard public key: %w", err)
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
	tdev, err := tun.CreateTUN(opts.Device, device.DefaultMTU)
	if err != nil {
		routes.Close()
		return nil, fmt.Errorf("creating TUN device %s (is /dev/net/tun available and are we CAP_NET_ADMIN?): %w", opts.Device, err)
	}
	link, err := netlink.LinkByName(opts.Device)
	if err == nil {
		err = netlink.LinkSetAlias(link, owner.TunnelLinkAlias)
	}
	if err != nil {
		_ = tdev.Close()
		routes.Close()
		return nil, fmt.Errorf("marking TUN device %s as ours: %w", opts.Device, err)
	}
	owned := newOwnedTUN(tdev)
	dev := device.NewDevice(owned, conn.NewDefaultBind(), &device.Logger{
		Verbosef: func(format string, args ...any) { log.V(2).Info(fmt.Sprintf(format, args...)) },
		Errorf:   func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...), "source", "wireguard-go") },
	})
	if err := dev.IpcSet("private_key=" + hex.EncodeToString(priv[:]) + "\n"); err != nil {
		dev.Close()
		routes.Close()
		return nil, fmt.Errorf("setting the private key of %s: %w", opts.Device, err)
	}
	clear(priv[:])
	return &Driver{log: log, name: NameUserspace, devName: opts.Device, tun: owned, publicKey: base64.StdEncoding.EncodeToString(pub), dev: dev, nft: nft, routes: routes}, nil
}

// Name reports what runs: "wireguard-go".
func (d *Driver) Name() string { return d.name }

// PublicKey is this gateway's base64 public key.
func (d *Driver) PublicKey() string { return d.publicKey }

// Apply configures listen port, peers, MTU, routes and MSS clamp; see tunnel.Driver.
func (d *Driver) Apply(ctx context.Context, cfg tunnel.Config) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("the wireguard driver is closed: create a new one")
	}
	routes, endpoints, err := validate(cfg)
	if err != nil {
		return err
	}
	link, err := netlink.LinkByName(d.device())
	if err != nil {
		return fmt.Errorf("looking up our device %s (deleted by someone? restart the gateway): %w", d.device(), err)
	}
	mtu, err := kernel.MTU(cfg.MTU, kernel.UnderlayMTU(cfg.LocalAddr, endpoints), kernel.WireGuardOverhead)
	if err != nil {
		return err
	}
	if link.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(link, mtu); err != nil {
			return fmt.Errorf("setting the MTU of %s to %d: %w", d.device(), mtu, err)
		}
	}
	d.tun.setMTU(mtu)
	get, err := d.dev.IpcGet()
	if err != nil {
		return fmt.Errorf("reading the state of %s: %w", d.device(), err)
	}
	current, err := parseIpcGet(get)
	if err != nil {
		return err
	}
	set, err := renderIpcSet(current, cfg.ListenPort, cfg.Peers)
	if err != nil {
		return err
	}
	if set != "" {
		if err := d.dev.IpcSet(set); err != nil {
			return fmt.Errorf("configuring %s (port %d, %d peers): %w", d.device(), cfg.ListenPort, len(cfg.Peers), err)
		}
		d.log.V(1).Info("Configured the WireGuard device", "listenPort", cfg.ListenPort, "peers", len(cfg.Peers))
	}
	// Bring wireguard-go up from this goroutine: it binds its UDP sockets now, in the caller's
	// network namespace (link events never reach it, see ownedTUN). A no-op when up.
	if err := d.dev.Up(); err != nil {
		return fmt.Errorf("starting %s: %w", d.device(), err)
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("setting %s up: %w", d.device(), err)
		}
	}
	var errs []error
	if err := d.routes.Apply(routes); err != nil {
		errs = append(errs, err)
	}
	if err := d.nft.Sync(ctx, mtu, nil); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	d.applied = cfg
	return nil
}

func (d *Driver) device() string { return d.devName }

// Stats reports the bytes and last handshake of every peer of the last applied Config.
func (d *Driver) Stats() ([]tunnel.PeerStats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("the wireguard driver is closed")
	}
	get, err := d.dev.IpcGet()
	if err != nil {
		return nil, fmt.Errorf("reading the state of %s: %w", d.device(), err)
	}
	st, err := parseIpcGet(get)
	if err != nil {
		return nil, err
	}
	out := make([]tunnel.PeerStats, 0, len(d.applied.Peers))
	for _, p := range d.applied.Peers {
		ps := tunnel.PeerStats{Cluster: p.Cluster}
		if key, err := hexKey(p.PublicKey); err == nil {
			if cur := st.peers[key]; cur != nil {
				ps.RxBytes, ps.TxBytes, ps.LastHandshake = cur.rx, cur.tx, cur.handshake
			}
		}
		out = append(out, ps)
	}
	return out, nil
}

// Close stops wireguard-go (all its goroutines have returned when Close does), which removes
// the TUN device and with it the kernel's routes through it, and deletes our nftables table.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.dev.Close()
	<-d.dev.Wait()
	d.routes.Close()
	var errs []error
	// The TUN device disappears with its file descriptor; this only catches a link that
	// someone made persistent.
	if err := kernel.DeleteLink(d.devName); err != nil {
		errs = append(errs, err)
	}
	if err := d.nft.Delete(context.Background()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Validate tells whether Apply would accept cfg: what validate checks, and that every peer's
// public key is a WireGuard key used by no other peer (renderIpcSet's checks). The gateway's
// tests use it to prove that no list of Peers makes the whole configuration fail.
func Validate(cfg tunnel.Config) error {
	if _, _, err := validate(cfg); err != nil {
		return err
	}
	_, err := renderIpcSet(deviceState{}, cfg.ListenPort, cfg.Peers)
	return err
}

// validate checks cfg and returns the routes (each peer subnet straight into the device) and
// the peers' endpoint addresses.
func validate(cfg tunnel.Config) ([]route.Route, []netip.Addr, error) {
	if cfg.ListenPort == 0 {
		return nil, nil, errors.New("the tunnel listen port is 0: set Config.ListenPort")
	}
	var routes []route.Route
	claimedBy := map[netip.Prefix]string{}
	seen := map[string]bool{}
	var endpoints []netip.Addr
	for _, p := range cfg.Peers {
		if seen[p.Cluster] {
			return nil, nil, fmt.Errorf("peer %s appears twice in the tunnel configuration", p.Cluster)
		}
		seen[p.Cluster] = true
		if !p.Endpoint.IsValid() || p.Endpoint.Port() == 0 {
			return nil, nil, fmt.Errorf("peer %s: endpoint %s is not an address and port", p.Cluster, p.Endpoint)
		}
		endpoints = append(endpoints, p.Endpoint.Addr())
		for _, s := range p.Subnets {
			if !s.IsValid() {
				return nil, nil, fmt.Errorf("peer %s: invalid subnet %s", p.Cluster, s)
			}
			s = s.Masked()
			if o, ok := claimedBy[s]; ok {
				return nil, nil, fmt.Errorf("subnet %s is claimed by peers %s and %s: WireGuard routes each subnet to one peer", s, o, p.Cluster)
			}
			claimedBy[s] = p.Cluster
			routes = append(routes, route.Route{Dst: s})
		}
	}
	return routes, endpoints, nil
}
