// Package tunnel is the desired state of a gateway's tunnels and the Driver interface that
// makes the kernel match it. It imports no Kubernetes client: controllers translate API objects
// into a Config. The drivers implement it in the packages below (wireguard, vxlan), and
// package drivers picks one by its backend name.
package tunnel

import (
	"context"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
)

// Peer is one remote cluster's gateway.
type Peer struct {
	// Cluster is the remote cluster ID, used in names, logs and Stats only.
	Cluster string
	// PublicKey is the remote gateway's base64 WireGuard public key; ignored by vxlan.
	PublicKey string
	// Endpoint is the remote gateway's underlay address and tunnel UDP port.
	Endpoint netip.AddrPort
	// Subnets are the remote CIDRs, routed into the tunnel on this gateway node.
	Subnets []netip.Prefix
}

// Config is the whole desired state of one driver; Apply may be called repeatedly with equal
// Configs, and then changes nothing.
type Config struct {
	// ListenPort is the local UDP port of the tunnel.
	ListenPort uint16
	// LocalAddr is this gateway's underlay address: vxlan needs it; wireguard uses it only to
	// find the underlay link whose MTU it derives its own from.
	LocalAddr netip.Addr
	// MTU of the tunnel device; 0 means the underlay MTU minus the driver's overhead.
	MTU int
	// Peers are the remote gateways; their Cluster IDs must be unique.
	Peers []Peer
}

// PeerStats is what a driver measured of one peer.
type PeerStats struct {
	Cluster          string
	RxBytes, TxBytes uint64
	// LastHandshake is zero for vxlan, which has no handshake.
	LastHandshake time.Time
}

// Driver owns one tunnel device in the current network namespace.
type Driver interface {
	// Name is what actually runs: "wireguard", "wireguard-go" or "vxlan".
	Name() string
	// PublicKey is the base64 WireGuard public key of this gateway; "" for vxlan.
	PublicKey() string
	// Apply makes the device, its peers, its routes and the MSS clamp match cfg. It is
	// idempotent: applying an equal Config again changes nothing in the kernel.
	Apply(ctx context.Context, cfg Config) error
	// Stats returns one entry per peer of the last applied Config, in its order.
	Stats() ([]PeerStats, error)
	// Close removes the device, its routes and its nftables table; it is safe to call twice.
	Close() error
}

// Options configure a driver.
type Options struct {
	// Device is the tunnel link name. Required, and unique per machine (wireguard-go's
	// userspace state and our nftables table are named after it).
	Device string
	// Log receives what the driver does. Optional.
	Log logr.Logger
}
