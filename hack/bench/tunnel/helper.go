package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/go-logr/logr/funcr"
	"golang.org/x/crypto/curve25519"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/octopus-mcs/octopus/internal/datapath/nat"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/drivers"
	"github.com/octopus-mcs/octopus/internal/ipam"
)

// helperCommand is the hidden first argument with which this program runs as a gateway inside
// a namespace: `<program> in-netns-gateway <kind> <device> <underlay address>`, where kind is
// "lib-wg" (a bare wireguard-go library device), or a tunnel backend ("wireguard", "vxlan").
//
// The protocol with the parent, line by line: the helper prints "key <base64 public key or ->",
// reads "peer <base64 key or -> <endpoint addr:port> <subnet>[,<subnet>…]" (a dual-stack peer
// has a subnet of each family), configures the tunnel, prints
// "ready", and runs until its standard input reaches EOF; then it tears the tunnel down.
const helperCommand = "in-netns-gateway"

// gatewayTunnel is what a helper runs: configure once, close at the end.
type gatewayTunnel interface {
	publicKey() string
	configure(peerKey string, endpoint netip.AddrPort, subnets []netip.Prefix) error
	close() error
}

func helperMain(args []string) int {
	if err := runHelper(args, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gateway helper:", err)
		return 1
	}
	return 0
}

func runHelper(args []string, in io.Reader, out io.Writer) error {
	if len(args) < 3 || (args[0] == "globalnet") != (len(args) == 6) || (args[0] != "globalnet" && len(args) != 3) {
		return fmt.Errorf("want <kind> <device> <underlay address> (globalnet: and <global CIDR> <pod global address> <pod address>), got %q", args)
	}
	kind, dev := args[0], args[1]
	local, err := netip.ParseAddr(args[2])
	if err != nil {
		return err
	}
	var gw gatewayTunnel
	switch kind {
	case "lib-wg":
		gw, err = newLibDevice(dev)
	case "globalnet":
		gw, err = newGlobalnet(dev, local, args[3:])
	default:
		gw, err = newDriver(kind, dev, local)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "key %s\n", gw.publicKey())
	sc := bufio.NewScanner(in)
	if !sc.Scan() {
		return errors.Join(errors.New("no peer line on stdin"), gw.close())
	}
	if err := configureFrom(gw, sc.Text()); err != nil {
		return errors.Join(err, gw.close())
	}
	fmt.Fprintln(out, "ready")
	for sc.Scan() { // until EOF: the parent closes our stdin (or dies)
	}
	return gw.close()
}

func configureFrom(gw gatewayTunnel, line string) error {
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != "peer" {
		return fmt.Errorf("want \"peer <key> <endpoint> <subnet>[,<subnet>…]\", got %q", line)
	}
	ep, err := netip.ParseAddrPort(f[2])
	if err != nil {
		return fmt.Errorf("peer endpoint: %w", err)
	}
	var subnets []netip.Prefix
	for s := range strings.SplitSeq(f[3], ",") {
		subnet, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("peer subnet: %w", err)
		}
		subnets = append(subnets, subnet)
	}
	return gw.configure(f[1], ep, subnets)
}

// driverTunnel is Octopus's driver, created and applied exactly as the gateway does.
type driverTunnel struct {
	d     tunnel.Driver
	local netip.Addr
}

func newDriver(backend, dev string, local netip.Addr) (*driverTunnel, error) {
	// The gateway logs through zap at its default level; funcr at verbosity 0 drops the same
	// V(1) and V(2) lines (wireguard-go's per-handshake messages).
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
	d, err := drivers.New(backend, tunnel.Options{Device: dev, Log: log})
	if err != nil {
		return nil, err
	}
	return &driverTunnel{d: d, local: local}, nil
}

func (t *driverTunnel) publicKey() string {
	if k := t.d.PublicKey(); k != "" {
		return k
	}
	return "-"
}

func (t *driverTunnel) configure(key string, ep netip.AddrPort, subnets []netip.Prefix) error {
	if key == "-" {
		key = ""
	}
	return t.d.Apply(context.Background(), tunnel.Config{
		ListenPort: tunnelPort,
		LocalAddr:  t.local,
		Peers:      []tunnel.Peer{{Cluster: "remote", PublicKey: key, Endpoint: ep, Subnets: subnets}},
	})
}

