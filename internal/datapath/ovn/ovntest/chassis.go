package ovntest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/podport"
)

// VSwitchSchema is the Open vSwitch database schema (Debian's openvswitch-common).
const VSwitchSchema = "/usr/share/openvswitch/vswitch.ovsschema"

// Chassis is one OVN node: its own network namespace, with ovs-vswitchd on the userspace
// (netdev) datapath, the only one these machines have (no OVS kernel module), and
// ovn-controller making br-int follow the southbound database. Pods are further
// namespaces joined to it by veths, the way the NRI plugin attaches them (podport).
type Chassis struct {
	// Netns is the node's network namespace.
	Netns string

	t      testing.TB
	dir    string
	prefix string // of every namespace and link this chassis makes
	name   string // the chassis's system-id: prefix unless named
	ovs    *Server
	pods   int
}

// StartChassis starts a chassis bound to c's southbound database, in a network namespace of
// its own. It needs root (network namespaces); the namespaces, links and processes go when
// the test ends.
func StartChassis(t testing.TB, c *Central) *Chassis {
	t.Helper()
	ch := newChassis(t, c)
	return ch.start(c, ch.netns("node"))
}

// StartChassisIn starts a chassis in the existing network namespace netns (a lab node's,
// which the caller owns: it is left in place).
func StartChassisIn(t testing.TB, c *Central, netns string) *Chassis {
	t.Helper()
	return newChassis(t, c).start(c, netns)
}

// StartChassisNamed is StartChassisIn with the chassis named name, a lab node's name: the
// convention of a real deployment (system-id = node name), which the gateway's port relies on
// (its requested chassis is the node the gateway ConfigMap names, else the gateway Lease's
// holder: a node name either way).
func StartChassisNamed(t testing.TB, c *Central, netns, name string) *Chassis {
	t.Helper()
	ch := newChassis(t, c)
	ch.name = name
	return ch.start(c, netns)
}

func newChassis(t testing.TB, c *Central) *Chassis {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a chassis needs root for its network namespaces")
	}
	need(t, "ovs-vswitchd", "ovn-controller", "ovs-vsctl", "ip")
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	ch := &Chassis{t: t, prefix: "ovnt" + hex.EncodeToString(suffix)}
	ch.name = ch.prefix
	// Each chassis has its own files: its database, control sockets and logs.
	ch.dir = filepath.Join(c.dir, ch.prefix)
	if err := os.Mkdir(ch.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return ch
}

func (ch *Chassis) start(c *Central, netns string) *Chassis {
	t := ch.t
	t.Helper()
	ch.Netns = netns
	ch.ovs = startServer(t, ch.dir, ch.Netns, "ovs", VSwitchSchema, "ovs-vsctl")
	ch.vsctl("--no-wait", "init")
	vswitchd := start(t, ch.dir, ch.Netns, "ovs-vswitchd", ch.ovs.Endpoint,
		"--unixctl="+filepath.Join(ch.dir, "vswitchd.ctl"), "--log-file="+filepath.Join(ch.dir, "vswitchd.log"))
	t.Cleanup(func() { vswitchd.stop(t) })
	ch.vsctl("set", "Open_vSwitch", ".",
		"external_ids:system-id="+ch.name,
		"external_ids:ovn-remote="+c.SB.Endpoint,
		// Geneve to ourselves until Link gives the chassis an underlay: a lone chassis has
		// no tunnels to build, but ovn-controller wants an encapsulation to register.
		"external_ids:ovn-encap-type=geneve", "external_ids:ovn-encap-ip=127.0.0.1",
		"external_ids:ovn-bridge-datapath-type=netdev")
	controller := start(t, ch.dir, ch.Netns, "ovn-controller", ch.ovs.Endpoint,
		"--log-file="+filepath.Join(ch.dir, "controller.log"))
	t.Cleanup(func() { controller.stop(t) })
	ch.eventually("ovn-controller to create br-int", func() error {
		_, err := ch.ovs.Ctl(context.Background(), "br-exists", "br-int")
		return err
	})
	return ch
}

