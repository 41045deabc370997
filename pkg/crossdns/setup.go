package crossdns

import (
	"fmt"
	"math"
	"strconv"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/miekg/dns"
)

// DefaultZone is the zone the MCS API fixes (specification.md §2.1: <clustersetzone> "must be
// clusterset.local").
const DefaultZone = "clusterset.local."

// DefaultTTL is the TTL of every record unless the Corefile says otherwise: short, because
// endpoints come and go and the index follows them within milliseconds.
const DefaultTTL = 5

func init() { plugin.Register(pluginName, setup) }

// Config is a parsed crossdns block.
type Config struct {
	Zone string // fully qualified, lower case
	// Reverse are the reverse zones to answer the PTR records of headless endpoints in
	// (specification.md §2.4.3), e.g. in-addr.arpa. and ip6.arpa.; none by default.
	Reverse    []string
	Kubeconfig string // "" for the in-cluster configuration
	TTL        uint32
	Fall       fall.F
}

func setup(c *caddy.Controller) error {
	cfg, err := Parse(c)
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	rc, err := RESTConfig(cfg.Kubeconfig)
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	src, err := NewKube(rc, NewIndex(cfg.Zone, cfg.TTL, cfg.Reverse...))
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	c.OnStartup(src.Start)
	c.OnShutdown(src.Stop)
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		return &Handler{Next: next, Zones: append([]string{cfg.Zone}, cfg.Reverse...), Source: src, Fall: cfg.Fall}
	})
	return nil
}

// Parse reads one crossdns block; it touches nothing outside c.
func Parse(c *caddy.Controller) (Config, error) {
	cfg := Config{Zone: DefaultZone, TTL: DefaultTTL}
	blocks := 0
	for c.Next() {
		if blocks++; blocks > 1 {
			return cfg, plugin.ErrOnce
		}
		var zones []string
		for _, arg := range c.RemainingArgs() {
			// A CIDR stands for its reverse zones, as in every CoreDNS plugin.
			for _, zone := range plugin.Host(arg).NormalizeExact() {
				switch {
				case ReverseZone(zone):
					cfg.Reverse = append(cfg.Reverse, zone)
				case dns.IsSubDomain(arpaV4, zone) || dns.IsSubDomain(arpaV6, zone):
					return cfg, c.Errf("reverse zone %s: want in-addr.arpa., ip6.arpa., whole labels below them, or a CIDR", zone)
				default:
					zones = append(zones, zone)
				}
			}
		}
		switch len(zones) {
		case 0:
		case 1:
			// The specification allows only clusterset.local today but names the zone by a
			// placeholder because "this may become configurable in the future" (§2.1).
			cfg.Zone = zones[0]
		default:
			return cfg, c.Errf("crossdns serves one zone besides reverse zones (in-addr.arpa., ip6.arpa. or whole labels below them), got %d: %v", len(zones), zones)
		}
		for c.NextBlock() {
			switch c.Val() {
			case "kubeconfig":
				args := c.RemainingArgs()
				if len(args) != 1 {
					return cfg, c.Errf("kubeconfig takes one path, got %d arguments", len(args))
				}
				cfg.Kubeconfig = args[0]
			case "ttl":
				args := c.RemainingArgs()
				if len(args) != 1 {
					return cfg, c.ArgErr()
				}
				ttl, err := strconv.ParseUint(args[0], 10, 32)
				if err != nil || ttl > math.MaxInt32 {
					// RFC 2181 §8: a TTL is at most 2^31-1.
					return cfg, c.Errf("ttl %q: want seconds from 0 to %d", args[0], math.MaxInt32)
				}
				cfg.TTL = uint32(ttl)
			case "fallthrough":
				cfg.Fall.SetZonesFromArgs(c.RemainingArgs())
			default:
				return cfg, c.Errf("unknown property %q; crossdns knows kubeconfig, ttl and fallthrough", c.Val())
			}
		}
	}
	if blocks == 0 {
		return cfg, fmt.Errorf("no crossdns block")
	}
	return cfg, nil
}