func (t *driverTunnel) close() error { return t.d.Close() }

// globalnetTunnel is our wireguard driver with the globalnet NAT of a gateway whose cluster
// has the global CIDR global: its pod's traffic to the peer's global CIDR leaves SNATed to
// the cluster's egress range (the CIDR's first 8 addresses), and globalPod is translated 1:1
// to the pod, as for a pod of an exported headless Service.
type globalnetTunnel struct {
	*driverTunnel
	nat            *nat.NAT
	global         netip.Prefix
	globalPod, pod netip.Addr
}

func newGlobalnet(dev string, local netip.Addr, args []string) (*globalnetTunnel, error) {
	global, err := netip.ParsePrefix(args[0])
	if err != nil {
		return nil, err
	}
	globalPod, err := netip.ParseAddr(args[1])
	if err != nil {
		return nil, err
	}
	pod, err := netip.ParseAddr(args[2])
	if err != nil {
		return nil, err
	}
	n, err := nat.New(nat.Options{})
	if err != nil {
		return nil, err
	}
	d, err := newDriver("wireguard", dev, local)
	if err != nil {
		return nil, err
	}
	return &globalnetTunnel{driverTunnel: d, nat: n, global: global, globalPod: globalPod, pod: pod}, nil
}

func (t *globalnetTunnel) configure(key string, ep netip.AddrPort, subnets []netip.Prefix) error {
	if err := t.driverTunnel.configure(key, ep, subnets); err != nil {
		return err
	}
	egressLast, _ := ipam.Add(t.global.Addr(), 7)
	return t.nat.Apply(context.Background(), nat.State{
		GlobalCIDRs:   []netip.Prefix{t.global},
		RemoteCIDRs:   subnets,
		ClusterEgress: []ipam.Range{{First: t.global.Addr(), Last: egressLast}},
		Pods:          []nat.PodIngress{{Name: "bench/pod", GlobalIP: t.globalPod, Pod: t.pod}},
	})
}

func (t *globalnetTunnel) close() error {
	return errors.Join(t.nat.Delete(context.Background()), t.driverTunnel.close())
}

// libTunnel is the wireguard-go library and nothing else: a TUN device, device.NewDevice with
// the default bind, IpcSet. The parent sets the link up (wireguard-go then opens its sockets)
// and adds the route.
type libTunnel struct {
	dev *device.Device
	pub string
}

func newLibDevice(name string) (*libTunnel, error) {
	priv, pub, err := newKeyPair()
	if err != nil {
		return nil, err
	}
	tdev, err := tun.CreateTUN(name, tunnelMTU)
	if err != nil {
		return nil, fmt.Errorf("creating TUN device %s: %w", name, err)
	}
	dev := device.NewDevice(tdev, conn.NewDefaultBind(), device.NewLogger(device.LogLevelError, name+": "))
	if err := dev.IpcSet(fmt.Sprintf("private_key=%s\nlisten_port=%d\n", hex.EncodeToString(priv), tunnelPort)); err != nil {
		dev.Close()
		return nil, err
	}
	return &libTunnel{dev: dev, pub: base64.StdEncoding.EncodeToString(pub)}, nil
}

func (t *libTunnel) publicKey() string { return t.pub }

func (t *libTunnel) configure(key string, ep netip.AddrPort, subnets []netip.Prefix) error {
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil || len(k) != 32 {
		return fmt.Errorf("peer key %q is not a base64 WireGuard key", key)
	}
	var allowed strings.Builder
	for _, s := range subnets {
		fmt.Fprintf(&allowed, "allowed_ip=%s\n", s)
	}
	return t.dev.IpcSet(fmt.Sprintf("public_key=%s\nendpoint=%s\n%spersistent_keepalive_interval=25\n",
		hex.EncodeToString(k), ep, allowed.String()))
}

func (t *libTunnel) close() error { t.dev.Close(); return nil }

// newKeyPair returns a clamped Curve25519 private key and its public key, as `wg genkey` and
// `wg pubkey` would.
func newKeyPair() (priv, pub []byte, err error) {
	priv = make([]byte, 32)
	if _, err := rand.Read(priv); err != nil {
		return nil, nil, err
	}
	priv[0] &= 248
	priv[31] = (priv[31] & 127) | 64
	pub, err = curve25519.X25519(priv, curve25519.Basepoint)
	return priv, pub, err
}
