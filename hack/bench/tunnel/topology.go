package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// Addresses are documentation ranges only (RFC 5737, RFC 3849), inside our own namespaces: the
// underlay is 203.0.113.0/24, the two pod subnets are halves of 198.51.100.0/25 and, in a
// dual-stack setup, 2001:db8:1::/64 and 2001:db8:2::/64 (docPrefix6). 192.0.2.0/24 is avoided
// on purpose (some hosts use it for real). The underlay stays IPv4 in every mode.
const (
	tunnelPort = 51820
	// tunnelMTU is what our wireguard driver derives from the 1500-byte underlay (1500 − 80);
	// the other WireGuard modes get it too so that all carry the same packets.
	tunnelMTU  = 1420
	iperfPort  = 5201
	nsPrefix   = "otb-" // namespaces: otb-<pid>-<mode>-<role>
	devPrefix  = "otb"  // tunnel devices: otb<pid><mode letter><gateway>, machine-unique
	underlayIf = "ul"
)

// docPrefix6 is the IPv6 documentation prefix, which holds every IPv6 address we assign.
var docPrefix6 = netip.MustParsePrefix("2001:db8::/32")

// gateway is one gateway namespace with its pod namespace behind it.
type gateway struct {
	ns, podNS string
	underlay  netip.Addr   // 203.0.113.<i>
	podNet    netip.Prefix // 198.51.100.0/26, 198.51.100.64/26
	podGW     netip.Addr   // the gateway's address in podNet
	podAddr   netip.Addr   // the pod's address in podNet
	dev       string       // this mode's tunnel device name, unique on the machine
	// podNet6, podGW6 and podAddr6 are the IPv6 counterparts (2001:db8:<i+1>::/64, ::1, ::2),
	// configured in a dual-stack setup only.
	podNet6  netip.Prefix
	podGW6   netip.Addr
	podAddr6 netip.Addr
	// global is the gateway's cluster's global CIDR in the globalnet mode (242.<i>.0.0/16,
	// inside our namespaces only), and globalPod the pod's global address in it.
	global    netip.Prefix
	globalPod netip.Addr
}

// topology is two gateways joined by one veth pair (the underlay), each with a pod behind it.
// It is internal/datapath/tunnel/tunneltest's topology minus the bridge namespace (nothing here captures
// per gateway) and with documentation addresses only; tunneltest is built on testing.TB, which
// a program does not have.
type topology struct {
	gws        [2]gateway
	namespaces []string
}

// planGateways names and addresses the two gateways of mode key (letter in device names) for
// the process pid; it creates nothing.
func planGateways(pid int, key string, letter byte) [2]gateway {
	var gws [2]gateway
	for i := range gws {
		base := byte(64 * i)
		net6 := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, byte(i + 1)})
		gws[i] = gateway{
			ns:        fmt.Sprintf("%s%d-%s-gw%d", nsPrefix, pid, key, i+1),
			podNS:     fmt.Sprintf("%s%d-%s-pod%d", nsPrefix, pid, key, i+1),
			underlay:  netip.AddrFrom4([4]byte{203, 0, 113, byte(i + 1)}),
			podNet:    netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, base}), 26),
			podGW:     netip.AddrFrom4([4]byte{198, 51, 100, base + 1}),
			podAddr:   netip.AddrFrom4([4]byte{198, 51, 100, base + 2}),
			podNet6:   netip.PrefixFrom(net6, 64),
			podGW6:    net6.Next(),
			podAddr6:  net6.Next().Next(),
			dev:       fmt.Sprintf("%s%d%c%d", devPrefix, pid, letter, i+1),
			global:    netip.PrefixFrom(netip.AddrFrom4([4]byte{242, byte(i + 1), 0, 0}), 16),
			globalPod: netip.AddrFrom4([4]byte{242, byte(i + 1), 0, 16}),
		}
	}
	return gws
}

// newTopology builds the namespaces of one mode, with IPv6 on the pods' links too when
// dualStack. On error, the namespaces made so far are in t.namespaces for delete.
func newTopology(ctx context.Context, key string, letter byte, dualStack bool) (*topology, error) {
	t := &topology{gws: planGateways(os.Getpid(), key, letter)}
	for i := range t.gws {
		for _, ns := range []string{t.gws[i].ns, t.gws[i].podNS} {
			if err := ip(ctx, "netns", "add", ns); err != nil {
				return t, err
			}
			t.namespaces = append(t.namespaces, ns)
			if err := ip(ctx, "-n", ns, "link", "set", "lo", "up"); err != nil {
				return t, err
			}
		}
	}
	g1, g2 := t.gws[0], t.gws[1]
	steps := [][]string{
		{"-n", g1.ns, "link", "add", underlayIf, "type", "veth", "peer", "name", underlayIf, "netns", g2.ns},
	}
	for _, g := range t.gws {
		steps = append(steps,
			[]string{"-n", g.ns, "addr", "add", g.underlay.String() + "/24", "dev", underlayIf},
			[]string{"-n", g.ns, "link", "set", underlayIf, "up"},
			[]string{"-n", g.podNS, "link", "add", "eth0", "type", "veth", "peer", "name", "pod", "netns", g.ns},
			[]string{"-n", g.ns, "addr", "add", netip.PrefixFrom(g.podGW, g.podNet.Bits()).String(), "dev", "pod"},
			[]string{"-n", g.ns, "link", "set", "pod", "up"},
			[]string{"-n", g.podNS, "addr", "add", netip.PrefixFrom(g.podAddr, g.podNet.Bits()).String(), "dev", "eth0"},
			[]string{"-n", g.podNS, "link", "set", "eth0", "up"},
			[]string{"-n", g.podNS, "route", "add", "default", "via", g.podGW.String()},
			[]string{"netns", "exec", g.ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"},
		)
		if dualStack {
			// nodad: the addresses are usable at once instead of after duplicate address
			// detection (about 1 s, during which the first pings and iperf3 fail).
			steps = append(steps,
				[]string{"-n", g.ns, "addr", "add", netip.PrefixFrom(g.podGW6, g.podNet6.Bits()).String(), "dev", "pod", "nodad"},
				[]string{"-n", g.podNS, "addr", "add", netip.PrefixFrom(g.podAddr6, g.podNet6.Bits()).String(), "dev", "eth0", "nodad"},
				[]string{"-n", g.podNS, "-6", "route", "add", "default", "via", g.podGW6.String()},
				[]string{"netns", "exec", g.ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/all/forwarding"},
			)
		}
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return t, err
		}
	}
	return t, nil
}

// delete removes the namespaces (and with them every link in them). The processes in them
// must have been stopped first, or a namespace lives on as long as they do.
func (t *topology) delete() {
	for _, ns := range t.namespaces {
		if err := ip(context.Background(), "netns", "del", ns); err != nil {
			progress("warning: %v", err)
		}
	}
}

// removeStale deletes the namespaces of earlier runs of this program whose process is gone
// (killed before it could clean up); a namespace of a live run is left alone.
func removeStale(ctx context.Context) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for line := range strings.Lines(string(out)) {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, nsPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue
		}
		progress("deleting namespace %s of an earlier run (pid %d is gone)", name, pid)
		if err := ip(ctx, "netns", "del", name); err != nil {
			progress("warning: %v", err)
		}
	}
}

// ip runs the ip command and returns its output in the error.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
