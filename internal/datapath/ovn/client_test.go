package ovn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/ipam/hostaddr"
)

var testCIDR = netip.MustParsePrefix("10.112.0.0/16")

func connect(t *testing.T, nb *ovntest.Server) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, Options{Endpoint: nb.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func apply(t *testing.T, c *Client, n Network) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Apply(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func pods(prefix string, from, to int) []Pod {
	var out []Pod
	for i := from; i < to; i++ {
		out = append(out, pod(fmt.Sprintf("%s%d", prefix, i)))
	}
	return out
}

// dbPort is a Logical_Switch_Port row as ovn-nbctl, not the code under test, reads it.
type dbPort struct {
	Name                    string
	Addresses, PortSecurity []string
	ExternalIDs             map[string]string
}

// readPorts lists every Logical_Switch_Port of the NB database with ovn-nbctl.
func readPorts(t *testing.T, nb *ovntest.Server) []dbPort {
	t.Helper()
	rows := readTable(t, nb, "Logical_Switch_Port", "name,addresses,port_security,external_ids")
	out := make([]dbPort, 0, len(rows))
	for _, r := range rows {
		var p dbPort
		mustUnmarshal(t, r[0], &p.Name)
		p.Addresses, p.PortSecurity, p.ExternalIDs = ovsSet(t, r[1]), ovsSet(t, r[2]), ovsMap(t, r[3])
		out = append(out, p)
	}
	return out
}

// readSwitches lists every Logical_Switch as name -> (number of ports, external_ids).
func readSwitches(t *testing.T, nb *ovntest.Server) map[string]struct {
	Ports       int
	ExternalIDs map[string]string
} {
	t.Helper()
	out := map[string]struct {
		Ports       int
		ExternalIDs map[string]string
	}{}
	for _, r := range readTable(t, nb, "Logical_Switch", "name,ports,external_ids") {
		var name string
		mustUnmarshal(t, r[0], &name)
		v := out[name]
		v.Ports, v.ExternalIDs = len(ovsSet(t, r[1])), ovsMap(t, r[2])
		out[name] = v
	}
	return out
}

func readTable(t *testing.T, nb *ovntest.Server, table, columns string) [][]json.RawMessage {
	t.Helper()
	out, err := nb.Ctl(context.Background(), "--format=json", "--data=json", "--columns="+columns, "list", table)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Data [][]json.RawMessage }
	mustUnmarshal(t, []byte(out), &doc)
	return doc.Data
}

// ovsSet decodes an OVSDB set of strings or UUIDs: a bare atom, or ["set", [...]].
func ovsSet(t *testing.T, raw json.RawMessage) []string {
	var tagged []json.RawMessage
	if json.Unmarshal(raw, &tagged) != nil || len(tagged) != 2 {
		var s string
		mustUnmarshal(t, raw, &s)
		return []string{s}
	}
	var tag string
	mustUnmarshal(t, tagged[0], &tag)
	if tag == "uuid" {
		return []string{string(tagged[1])}
	}
	var elems []json.RawMessage
	mustUnmarshal(t, tagged[1], &elems)
	var out []string
	for _, e := range elems {
		out = append(out, ovsSet(t, e)...)
	}
	return out
}

func ovsMap(t *testing.T, raw json.RawMessage) map[string]string {
	var tagged []json.RawMessage
	mustUnmarshal(t, raw, &tagged)
	var pairs [][2]string
	mustUnmarshal(t, tagged[1], &pairs)
	out := map[string]string{}
	for _, p := range pairs {
		out[p[0]] = p[1]
	}
	return out
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
}

// checkDB asserts that the NB database holds exactly one port per attached pod, with the
// attachment's address and port security, and no address twice.
func checkDB(t *testing.T, nb *ovntest.Server, res Result) {
	t.Helper()
	ports := readPorts(t, nb)
	if len(ports) != len(res.Attached) {
		t.Fatalf("NB database has %d ports, want %d (one per attached pod)", len(ports), len(res.Attached))
	}
	byName := map[string]Attachment{}
	for _, a := range res.Attached {
		byName[a.Port] = a
	}
	seen := map[string]string{}
	for _, p := range ports {
		a, ok := byName[p.Name]
		if !ok {
			t.Errorf("port %s is in the NB database but no pod has it", p.Name)
			continue
		}
		want := a.MAC.String() + " " + a.IP.Addr().String()
		if len(p.Addresses) != 1 || p.Addresses[0] != want || len(p.PortSecurity) != 1 || p.PortSecurity[0] != want {
			t.Errorf("port %s: addresses %q, port_security %q, want %q", p.Name, p.Addresses, p.PortSecurity, want)
		}
		if other, dup := seen[p.Addresses[0]]; dup {
			t.Errorf("ports %s and %s share %s", other, p.Name, p.Addresses[0])
		}
		seen[p.Addresses[0]] = p.Name
	}
}

func TestApplyWritesSwitchAndPorts(t *testing.T) {
	nb := ovntest.StartNB(t)
	c := connect(t, nb)
	n := Network{ClusterID: "east", CIDR: testCIDR, Pods: pods("p", 0, 3)}
	res := apply(t, c, n)
	if len(res.Attached) != 3 || len(res.Failed) != 0 {
		t.Fatalf("Apply = %+v", res)
	}
	checkDB(t, nb, res)
	switches := readSwitches(t, nb)
	sw, ok := switches["octopus-east"]
	if !ok || sw.Ports != 3 || sw.ExternalIDs[owner.OVNKeyOwner] != owner.OVNOwnerSecondary || sw.ExternalIDs[owner.OVNKeyCIDR] != "10.112.0.0/16" {
		t.Fatalf("switches = %+v", switches)
	}
	for _, p := range readPorts(t, nb) {
		if p.ExternalIDs[owner.OVNKeyOwner] != owner.OVNOwnerSecondary || p.ExternalIDs[owner.OVNKeyCluster] != "east" || p.ExternalIDs[owner.OVNKeyPodUID] == "" {
			t.Errorf("port %s external_ids %v", p.Name, p.ExternalIDs)
		}
	}

	// The same network again: the same answer, nothing written.
	again := apply(t, c, n)
	for k, a := range res.Attached {
		if again.Attached[k].IP != a.IP {
			t.Errorf("second Apply moved %s from %s to %s", k, a.IP, again.Attached[k].IP)
		}
	}
	if got := readSwitches(t, nb)["octopus-east"]; got.ExternalIDs[owner.OVNKeyLastAllocated] != sw.ExternalIDs[owner.OVNKeyLastAllocated] {
		t.Errorf("second Apply moved the cursor")
	}

	// Foreign rows survive Apply and Delete: a port someone else put on our switch, and a
	// switch of another cluster.
	ctx := context.Background()
	if _, err := nb.Ctl(ctx, "lsp-add", "octopus-east", "foreign", "--", "lsp-set-addresses", "foreign", "0a:00:00:00:00:01 10.112.0.9"); err != nil {
		t.Fatal(err)
	}
	apply(t, c, Network{ClusterID: "west", CIDR: netip.MustParsePrefix("10.113.0.0/16"), Pods: pods("w", 0, 1)})
	res = apply(t, c, Network{ClusterID: "east", CIDR: testCIDR, Pods: pods("p", 0, 1)})
	if len(readPorts(t, nb)) != 3 { // p0, foreign, w0
		t.Fatalf("ports after shrinking east: %+v", readPorts(t, nb))
	}
	if err := c.Delete(ctx, "east"); err != nil {
		t.Fatal(err)
	}
	ports := readPorts(t, nb)
	if len(ports) != 2 || readSwitches(t, nb)["octopus-east"].Ports != 1 {
		t.Fatalf("Delete left %+v; want the foreign port on east's switch and west's port", ports)
	}
	if _, ok := res.Attached[key("p0")]; !ok {
		t.Errorf("p0 lost its port when east shrank: %+v", res)
	}
}

// TestChurnLeavesNothingBehind creates and deletes 200 pods, one Apply per change as the
// ovnmaster does per pod event, and reads the NB database: no leaked port, no address twice.
func TestChurnLeavesNothingBehind(t *testing.T) {
	nb := ovntest.StartNB(t)
	c := connect(t, nb)
	n := Network{ClusterID: "east", CIDR: netip.MustParsePrefix("10.112.0.0/24")} // 253 addresses
	const total, live = 200, 40
	everHad := map[netip.Addr]int{}
	for i := 0; i < total; i++ {
		n.Pods = append(n.Pods, pod(fmt.Sprintf("p%d", i)))
		if len(n.Pods) > live {
			n.Pods = n.Pods[1:]
		}
		res := apply(t, c, n)
		if len(res.Failed) != 0 || len(res.Attached) != len(n.Pods) {
			t.Fatalf("step %d: %d attached, failed %v", i, len(res.Attached), res.Failed)
		}
		everHad[res.Attached[key(fmt.Sprintf("p%d", i))].IP.Addr()]++
		if i%50 == 49 {
			checkDB(t, nb, res)
		}
	}
	// 200 pods from a block of 253: handed out in turn, no address was given twice.
	for a, n := range everHad {
		if n > 1 {
			t.Errorf("address %s was handed out %d times", a, n)
		}
	}
	for len(n.Pods) > 0 {
		n.Pods = n.Pods[1:]
		apply(t, c, n)
	}
	if ports := readPorts(t, nb); len(ports) != 0 {
		t.Fatalf("%d ports leaked after every pod was deleted: %+v", len(ports), ports)
	}
	if sw := readSwitches(t, nb)["octopus-east"]; sw.Ports != 0 {
		t.Fatalf("switch still references %d ports", sw.Ports)
	}
}

// TestRestartKeepsAddresses: a new client (a restarted ovnmaster) knows nothing but what the
// database holds, and neither moves an address nor hands one out twice.
func TestRestartKeepsAddresses(t *testing.T) {
	nb := ovntest.StartNB(t)
	n := Network{ClusterID: "east", CIDR: testCIDR, Pods: pods("p", 0, 20)}
	first := connect(t, nb)
	before := apply(t, first, n)
	first.Close()

	second := connect(t, nb)
	n.Pods = append(n.Pods, pods("new", 0, 5)...)
	after := apply(t, second, n)
	used := map[netip.Addr]PodKey{}
	for k, a := range after.Attached {
		if old, ok := before.Attached[k]; ok && !old.Equal(a) {
			t.Errorf("pod %s: %+v before the restart, %+v after", k, old, a)
		}
		if other, dup := used[a.IP.Addr()]; dup {
			t.Errorf("pods %s and %s share %s", other, k, a.IP.Addr())
		}
		used[a.IP.Addr()] = k
	}
	checkDB(t, nb, after)
}

// TestNBRestartMidway stops the NB server between two Applies: the Apply during the outage
// fails with an error and writes nothing; once the server is back the client reconnects by
// itself and the next Apply keeps every address and adds the new pod.
func TestNBRestartMidway(t *testing.T) {
	nb := ovntest.StartNB(t)
	c := connect(t, nb)
	n := Network{ClusterID: "east", CIDR: testCIDR, Pods: pods("p", 0, 10)}
	before := apply(t, c, n)

	nb.Stop()
	n.Pods = append(n.Pods, pod("late"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := c.Apply(ctx, n)
	cancel()
	if err == nil {
		t.Fatal("Apply succeeded with the NB server stopped")
	}
	t.Logf("Apply during the outage: %v", err)

	nb.Start()
	after := apply(t, c, n)
	for k, a := range before.Attached {
		if !after.Attached[k].Equal(a) {
			t.Errorf("pod %s: %+v before the NB restart, %+v after", k, a, after.Attached[k])
		}
	}
	if _, ok := after.Attached[key("late")]; !ok {
		t.Errorf("the pod created during the outage got no port: %v", after.Failed)
	}
	checkDB(t, nb, after)
}

// TestBadInputFailsAlone: a pod asking for an address outside the block, and pods beyond
// the block's size, fail with their reason; the others get their ports, and nothing is
// written for the failed ones.
func TestBadInputFailsAlone(t *testing.T) {
	nb := ovntest.StartNB(t)
	c := connect(t, nb)
	n := Network{ClusterID: "east", CIDR: netip.MustParsePrefix("10.112.0.0/29"), Pods: pods("p", 0, 6)}
	n.Pods = append(n.Pods, Pod{Namespace: "default", Name: "far", UID: "far", RequestedIP: netip.MustParseAddr("10.200.0.5")})
	res := apply(t, c, n)
	if len(res.Attached) != 5 {
		t.Fatalf("a /29 holds 5 pods; attached %d", len(res.Attached))
	}
	if err := res.Failed[key("far")]; !errors.Is(err, hostaddr.ErrOutsideBlock) {
		t.Errorf("pod far: %v, want ErrOutsideBlock", err)
	}
	if err := res.Failed[key("p5")]; !errors.Is(err, hostaddr.ErrExhausted) {
		t.Errorf("pod p5: %v, want ErrExhausted", err)
	}
	for k, err := range res.Failed {
		t.Logf("pod %s: %v", k, err)
	}
	checkDB(t, nb, res)

	// A whole-network error writes nothing at all.
	if _, err := c.Apply(context.Background(), Network{ClusterID: "east", CIDR: netip.MustParsePrefix("10.112.0.1/24")}); err == nil || !strings.Contains(err.Error(), "host bits") {
		t.Errorf("Apply with a non-canonical CIDR: %v", err)
	}
	checkDB(t, nb, res)
}

// TestConcurrentWritersNeverShareAnAddress runs two clients (two ovnmasters during a
// leader-election overlap) applying different pods to one cluster at once, starting with no
// switch. Each plans on what it read; the transaction's guard makes the later one re-read
// instead of creating a second switch or handing out an address the other just took.
func TestConcurrentWritersNeverShareAnAddress(t *testing.T) {
	nb := ovntest.StartNB(t)
	a, b := connect(t, nb), connect(t, nb)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := 0; i < 20; i++ {
		for j, c := range []*Client{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := Network{ClusterID: "east", CIDR: testCIDR, Pods: pods(fmt.Sprintf("c%d-", j), 0, i+1)}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, err := c.Apply(ctx, n)
				errs <- err
			}()
		}
		wg.Wait()
	}
	close(errs)
	for err := range errs {
		// Losing every retry to the other writer is allowed; a duplicate address is not.
		if err != nil && !strings.Contains(err.Error(), "timed out") {
			t.Errorf("Apply: %v", err)
		}
	}
	if rows := readTable(t, nb, "Logical_Switch", "name"); len(rows) != 1 {
		t.Errorf("%d logical switches, want one", len(rows))
	}
	seen := map[string]string{}
	for _, p := range readPorts(t, nb) {
		if other, dup := seen[p.Addresses[0]]; dup {
			t.Errorf("ports %s and %s share %s", other, p.Name, p.Addresses[0])
		}
		seen[p.Addresses[0]] = p.Name
	}
}

// TestNorthdBindsPorts checks that OVN itself accepts the rows: ovn-northd turns every port
// into a southbound Port_Binding with its MAC and address.
func TestNorthdBindsPorts(t *testing.T) {
	central := ovntest.StartCentral(t)
	c := connect(t, central.NB)
	res := apply(t, c, Network{ClusterID: "east", CIDR: testCIDR, Pods: pods("p", 0, 2)})
	ctx := context.Background()
	for _, a := range res.Attached {
		want := a.MAC.String() + " " + a.IP.Addr().String()
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, err := central.SB.Ctl(ctx, "--bare", "--columns=mac", "find", "Port_Binding", "logical_port="+a.Port)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(out) == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Port_Binding of %s has mac %q, want %q", a.Port, out, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// BenchmarkApplyOnePodMore measures what a pod creation costs the ovnmaster against the real
// NB server: one Apply of the whole network with one pod more than the last (read the cache,
// plan, one transaction). Pods accumulate over b.N, as in a cluster filling up.
func BenchmarkApplyOnePodMore(b *testing.B) {
	nb := ovntest.StartNB(b)
	ctx := context.Background()
	c, err := Connect(ctx, Options{Endpoint: nb.Endpoint})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	n := Network{ClusterID: "east", CIDR: testCIDR}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n.Pods = append(n.Pods, pod(fmt.Sprintf("p%d", i)))
		res, err := c.Apply(ctx, n)
		if err != nil || len(res.Failed) > 0 {
			b.Fatal(err, res.Failed)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pods/s")
}

// TestPortsCarryTrafficWithPortSecurity runs the rows Apply writes through real OVN: a
// chassis (ovs-vswitchd on the userspace datapath, ovn-controller) with two pod namespaces
// attached as their ports. The pods reach each other; a pod sending from an address that
// is not its own is dropped (port security); a deleted pod's port carries nothing.
func TestPortsCarryTrafficWithPortSecurity(t *testing.T) {
	central := ovntest.StartCentral(t)
	chassis := ovntest.StartChassis(t, central)
	c := connect(t, central.NB)
	n := Network{ClusterID: "east", CIDR: testCIDR, Pods: pods("p", 0, 2)}
	res := apply(t, c, n)
	a, b := res.Attached[key("p0")], res.Attached[key("p1")]
	nsA := chassis.AttachPod(central.NB, a.Port, a.MAC, a.IP)
	chassis.AttachPod(central.NB, b.Port, b.MAC, b.IP)

	ping := func(args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := ovntest.Exec(ctx, nsA, append([]string{"ping", "-c", "1", "-W", "1"}, args...)...)
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	var err error
	for range 10 { // the first packets may beat ovn-controller's flows
		if err = ping(b.IP.Addr().String()); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("pod p0 cannot reach p1 over the switch: %v", err)
	}

	spoofed := netip.PrefixFrom(netip.MustParseAddr("10.112.0.200"), testCIDR.Bits())
	if out, err := ovntest.Exec(context.Background(), nsA, "ip", "addr", "add", spoofed.String(), "dev", "net1"); err != nil {
		t.Fatalf("adding %s: %v: %s", spoofed, err, out)
	}
	if err := ping("-I", spoofed.Addr().String(), b.IP.Addr().String()); err == nil {
		t.Fatal("a ping from an address that is not the port's got through: port security does not hold")
	}

	n.Pods = n.Pods[:1]
	apply(t, c, n)
	deadline := time.Now().Add(10 * time.Second)
	for ping(b.IP.Addr().String()) == nil {
		if time.Now().After(deadline) {
			t.Fatal("p1's port was deleted, but p0 still reaches it")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