// underlayBridge is the bridge that carries a chassis's tunnel address. The userspace
// datapath sends and receives Geneve only through an OVS bridge that owns the tunnel's
// local address (ovs-vswitchd routes a tunnel's packets out of its own bridges, not out of
// a kernel interface), so the underlay link is a port of this bridge and the address is on
// the bridge's internal port.
const underlayBridge = "br-phy"

// Link gives chassis a and b an underlay of their own, a veth between their namespaces in
// the 192.168.<subnet>.0/24, and makes it their Geneve endpoints: ports of one chassis then
// reach ports of the other through a tunnel.
func Link(t testing.TB, a, b *Chassis, subnet uint8) {
	t.Helper()
	ends := [2]string{a.prefix + "-ul", b.prefix + "-ul"}
	a.ip("link", "add", ends[0], "netns", a.Netns, "type", "veth", "peer", "name", ends[1], "netns", b.Netns)
	for i, ch := range []*Chassis{a, b} {
		addr := fmt.Sprintf("192.168.%d.%d", subnet, i+1)
		ch.vsctl("--may-exist", "add-br", underlayBridge, "--", "set", "Bridge", underlayBridge, "datapath_type=netdev",
			"--", "--may-exist", "add-port", underlayBridge, ends[i])
		ch.ip("-n", ch.Netns, "link", "set", ends[i], "up")
		ch.ip("-n", ch.Netns, "addr", "add", addr+"/24", "dev", underlayBridge)
		ch.ip("-n", ch.Netns, "link", "set", underlayBridge, "up")
		ch.vsctl("set", "Open_vSwitch", ".", "external_ids:ovn-encap-ip="+addr)
	}
	t.Cleanup(func() {
		// Deleting one end deletes the pair; a lab node's namespace outlives the test's.
		_ = exec.Command("ip", "-n", a.Netns, "link", "del", ends[0]).Run()
	})
}

// Underlay joins hub and every spoke by an underlay in 192.168.<subnet>.0/24 and makes it
// their Geneve endpoints, for more than two chassis: the hub (.1) has a veth to each spoke
// (.2, .3, ...) in its br-phy, whose normal switching joins the spokes to each other too.
// Link is the two-chassis case; a chassis is in one Link or one Underlay, for its tunnel
// address (ovn-encap-ip) is the last one set.
func Underlay(t testing.TB, subnet uint8, hub *Chassis, spokes ...*Chassis) {
	t.Helper()
	hubAddr := fmt.Sprintf("192.168.%d.1", subnet)
	for i, sp := range spokes {
		hubEnd, spokeEnd := fmt.Sprintf("%s-u%d", hub.prefix, i), sp.prefix+"-ul"
		hub.ip("link", "add", hubEnd, "netns", hub.Netns, "type", "veth", "peer", "name", spokeEnd, "netns", sp.Netns)
		t.Cleanup(func() { _ = exec.Command("ip", "-n", hub.Netns, "link", "del", hubEnd).Run() })
		hub.vsctl("--may-exist", "add-br", underlayBridge, "--", "set", "Bridge", underlayBridge, "datapath_type=netdev",
			"--", "--may-exist", "add-port", underlayBridge, hubEnd)
		hub.ip("-n", hub.Netns, "link", "set", hubEnd, "up")
		sp.underlayAddr(spokeEnd, fmt.Sprintf("192.168.%d.%d", subnet, i+2))
	}
	hub.ip("-n", hub.Netns, "addr", "add", hubAddr+"/24", "dev", underlayBridge)
	hub.ip("-n", hub.Netns, "link", "set", underlayBridge, "up")
	hub.vsctl("set", "Open_vSwitch", ".", "external_ids:ovn-encap-ip="+hubAddr)
}

