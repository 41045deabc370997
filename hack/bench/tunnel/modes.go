package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// mode is one way of connecting the two gateways, or one address family measured through
// another mode's connection.
type mode struct {
	key    string
	label  string
	letter byte // in device names
	// connect makes pod 1 and pod 2 reach each other through the gateways of s.
	connect func(ctx context.Context, s *setup) error
	// v6Of is, for a mode that measures IPv6, the mode whose tunnel carries it: that mode's
	// setup is then built dual-stack and shared by both, so IPv4 and IPv6 cross the same
	// gateway processes and device in every round (issue 35). "" for a mode of its own.
	v6Of string
}

var modes = []mode{
	{"veth", "(a) veth routing, no tunnel", 'a', vethRouting, ""},
	{"debian-wg", "(b) Debian wireguard-go program + wg", 'b', debianWireGuard, ""},
	{"lib-wg", "(c) bare wireguard-go library pair", 'c', helperTunnel("lib-wg"), ""},
	{"wireguard", "(d) Octopus wireguard driver", 'd', helperTunnel("wireguard"), ""},
	{"vxlan", "(e) Octopus vxlan driver", 'e', helperTunnel("vxlan"), ""},
	{"globalnet", "(f) Octopus wireguard driver + globalnet NAT", 'f', helperTunnel("globalnet"), ""},
	// No vxlan-v6: over an IPv4 underlay the vxlan driver carries IPv4 only. It routes a
	// subnet via the peer's endpoint address, which must be of the subnet's family (its
	// validate refuses the rest; the gateway withholds them, internal/gateway/desired.go).
	{"wireguard-v6", "(g) IPv6 in (d)'s tunnel, made dual-stack", 'g', nil, "wireguard"},
}

// setupKey is the mode whose connect builds the topology m is measured on.
func (m mode) setupKey() string {
	if m.v6Of != "" {
		return m.v6Of
	}
	return m.key
}

// target is the address pod 1 reaches pod 2 at in mode m: in an IPv6 mode pod 2's IPv6
// address; in the globalnet mode, pod 2's global address, which both gateways translate
// (docs/architecture.md §6h).
func target(m mode, pod2 gateway) netip.Addr {
	switch {
	case m.v6Of != "":
		return pod2.podAddr6
	case m.key == "globalnet":
		return pod2.globalPod
	}
	return pod2.podAddr
}

func modeKeys() []string {
	keys := make([]string, len(modes))
	for i, m := range modes {
		keys[i] = m.key
	}
	return keys
}

// defaultModeKeys are the modes measured without -modes: all but the IPv6 ones, which would
// make (d)'s tunnel dual-stack and its pods' MTU the tunnel's, so that a default run measures
// what it always has.
func defaultModeKeys() []string {
	var keys []string
	for _, m := range modes {
		if m.v6Of == "" {
			keys = append(keys, m.key)
		}
	}
	return keys
}

func modeByKey(key string) mode {
	for _, m := range modes {
		if m.key == key {
			return m
		}
	}
	panic("unknown mode " + key) // complete() validated the keys
}

// setupPlan is one topology to build: the mode whose connect builds it, and whether a selected
// mode measures IPv6 through it.
type setupPlan struct {
	key       string
	dualStack bool
}

// planSetups returns the topologies the selected modes need, in the order first needed: one
// per mode, except that an IPv6 mode shares the setup of the mode whose tunnel it measures.
func planSetups(keys []string) []setupPlan {
	var plans []setupPlan
	index := map[string]int{}
	for _, k := range keys {
		m := modeByKey(k)
		i, ok := index[m.setupKey()]
		if !ok {
			i = len(plans)
			index[m.setupKey()] = i
			plans = append(plans, setupPlan{key: m.setupKey()})
		}
		if m.v6Of != "" {
			plans[i].dualStack = true
		}
	}
	return plans
}

// vethRouting routes each pod subnet via the other gateway's underlay address.
func vethRouting(ctx context.Context, s *setup) error {
	for i, g := range s.topo.gws {
		peer := s.topo.gws[1-i]
		if err := ip(ctx, "-n", g.ns, "route", "add", peer.podNet.String(), "via", peer.underlay.String()); err != nil {
			return err
		}
	}
	return nil
}

