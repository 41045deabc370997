// Package icconfig is the interface OVN users know for interconnection: Kube-OVN's
// `ovn-ic-config` ConfigMap (kube-system), key for key. Parse reads such a ConfigMap's data into
// a Config, Data writes one back; the chart's values, join's flags and the icmaster all speak
// Config, so a Kube-OVN user's file means the same thing everywhere (docs/secondary-network.md,
// "Interconnection", has the table). It also derives the one thing Kube-OVN leaves to its own
// IPAM: each AZ's address on the transit switch.
//
// Pure logic, no Kubernetes client and no OVN library: join links it.
package icconfig

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The ConfigMap Kube-OVN reads, and its keys.
const (
	ConfigMapName      = "ovn-ic-config"
	ConfigMapNamespace = "kube-system"

	KeyEnable       = "enable-ic"
	KeyAZName       = "az-name"
	KeyDBHost       = "ic-db-host"
	KeyNBPort       = "ic-nb-port"
	KeySBPort       = "ic-sb-port"
	KeyGatewayNodes = "gw-nodes"
	KeyAutoRoute    = "auto-route"
)

// StatusAnnotation is, on the ConfigMap, what the icmaster last made of it: "Applied: ...", the
// reason it could not, or LeftStatus once the AZ left. Here, not in the icmaster, because
// `octopus leave` (which links no OVN library) waits on it.
const StatusAnnotation = "octopus.io/interconnection-status"

// LeftStatus ends the status once AZ az has left the interconnection: out of its NB and out
// of the IC SB, with every route the others learned from it.
func LeftStatus(az string) string { return "AZ " + az + " left the interconnection" }

// Kube-OVN's default ports of the IC NB and IC SB databases.
const (
	DefaultNBPort = 6645
	DefaultSBPort = 6646
)

// TransitSwitch is the transit switch every AZ joins, made in the IC NB at deploy; "ts" is
// Kube-OVN's name for it, so `ovn-ic-nbctl show` reads the same to its users.
const TransitSwitch = "ts"

// TransitNetwork is the transit switch's subnet (Kube-OVN's default): each AZ's router has one
// address in it (TransitAddress), the next hop the other AZs learn for its routes.
var TransitNetwork = netip.MustParsePrefix("169.254.100.0/24")

// Config is one cluster's interconnection configuration.
type Config struct {
	// Enabled is enable-ic: "true" makes the cluster an AZ; anything else leaves it out.
	Enabled bool
	// AZName is az-name; Parse's caller checks it against the cluster ID (AZs are named
	// after their cluster). Empty: the cluster ID.
	AZName string
	// DBHosts are ic-db-host's addresses (a comma list: the raft members of IC NB and IC SB).
	DBHosts []string
	// NBPort and SBPort are ic-nb-port and ic-sb-port.
	NBPort, SBPort int
	// GatewayNodes are gw-nodes, the nodes that may carry the transit port, highest priority
	// first (active-backup).
	GatewayNodes []string
	// AutoRoute is auto-route: advertise this AZ's subnets and learn the others'. Kube-OVN
	// reads only "true" as true, so an absent key is false; the chart writes it explicitly.
	AutoRoute bool
}

// Parse reads an ovn-ic-config ConfigMap's data. Unknown keys are refused, not ignored: a
// misspelt key would otherwise silently leave its default in force.
func Parse(data map[string]string) (Config, error) {
	c := Config{NBPort: DefaultNBPort, SBPort: DefaultSBPort}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, k := range slices.Sorted(maps.Keys(data)) {
		v := strings.TrimSpace(data[k])
		switch k {
		case KeyEnable:
			c.Enabled = v == "true"
		case KeyAZName:
			c.AZName = v
		case KeyDBHost:
			c.DBHosts = list(v)
		case KeyNBPort, KeySBPort:
			p, err := strconv.Atoi(v)
			if err != nil || p < 1 || p > 65535 {
				bad("%s %q: a port number (1-65535) is required", k, v)
				continue
			}
			if k == KeyNBPort {
				c.NBPort = p
			} else {
				c.SBPort = p
			}
		case KeyGatewayNodes:
			c.GatewayNodes = list(v)
		case KeyAutoRoute:
			c.AutoRoute = v == "true"
		default:
			bad("unknown key %q (known: %s)", k, strings.Join(knownKeys, ", "))
		}
	}
	if c.Enabled && len(c.DBHosts) == 0 {
		bad("%s: required with %s=true (the IC databases' addresses, a comma list for a raft cluster)", KeyDBHost, KeyEnable)
	}
	for _, h := range c.DBHosts {
		if strings.ContainsAny(h, ":/ ") {
			bad("%s %q: a host name or IPv4 address without port (the ports are %s and %s)", KeyDBHost, h, KeyNBPort, KeySBPort)
		}
	}
	if dup := duplicate(c.GatewayNodes); dup != "" {
		bad("%s: node %q listed twice", KeyGatewayNodes, dup)
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("%s: %w", ConfigMapName, err)
	}
	return c, nil
}

