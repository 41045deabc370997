// Package drivers picks a tunnel driver by its backend name. It is the one place that knows
// every driver; the drivers implement package tunnel's types and import nothing of each
// other.
package drivers

import (
	"fmt"
	"slices"
	"strings"

	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/vxlan"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/wireguard"
)

// Backend names accepted by New.
const (
	WireGuard = "wireguard"
	VXLAN     = "vxlan"
)

// registry is explicit: no init() side effects, and the error of an unknown backend can list
// exactly what exists.
var registry = map[string]func(tunnel.Options) (tunnel.Driver, error){
	WireGuard: func(o tunnel.Options) (tunnel.Driver, error) { return wireguard.New(o) },
	VXLAN:     func(o tunnel.Options) (tunnel.Driver, error) { return vxlan.New(o) },
}

// Names returns the supported backend names, sorted.
func Names() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// New returns the driver for backend ("wireguard" | "vxlan"). It creates nothing in the kernel
// that Close would not remove.
func New(backend string, opts tunnel.Options) (tunnel.Driver, error) {
	newDriver, ok := registry[backend]
	if !ok {
		return nil, fmt.Errorf("unknown tunnel backend %q: choose one of %s", backend, strings.Join(Names(), ", "))
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
