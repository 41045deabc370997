package ovnic

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"github.com/ovn-kubernetes/libovsdb/model"

	"github.com/octopus-mcs/octopus/internal/datapath/ovnic/icsbdb"
)

// AdvertisedRoute is one route an AZ advertises in the IC SB database (what
// `ovn-ic-sbctl show` lists under each AZ): the other AZs on its transit switch learn it, with
// its next hop, unless their auto-route is off or their denylist covers it.
type AdvertisedRoute struct {
	AZ            string `json:"az"`
	TransitSwitch string `json:"transitSwitch"`
	Prefix        string `json:"prefix"`
	NextHop       string `json:"nextHop"`
	// Origin is ovn-ic's: connected (a router's own network) or static.
	Origin string `json:"origin"`
}

// ReadRoutes reads every AZ's advertised routes from the IC SB database at icsb (ssl: with
// tlsConfig, the cluster's IC certificate), sorted by AZ, transit switch and prefix, and the
// AZs registered there.
func ReadRoutes(ctx context.Context, icsb string, tlsConfig *tls.Config) ([]AdvertisedRoute, []string, error) {
	m, err := model.NewClientDBModel(icsbdb.Schema().Name, map[string]model.Model{
		icsbdb.AvailabilityZoneTable: &icsbdb.AvailabilityZone{},
		icsbdb.RouteTable:            &icsbdb.Route{},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("IC SB database model: %w", err)
	}
	c, err := connect(ctx, m, icsb, tlsConfig, logr.Discard(), "OVN IC SB", &icsbdb.AvailabilityZone{}, &icsbdb.Route{})
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	var zones []icsbdb.AvailabilityZone
	if err := c.List(ctx, &zones); err != nil {
		return nil, nil, fmt.Errorf("listing IC SB availability zones: %w", err)
	}
	var rows []icsbdb.Route
	if err := c.List(ctx, &rows); err != nil {
		return nil, nil, fmt.Errorf("listing IC SB routes: %w", err)
	}
	names := map[string]string{}
	var azs []string
	for _, z := range zones {
		names[z.UUID] = z.Name
		azs = append(azs, z.Name)
	}
	slices.Sort(azs)
	routes := make([]AdvertisedRoute, 0, len(rows))
	for _, r := range rows {
		// ovn-ic records a connected network as the router port's address (10.112.0.1/24);
		// the others' routers learn it masked, as lr-route-list shows it.
		prefix := r.IPPrefix
		if p, err := netip.ParsePrefix(prefix); err == nil {
			prefix = p.Masked().String()
		}
		routes = append(routes, AdvertisedRoute{AZ: names[r.AvailabilityZone], TransitSwitch: r.TransitSwitch,
			Prefix: prefix, NextHop: r.Nexthop, Origin: r.Origin})
	}
	slices.SortFunc(routes, func(a, b AdvertisedRoute) int {
		return cmp.Or(cmp.Compare(a.AZ, b.AZ), cmp.Compare(a.TransitSwitch, b.TransitSwitch), cmp.Compare(a.Prefix, b.Prefix))
	})
	return routes, azs, nil
}

// TransitAddresses are the AZs' router addresses on transit switch ts, by AZ name, as ovn-ic
// published them in the IC SB database (its Port_Binding rows: "<mac> <address>/<bits>"). They
// are what a manual route to another AZ names as its next hop; an AZ that has not joined, or
// whose ovn-ic has not published its port yet, is absent.
func (c *Client) TransitAddresses(ctx context.Context, ts string) (map[string]netip.Addr, error) {
	var zones []icsbdb.AvailabilityZone
	var ports []icsbdb.PortBinding
	err := c.readICSB(ctx, func(ctx context.Context) error {
		if err := c.icsb.List(ctx, &zones); err != nil {
			return fmt.Errorf("listing IC SB availability zones: %w", err)
		}
		if err := c.icsb.List(ctx, &ports); err != nil {
			return fmt.Errorf("listing IC SB port bindings: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("transit addresses on %s: %w", ts, err)
	}
	names := make(map[string]string, len(zones))
	for _, z := range zones {
		names[z.UUID] = z.Name
	}
	out := map[string]netip.Addr{}
	for _, p := range ports {
		name, ok := names[p.AvailabilityZone]
		if !ok || p.TransitSwitch != ts {
			continue
		}
		if a, ok := portBindingAddress(p.Address); ok {
			out[name] = a
		}
	}
	return out, nil
}

// portBindingAddress is the first IPv4 network of an IC SB port binding's address.
func portBindingAddress(address string) (netip.Addr, bool) {
	for _, f := range strings.Fields(address) {
		if p, err := netip.ParsePrefix(f); err == nil && p.Addr().Is4() {
			return p.Addr(), true
		}
		if a, err := netip.ParseAddr(f); err == nil && a.Is4() {
			return a, true
		}
	}
	return netip.Addr{}, false
}
