// Package tunnel is the desired state of a gateway's tunnels and the driver interface the
// gateway programs against. It imports no Kubernetes client (docs/architecture.md §2):
// controllers translate API objects into a Config, and a Driver makes the kernel match it.
package tunnel

import (
	"fmt"
	"slices"
	"strings"

	"github.com/octopus-mcs/octopus/internal/tunnel/spec"
	"github.com/octopus-mcs/octopus/internal/tunnel/vxlan"
	"github.com/octopus-mcs/octopus/internal/tunnel/wireguard"
)

// The types live in package spec so that the drivers can implement them without importing
// this package (which imports the drivers for New).
type (
	// Peer is one remote cluster's gateway.
	Peer = spec.Peer
	// Config is the whole desired state of one driver.
	Config = spec.Config
	// PeerStats is what a driver measured of one peer.
	PeerStats = spec.PeerStats
	// Driver owns one tunnel device in the current network namespace.
	Driver = spec.Driver
	// Options configure a driver.
	Options = spec.Options
)

// Backend names accepted by New.
const (
	BackendWireGuard = "wireguard"
	BackendVXLAN     = "vxlan"
)

// backends is the explicit registry: no init() side effects, and the error of an unknown
// backend can list exactly what exists.
var backends = map[string]func(spec.Options) (spec.Driver, error){
	BackendWireGuard: func(o spec.Options) (spec.Driver, error) { return wireguard.New(o) },
	BackendVXLAN:     func(o spec.Options) (spec.Driver, error) { return vxlan.New(o) },
}

// Backends returns the supported backend names, sorted.
func Backends() []string {
	names := make([]string, 0, len(backends))
	for n := range backends {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// New returns the driver for backend ("wireguard" | "vxlan"). It creates nothing in the kernel
// that Close would not remove.
func New(backend string, opts Options) (Driver, error) {
	newDriver, ok := backends[backend]
	if !ok {
		return nil, fmt.Errorf("unknown tunnel backend %q: choose one of %s", backend, strings.Join(Backends(), ", "))
	}
	if opts.Device == "" {
		return nil, fmt.Errorf("tunnel backend %s: a device name is required", backend)
	}
	d, err := newDriver(opts)
	if err != nil {
		return nil, fmt.Errorf("creating the %s tunnel driver on %s: %w", backend, opts.Device, err)
	}
	return d, nil
}