var knownKeys = []string{KeyEnable, KeyAZName, KeyDBHost, KeyNBPort, KeySBPort, KeyGatewayNodes, KeyAutoRoute}

// Data is c as an ovn-ic-config ConfigMap's data; Parse(c.Data()) is c.
func (c Config) Data() map[string]string {
	d := map[string]string{
		KeyEnable:    strconv.FormatBool(c.Enabled),
		KeyDBHost:    strings.Join(c.DBHosts, ","),
		KeyNBPort:    strconv.Itoa(c.NBPort),
		KeySBPort:    strconv.Itoa(c.SBPort),
		KeyAutoRoute: strconv.FormatBool(c.AutoRoute),
	}
	if c.AZName != "" {
		d[KeyAZName] = c.AZName
	}
	if len(c.GatewayNodes) > 0 {
		d[KeyGatewayNodes] = strings.Join(c.GatewayNodes, ",")
	}
	return d
}

// CheckAZName refuses an az-name other than the cluster's ID: the AZ is the cluster, and
// renaming an AZ would orphan what ovn-ic registered under the old name.
func (c Config) CheckAZName(clusterID string) error {
	if c.AZName != "" && c.AZName != clusterID {
		return fmt.Errorf("%s: %s %q differs from the cluster ID %q; AZs are named after their cluster (leave it out or set it to %q)",
			ConfigMapName, KeyAZName, c.AZName, clusterID, clusterID)
	}
	return nil
}

// ICNB is the IC NB database's endpoint in OVSDB's syntax, "ssl:host:port", comma separated
// for a raft cluster: what ovn-ic's --ic-nb-db takes. Always ssl: the hub's IC databases
// serve TLS only, to clients with a certificate of the hub's IC CA (the cluster's, issued at
// join into the Secret the member mounts at TLSDir).
func (c Config) ICNB() string { return endpoints(c.DBHosts, c.NBPort) }

// ICSB is the IC SB database's endpoint, as ICNB: what ovn-ic's --ic-sb-db takes.
func (c Config) ICSB() string { return endpoints(c.DBHosts, c.SBPort) }

func endpoints(hosts []string, port int) string {
	eps := make([]string, len(hosts))
	for i, h := range hosts {
		eps[i] = "ssl:" + h + ":" + strconv.Itoa(port)
	}
	return strings.Join(eps, ",")
}

// TransitAddress is the AZ's router address on the transit switch, with TransitNetwork's prefix
// length. It is derived from the cluster's secondary block within the hub's pool, which the hub
// hands out without overlap: the n-th block of the pool gets TransitNetwork's (n+1)-th host, so
// two AZs never share an address and no allocator has to record it.
func TransitAddress(pool, block netip.Prefix) (netip.Prefix, error) {
	if !pool.IsValid() || !block.IsValid() || !pool.Addr().Is4() || !block.Addr().Is4() ||
		block.Bits() < pool.Bits() || !pool.Contains(block.Addr()) || block != block.Masked() {
		return netip.Prefix{}, fmt.Errorf("secondary block %s: an IPv4 block inside the pool %s is required", block, pool)
	}
	index := (u32(block.Addr()) - u32(pool.Masked().Addr())) >> (32 - block.Bits())
	hosts := uint32(1)<<(32-TransitNetwork.Bits()) - 2
	if index >= hosts {
		return netip.Prefix{}, fmt.Errorf("secondary block %s is block %d of the pool %s; the transit network %s has only %d addresses",
			block, index, pool, TransitNetwork, hosts)
	}
	a := u32(TransitNetwork.Addr()) + index + 1
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), TransitNetwork.Bits()), nil
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// list splits a comma list, dropping blanks.
func list(v string) []string {
	var out []string
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func duplicate(xs []string) string {
	seen := map[string]bool{}
	for _, x := range xs {
		if seen[x] {
			return x
		}
		seen[x] = true
	}
	return ""
}