// underlayAddr makes link a port of the chassis's br-phy and addr its tunnel address.
func (ch *Chassis) underlayAddr(link, addr string) {
	ch.t.Helper()
	ch.vsctl("--may-exist", "add-br", underlayBridge, "--", "set", "Bridge", underlayBridge, "datapath_type=netdev",
		"--", "--may-exist", "add-port", underlayBridge, link)
	ch.ip("-n", ch.Netns, "link", "set", link, "up")
	ch.ip("-n", ch.Netns, "addr", "add", addr+"/24", "dev", underlayBridge)
	ch.ip("-n", ch.Netns, "link", "set", underlayBridge, "up")
	ch.vsctl("set", "Open_vSwitch", ".", "external_ids:ovn-encap-ip="+addr)
}

// Name is the chassis's name in the southbound database: its Open_vSwitch
// external_ids:system-id, what a logical port's requested-chassis names.
func (ch *Chassis) Name() string { return ch.name }

// Node is the chassis as podport sees a node: ovs-vswitchd's namespace, database and
// integration bridge.
func (ch *Chassis) Node() podport.Node {
	return podport.Node{Netns: NetnsPath(ch.Netns), OVSDB: ch.ovs.Endpoint, Bridge: "br-int"}
}

// NewPod creates an empty pod network namespace, removed when the test ends, and returns its
// name; NetnsPath gives its path.
func (ch *Chassis) NewPod() string {
	ch.t.Helper()
	ch.pods++
	return ch.netns(fmt.Sprintf("p%d", ch.pods))
}

// SandboxID is a random ID in the form of containerd's sandbox IDs (64 hex digits).
func SandboxID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NetnsPath is the path of the named network namespace (`ip netns` keeps them in /run/netns).
func NetnsPath(name string) string { return filepath.Join("/run/netns", name) }

// AttachPod creates a pod namespace joined to br-int as logical port port, the way the NRI
// plugin joins a pod (podport.Attach: net1 with mac and addr), and returns the pod's
// namespace once OVN reports the port up.
func (ch *Chassis) AttachPod(nb *Server, port string, mac net.HardwareAddr, addr netip.Prefix) string {
	ch.t.Helper()
	pod := ch.NewPod()
	err := podport.Attach(context.Background(), podport.Attachment{
		Sandbox: SandboxID(), PodNetns: NetnsPath(pod), Node: ch.Node(),
		Port: port, Interface: "net1", MAC: mac, IP: addr,
	})
	if err != nil {
		ch.t.Fatal(err)
	}
	ch.WaitPortUp(nb, port)
	return pod
}

// WaitPortUp waits until OVN reports the logical port up: ovn-controller bound it and
// installed its flows.
func (ch *Chassis) WaitPortUp(nb *Server, port string) {
	ch.t.Helper()
	ch.eventually("port "+port+" up", func() error {
		out, err := nb.Ctl(context.Background(), "get", "Logical_Switch_Port", port, "up")
		if err == nil && strings.TrimSpace(out) != "true" {
			err = fmt.Errorf("up = %s", strings.TrimSpace(out))
		}
		return err
	})
}

// Exec runs a command in network namespace netns and returns its combined output.
func Exec(ctx context.Context, netns string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", netns}, args...)...).CombinedOutput()
	return string(out), err
}

// netns creates the namespace <prefix>-<role> and removes it when the test ends.
func (ch *Chassis) netns(role string) string {
	name := ch.prefix + "-" + role
	ch.ip("netns", "add", name)
	ch.t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			ch.t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return name
}

func (ch *Chassis) ip(args ...string) {
	ch.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		ch.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func (ch *Chassis) vsctl(args ...string) {
	ch.t.Helper()
	if _, err := ch.ovs.Ctl(context.Background(), args...); err != nil {
		ch.t.Fatal(err)
	}
}

func (ch *Chassis) eventually(what string, check func() error) {
	ch.t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			ch.t.Fatalf("waiting for %s: %v (logs in %s)", what, err, ch.dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
