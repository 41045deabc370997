package ovn

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/ipam/hostaddr"
)

// gatewayRowInDB is the gateway port's row as ovn-nbctl reads it: UUID, port security and
// requested chassis; ok is false when there is no such row.
func gatewayRowInDB(t *testing.T, nb *ovntest.Server, clusterID string) (uuid string, portSecurity []string, chassis string, ok bool) {
	t.Helper()
	ctx := context.Background()
	out, err := nb.Ctl(ctx, "--bare", "--columns=_uuid", "find", "Logical_Switch_Port", "name="+GatewayPortName(clusterID))
	if err != nil {
		t.Fatal(err)
	}
	if uuid = strings.TrimSpace(out); uuid == "" {
		return "", nil, "", false
	}
	for _, r := range readPorts(t, nb) {
		if r.Name == GatewayPortName(clusterID) {
			portSecurity = r.PortSecurity
			if r.ExternalIDs[owner.OVNKeyRole] != owner.OVNRoleGateway || r.ExternalIDs[owner.OVNKeyCluster] != clusterID {
				t.Errorf("gateway port's external_ids %v", r.ExternalIDs)
			}
		}
	}
	out, err = nb.Ctl(ctx, "--if-exists", "get", "Logical_Switch_Port", uuid, "options:requested-chassis")
	if err != nil {
		t.Fatal(err)
	}
	return uuid, portSecurity, strings.Trim(strings.TrimSpace(out), `"`), true
}

// TestGatewayPortFollowsTheActiveGateway drives the gateway's port through its life against
// the real NB server: made with the first active gateway, moved by an update of the same row
// (not a new port), gone when there is no active gateway, refused over a foreign port holding
// its address, and removed by Delete with the pods' ports.
func TestGatewayPortFollowsTheActiveGateway(t *testing.T) {
	nb := ovntest.StartNB(t)
	c := connect(t, nb)
	n := Network{ClusterID: "east", CIDR: testCIDR, Pods: pods("p", 0, 2), GatewayChassis: "node-a"}
	res := apply(t, c, n)
	wantGW := Attachment{Port: "east_gateway", MAC: MACFor(netip.MustParseAddr("10.112.0.1")),
		IP: netip.MustParsePrefix("10.112.0.1/16"), Gateway: netip.MustParseAddr("10.112.0.1")}
	if !res.Gateway.Equal(wantGW) || res.GatewayFailed != nil {
		t.Fatalf("Result.Gateway = %+v (%v), want %+v", res.Gateway, res.GatewayFailed, wantGW)
	}
	uuid, ps, chassis, ok := gatewayRowInDB(t, nb, "east")
	if !ok || chassis != "node-a" || !slices.Equal(ps, []string{"0a:58:0a:70:00:01"}) {
		t.Fatalf("gateway port: present %v, requested-chassis %q, port_security %q", ok, chassis, ps)
	}
	for k, a := range res.Attached {
		if a.IP.Addr() == wantGW.IP.Addr() {
			t.Errorf("pod %s got the gateway address", k)
		}
	}

	// Failover: the same row, another chassis; the pods' ports are not touched.
	before := readPorts(t, nb)
	n.GatewayChassis = "node-b"
	apply(t, c, n)
	uuid2, _, chassis, ok := gatewayRowInDB(t, nb, "east")
	if !ok || uuid2 != uuid || chassis != "node-b" {
		t.Fatalf("after failover: present %v, uuid %s (was %s), requested-chassis %q", ok, uuid2, uuid, chassis)
	}
	after := readPorts(t, nb)
	if len(after) != len(before) {
		t.Errorf("failover changed the number of ports: %d, then %d", len(before), len(after))
	}

	// No active gateway: no port (OVN would otherwise bind it on every gateway node in turn).
	n.GatewayChassis = ""
	if res := apply(t, c, n); res.Gateway.Port != "" {
		t.Errorf("Result.Gateway = %+v without an active gateway", res.Gateway)
	}
	if _, _, _, ok := gatewayRowInDB(t, nb, "east"); ok {
		t.Fatal("the gateway port is left without an active gateway")
	}
	checkDB(t, nb, res) // the pods' ports as they were

	// A foreign port holding the gateway address: the gateway port is refused, the pods are not.
	ctx := context.Background()
	if _, err := nb.Ctl(ctx, "lsp-add", "octopus-east", "intruder", "--", "lsp-set-addresses", "intruder", "0a:00:00:00:00:09 10.112.0.1"); err != nil {
		t.Fatal(err)
	}
	n.GatewayChassis = "node-a"
	n.Pods = append(n.Pods, pod("late"))
	res = apply(t, c, n)
	if !errors.Is(res.GatewayFailed, hostaddr.ErrInUse) || !strings.Contains(res.GatewayFailed.Error(), "intruder") {
		t.Errorf("GatewayFailed = %v, want ErrInUse naming the port", res.GatewayFailed)
	}
	if _, ok := res.Attached[key("late")]; !ok {
		t.Errorf("a pod created while the gateway port is refused got no port: %v", res.Failed)
	}
	if _, _, _, ok := gatewayRowInDB(t, nb, "east"); ok {
		t.Fatal("the gateway port was made over a foreign port's address")
	}
	if _, err := nb.Ctl(ctx, "lsp-del", "intruder"); err != nil {
		t.Fatal(err)
	}
	// The client sees the deletion through its cache of the NB database, which follows
	// ovn-nbctl's transaction a moment later: apply until it has.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if res = apply(t, c, n); res.Gateway.Port != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no gateway port once its address is free: %v", res.GatewayFailed)
		}
	}

	// Delete takes the gateway's port with the pods', and the switch.
	if err := c.Delete(ctx, "east"); err != nil {
		t.Fatal(err)
	}
	if ports := readPorts(t, nb); len(ports) != 0 {
		t.Fatalf("Delete left %+v", ports)
	}
	if _, ok := readSwitches(t, nb)["octopus-east"]; ok {
		t.Fatal("Delete left the switch")
	}
}