// debianWireGuard runs Debian's wireguard-go program in each gateway namespace and configures
// it with wg through its UAPI socket (/var/run/wireguard/<device>.sock, machine-wide: hence
// the machine-unique device names).
func debianWireGuard(ctx context.Context, s *setup) error {
	var priv, pub [2][]byte
	for i, g := range s.topo.gws {
		var err error
		if priv[i], pub[i], err = newKeyPair(); err != nil {
			return err
		}
		p, err := start(g.ns, "wireguard-go "+g.dev, []string{"wireguard-go", "-f", g.dev}, withEnv("WG_PROCESS_FOREGROUND=1"))
		if err != nil {
			return err
		}
		s.addGateway(p)
		if err := waitFor(p, 10*time.Second, func() bool {
			_, err := os.Stat(filepath.Join("/var/run/wireguard", g.dev+".sock"))
			return err == nil
		}); err != nil {
			return fmt.Errorf("waiting for the UAPI socket of %s: %w", g.dev, err)
		}
	}
	for i, g := range s.topo.gws {
		peer := s.topo.gws[1-i]
		wg := exec.CommandContext(ctx, "ip", "netns", "exec", g.ns, "wg", "set", g.dev,
			"private-key", "/dev/stdin", "listen-port", strconv.Itoa(tunnelPort),
			"peer", base64.StdEncoding.EncodeToString(pub[1-i]),
			"endpoint", netip.AddrPortFrom(peer.underlay, tunnelPort).String(),
			"allowed-ips", peer.podNet.String(), "persistent-keepalive", "25")
		wg.Stdin = strings.NewReader(base64.StdEncoding.EncodeToString(priv[i]) + "\n")
		if out, err := wg.CombinedOutput(); err != nil {
			return fmt.Errorf("wg set %s: %w: %s", g.dev, err, out)
		}
		if err := upAndRoute(ctx, g, peer); err != nil {
			return err
		}
	}
	return nil
}

// upAndRoute does for the baselines what our driver does itself: MTU, link up, route.
func upAndRoute(ctx context.Context, g, peer gateway) error {
	if err := ip(ctx, "-n", g.ns, "link", "set", g.dev, "mtu", strconv.Itoa(tunnelMTU), "up"); err != nil {
		return err
	}
	return ip(ctx, "-n", g.ns, "route", "add", peer.podNet.String(), "dev", g.dev)
}

// helperTunnel runs this program as the gateway in each gateway namespace (helper.go) and
// exchanges the keys and endpoints between the two.
func helperTunnel(kind string) func(context.Context, *setup) error {
	return func(ctx context.Context, s *setup) error {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		var procs [2]*process
		var outs [2]*bufio.Scanner
		var keys [2]string
		for i, g := range s.topo.gws {
			argv := []string{exe, helperCommand, kind, g.dev, g.underlay.String()}
			if kind == "globalnet" {
				argv = append(argv, g.global.String(), g.globalPod.String(), g.podAddr.String())
			}
			p, err := start(g.ns, kind+" "+g.dev, argv, withStdin, withStdout)
			if err != nil {
				return err
			}
			s.addGateway(p)
			procs[i], outs[i] = p, bufio.NewScanner(p.stdout)
			if keys[i], err = expectLine(p, outs[i], "key "); err != nil {
				return err
			}
		}
		for i, g := range s.topo.gws {
			peer := s.topo.gws[1-i]
			subnets := []string{peer.podNet.String()}
			switch {
			case kind == "globalnet":
				subnets = []string{peer.global.String()} // the Peer of a globalnet cluster advertises its global CIDR
			case s.dualStack:
				// Both families' CIDRs in one Peer, as the gateway passes a dual-stack
				// cluster's subnets (gateway.Compute: one tunnel.Peer, Subnets sorted, IPv4 first).
				subnets = append(subnets, peer.podNet6.String())
			}
			if _, err := fmt.Fprintf(procs[i].stdin, "peer %s %s %s\n",
				keys[1-i], netip.AddrPortFrom(peer.underlay, tunnelPort), strings.Join(subnets, ",")); err != nil {
				return fmt.Errorf("configuring %s: %w", procs[i].name, err)
			}
			if _, err := expectLine(procs[i], outs[i], "ready"); err != nil {
				return err
			}
			if kind == "lib-wg" {
				if err := upAndRoute(ctx, g, peer); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// expectLine reads the helper's next line, which must start with prefix, and returns the rest.
func expectLine(p *process, sc *bufio.Scanner, prefix string) (string, error) {
	if !sc.Scan() {
		<-p.done
		return "", fmt.Errorf("%s: expected %q: %w", p.name, prefix, p.exited())
	}
	rest, ok := strings.CutPrefix(sc.Text(), prefix)
	if !ok {
		return "", fmt.Errorf("%s: expected %q, got %q", p.name, prefix, sc.Text())
	}
	return rest, nil
}

// waitFor polls cond every 50 ms until it holds, p exits, or timeout passes.
func waitFor(p *process, timeout time.Duration, cond func() bool) error {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return nil
		}
		if p != nil {
			if err := p.exited(); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("not done within %s", timeout)
}