// remoteAddr stands for another cluster's secondary network behind the tunnels: an address
// of its block on each gateway node's loopback. A reply from it tells which gateway node the
// packet reached.
var (
	remoteBlock = netip.MustParsePrefix("10.113.0.0/16")
	remoteAddr  = netip.MustParseAddr("10.113.0.1")
)

// startGatewayNode makes ch a gateway node named name: the gateway interface attached
// (twice: the second finds everything in place) and the other cluster's address behind it.
func startGatewayNode(t *testing.T, name string, ch *ovntest.Chassis, gw Attachment) {
	t.Helper()
	g := podport.Gateway{Node: ch.Node(), Port: gw.Port, MAC: gw.MAC, IP: gw.IP, MTU: 1400}
	for range 2 {
		if err := podport.AttachGateway(context.Background(), g); err != nil {
			t.Fatal(err)
		}
	}
	ch.ServeWhoAmI(remoteAddr, name)
}

// TestGatewayFailoverMovesTraffic runs the gateway's port through real OVN: three chassis on
// one Geneve underlay, a pod on one, two gateway nodes with the gateway interface attached on
// both (podport.AttachGateway) and the other cluster's address behind each. The pod's
// traffic to the other cluster's block goes through the node whose chassis the port is
// requested on, over TCP and UDP; moving GatewayChassis (one Apply) moves it to the other
// node, and a UDP probe every 10 ms measures the interruption, for takeovers and for a clean
// handover (the port removed, then made again). With no active gateway nothing answers.
func TestGatewayFailoverMovesTraffic(t *testing.T) {
	central := ovntest.StartCentral(t)
	podNode := ovntest.StartChassis(t, central)
	chA, chB := ovntest.StartChassis(t, central), ovntest.StartChassis(t, central)
	ovntest.Underlay(t, 250, podNode, chA, chB)
	c := connect(t, central.NB)

	n := Network{ClusterID: "east", CIDR: testCIDR, Pods: pods("p", 0, 1), GatewayChassis: chA.Name()}
	res := apply(t, c, n)
	gw, att := res.Gateway, res.Attached[key("p0")]
	podNetns := podNode.NewPod()
	if err := podport.Attach(context.Background(), podport.Attachment{
		Sandbox: ovntest.SandboxID(), PodNetns: ovntest.NetnsPath(podNetns), Node: podNode.Node(),
		Port: att.Port, Interface: "net1", MAC: att.MAC, IP: att.IP, MTU: 1400,
		Routes: []podport.Route{{Dst: remoteBlock, Via: att.Gateway}},
	}); err != nil {
		t.Fatal(err)
	}
	podNode.WaitPortUp(central.NB, att.Port)
	nodes := map[string]*ovntest.Chassis{"A": chA, "B": chB}
	for name, ch := range nodes {
		startGatewayNode(t, name, ch, gw)
	}
	chA.WaitPortUp(central.NB, gw.Port)
	if got := central.BoundChassis(t, gw.Port); got != chA.Name() {
		t.Fatalf("the gateway port is bound to chassis %q, want A's %s (B's is %s)", got, chA.Name(), chB.Name())
	}
	if who := ovntest.WhoAnswersTCP(t, podNetns, remoteAddr); who != "A" {
		t.Fatalf("the pod's TCP went through gateway node %s, want A", who)
	}

	p := ovntest.StartProbe(t, podNetns, remoteAddr, 10*time.Millisecond)
	p.WaitFor(t, "A", time.Now(), 20)
	var results []string
	// Three takeovers, each one Apply; then a clean handover, where the old gateway releases
	// the Lease before the new one takes it: the port is removed and made again.
	for i, step := range []struct {
		to       string
		released bool
	}{{"B", false}, {"A", false}, {"B", false}, {"A", true}} {
		to := step.to
		from := map[string]string{"A": "B", "B": "A"}[to]
		path := from + "->" + to
		applied := time.Now()
		if step.released {
			n.GatewayChassis = ""
			apply(t, c, n)
			path = from + "->(released)->" + to
		}
		n.GatewayChassis = nodes[to].Name()
		apply(t, c, n)
		applyDone := time.Since(applied)
		first := p.WaitFor(t, to, applied, 50) // half a second of replies from `to` alone
		f := p.Measure(applied, first, from)
		if who := ovntest.WhoAnswersTCP(t, podNetns, remoteAddr); who != to {
			t.Errorf("after the switch to %s the pod's TCP went through %s", to, who)
		}
		if got := central.BoundChassis(t, gw.Port); got != nodes[to].Name() {
			t.Errorf("after the switch to %s the port is bound to %q", to, got)
		}
		if f.Outage > 10*time.Second {
			t.Errorf("switch %d (%s): %s without a reply", i+1, path, f.Outage)
		}
		results = append(results, fmt.Sprintf("%s: longest gap %s, %d probes lost, Apply %s, Apply to first reply via %s %s, %d replies via %s after that",
			path, f.Outage.Round(time.Millisecond), f.Lost, applyDone.Round(time.Millisecond), to, f.ToNew.Round(time.Millisecond), f.OldAfter, from))
	}
	for _, r := range results {
		t.Logf("MEASURED gateway failover (UDP probe every 10 ms, 3 chassis, userspace datapath): %s", r)
	}

	// No active gateway: the port goes, and nothing answers any more.
	n.GatewayChassis = ""
	apply(t, c, n)
	time.Sleep(time.Second) // for ovn-controller to remove the flows
	quiet := time.Now()
	time.Sleep(time.Second)
	if rs := p.Since(quiet); len(rs) > 0 {
		t.Errorf("without an active gateway, %d replies came through %v", len(rs), ovntest.LastReplies(rs, 3))
	}
	if got := central.BoundChassis(t, gw.Port); got != "" {
		t.Errorf("without an active gateway the port is bound to %s", got)
	}
	p.Close()

	// The gateway interfaces stay (they are the nodes'); DetachGateway removes them, twice.
	for _, ch := range []*ovntest.Chassis{chA, chB} {
		for range 2 {
			if err := podport.DetachGateway(context.Background(), ch.Node()); err != nil {
				t.Fatal(err)
			}
		}
		out, err := exec.Command("ip", "-n", ch.Netns, "-o", "link").CombinedOutput()
		if err != nil || strings.Contains(string(out), podport.GatewayLink) {
			t.Errorf("links after DetachGateway: %v\n%s", err, out)
		}
		out, err = exec.Command("ovs-vsctl", "--db="+ch.Node().OVSDB, "list-ports", "br-int").CombinedOutput()
		if err != nil || strings.Contains(string(out), podport.GatewayBridgePort) {
			t.Errorf("br-int ports after DetachGateway: %v\n%s", err, out)
		}
	}
}
