package ovn

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
)

// vpcTables are the NB tables a VPC writes.
var vpcTables = []string{"Logical_Router", "Logical_Router_Port", "Logical_Switch", "Logical_Switch_Port"}

// dumpNB is every row of the VPC tables, as ovn-nbctl prints them.
func dumpNB(t *testing.T, nb *ovntest.Server) string {
	t.Helper()
	var b strings.Builder
	for _, table := range append(slices.Clone(vpcTables), "Logical_Router_Static_Route") { // a gateway's default route too
		out, err := nb.Ctl(context.Background(), "--format=json", "list", table)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(out)
	}
	return b.String()
}

func applyVpc(t *testing.T, c *Client, v Vpc) VpcResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.ApplyVpc(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failed) != 0 {
		t.Fatalf("ApplyVpc(%s) failed pods: %v", v.Name, res.Failed)
	}
	return res
}

// attachVpcPod joins a pod namespace on ch to its VPC port, with routes to the VPC's other
// subnets through the router's address on its own, the way the NRI plugin will.
func attachVpcPod(t *testing.T, ch *ovntest.Chassis, nb *ovntest.Server, a Attachment, others ...netip.Prefix) string {
	t.Helper()
	pod := ch.NewPod()
	att := podport.Attachment{
		Sandbox: ovntest.SandboxID(), PodNetns: ovntest.NetnsPath(pod), Node: ch.Node(),
		Port: a.Port, Interface: "net1", MAC: a.MAC, IP: a.IP, MTU: 1400, // room for Geneve
	}
	for _, dst := range others {
		att.Routes = append(att.Routes, podport.Route{Dst: dst, Via: a.Gateway})
	}
	if err := podport.Attach(context.Background(), att); err != nil {
		t.Fatal(err)
	}
	ch.WaitPortUp(nb, a.Port)
	return pod
}

// dialAnswer connects from netns to ip:port and returns what the server wrote, or the error.
func dialAnswer(from string, ip netip.Addr, port int) (string, error) {
	var got []byte
	err := tunneltest.InErr(from, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(ip, uint16(port)).String(), 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		got = buf[:n]
		return err
	})
	return string(got), err
}

// serveName answers every TCP connection to ip:port in netns with name.
func serveName(t *testing.T, netns string, ip netip.Addr, port int, name string) {
	t.Helper()
	var ln net.Listener
	tunneltest.In(t, netns, func() {
		var err error
		if ln, err = net.Listen("tcp", netip.AddrPortFrom(ip, uint16(port)).String()); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(name))
			_ = c.Close()
		}
	}()
}

// TestVpcsAreIsolatedWithIdenticalSubnets builds two VPCs, red and blue, with identical
// subnets (overlapping the cluster's own network too) on real OVN daemons, pods of each on two
// chassis: red reaches red on its subnet and across the router, blue reaches blue, and red
// never reaches blue, neither at an address only blue has nor at one both have. A second
// Apply writes nothing, and DeleteVpc leaves no row of the VPC and every row of the rest.
func TestVpcsAreIsolatedWithIdenticalSubnets(t *testing.T) {
	central := ovntest.StartCentral(t)
	ch1, ch2 := ovntest.StartChassis(t, central), ovntest.StartChassis(t, central)
	ovntest.Underlay(t, 249, ch1, ch2) // each chassis its own encap address
	c := connect(t, central.NB)

	// The cluster's own network, whose block the VPCs' subnets overlap.
	clusterRes := apply(t, c, Network{ClusterID: "east", CIDR: testCIDR, Pods: pods("p", 0, 1)})
	subnets := []Subnet{{Name: "a", CIDR: netip.MustParsePrefix("10.112.0.0/24")}, {Name: "b", CIDR: netip.MustParsePrefix("10.112.1.0/24")}}
	vpcPod := func(ns, name, subnet string) VpcPod {
		return VpcPod{Pod: Pod{Namespace: ns, Name: name, UID: ns + name}, Subnet: subnet}
	}
	red := Vpc{ClusterID: "east", Name: "red", Subnets: subnets, Pods: []VpcPod{
		vpcPod("apps", "r1", ""), vpcPod("apps", "r2", "a"), vpcPod("apps", "r3", "b"),
	}}
	blue := Vpc{ClusterID: "east", Name: "blue", Subnets: subnets, Pods: []VpcPod{
		vpcPod("apps", "r1", ""), vpcPod("apps", "r2", "a"), // blue's pods of the same names get red's addresses
		{Pod: Pod{Namespace: "apps", Name: "b3", UID: "b3", RequestedIP: netip.MustParseAddr("10.112.0.50")}},
	}}
	redRes, blueRes := applyVpc(t, c, red), applyVpc(t, c, blue)
	k := func(name string) PodKey { return PodKey{Namespace: "apps", Name: name} }
	r1, r2, r3 := redRes.Attached[k("r1")], redRes.Attached[k("r2")], redRes.Attached[k("r3")]
	b1, b2, b3 := blueRes.Attached[k("r1")], blueRes.Attached[k("r2")], blueRes.Attached[k("b3")]
	if r1.IP != b1.IP || r2.IP != b2.IP || r1.Port == b1.Port {
		t.Fatalf("red %v %v and blue %v %v: want the same addresses on differently named ports", r1, r2, b1, b2)
	}
	if r3.Gateway != netip.MustParseAddr("10.112.1.1") || r1.Gateway != netip.MustParseAddr("10.112.0.1") {
		t.Fatalf("gateways %s, %s: want each subnet's first host", r1.Gateway, r3.Gateway)
	}

	subnetA, subnetB := subnets[0].CIDR, subnets[1].CIDR
	nsR1 := attachVpcPod(t, ch1, central.NB, r1, subnetB)
	nsR2 := attachVpcPod(t, ch2, central.NB, r2, subnetB)
	nsR3 := attachVpcPod(t, ch2, central.NB, r3, subnetA)
	nsB1 := attachVpcPod(t, ch1, central.NB, b1, subnetB)
	nsB2 := attachVpcPod(t, ch2, central.NB, b2, subnetB)
	nsB3 := attachVpcPod(t, ch1, central.NB, b3, subnetB)
	if p0 := clusterRes.Attached[key("p0")]; p0.IP.Addr() != r1.IP.Addr() {
		t.Fatalf("the cluster's pod p0 at %s, red's r1 at %s: want the same address, on another switch", p0.IP, r1.IP)
	}

	// Red reaches red: on its subnet across chassis, and across the router.
	ovntest.ExchangeTCP(t, nsR1, nsR2, r2.IP.Addr())
	ovntest.ExchangeTCP(t, nsR1, nsR3, r3.IP.Addr())
	// Blue reaches blue.
	ovntest.ExchangeTCP(t, nsB1, nsB2, b2.IP.Addr())
	ovntest.ExchangeTCP(t, nsB3, nsB1, b1.IP.Addr())

	// Red never reaches blue. Blue's pods answer with their name on port 7001; red's r2,
	// which holds b2's address in red, listens on nothing there.
	serveName(t, nsB2, b2.IP.Addr(), 7001, "blue")
	serveName(t, nsB3, b3.IP.Addr(), 7001, "blue")
	serveName(t, nsR2, r2.IP.Addr(), 7002, "red")
	if got, err := dialAnswer(nsR1, r2.IP.Addr(), 7002); err != nil || got != "red" {
		t.Fatalf("red r1 -> red r2 (the control): %q, %v", got, err)
	}
	for _, tc := range []struct {
		what string
		ip   netip.Addr
	}{
		{"an address both VPCs have", b2.IP.Addr()},
		{"an address only blue has", b3.IP.Addr()},
	} {
		if got, err := dialAnswer(nsR1, tc.ip, 7001); err == nil || got == "blue" {
			t.Errorf("red r1 -> %s (%s): answered %q: blue is reachable from red", tc.ip, tc.what, got)
		}
		if got, err := dialAnswer(nsR3, tc.ip, 7001); err == nil || got == "blue" {
			t.Errorf("red r3 (other subnet) -> %s (%s): answered %q: blue is reachable from red through the router", tc.ip, tc.what, got)
		}
	}

	// The same VPCs again: nothing to write, and nothing written.
	before := dumpNB(t, central.NB)
	for _, v := range []Vpc{red, blue} {
		obs, err := c.observeVpc(context.Background(), v.ClusterID, v.Name)
		if err != nil {
			t.Fatal(err)
		}
		blocks, _ := v.validate()
		if p := makeVpcPlan(v, blocks, obs); !p.empty() {
			t.Errorf("VPC %s: the plan against what Apply wrote is not empty: %+v", v.Name, p)
		}
		again := applyVpc(t, c, v)
		for pk, a := range again.Attached {
			if want := map[string]VpcResult{"red": redRes, "blue": blueRes}[v.Name].Attached[pk]; !a.Equal(want) {
				t.Errorf("VPC %s: second Apply gave %s %+v, first %+v", v.Name, pk, a, want)
			}
		}
	}
	if after := dumpNB(t, central.NB); after != before {
		t.Errorf("a second Apply changed the database:\nbefore %s\nafter  %s", before, after)
	}

	// DeleteVpc takes every row of red, and nothing of blue's or the cluster's.
	blueRows := vpcRows(t, central.NB, "blue")
	clusterPorts := len(readPorts(t, central.NB)) - len(vpcRows(t, central.NB, "red")["Logical_Switch_Port"]) - len(blueRows["Logical_Switch_Port"])
	if err := c.DeleteVpc(context.Background(), "east", "red"); err != nil {
		t.Fatal(err)
	}
	for table, rows := range vpcRows(t, central.NB, "red") {
		if len(rows) != 0 {
			t.Errorf("DeleteVpc left %s rows %v", table, rows)
		}
	}
	for table, rows := range vpcRows(t, central.NB, "blue") {
		if len(rows) != len(blueRows[table]) {
			t.Errorf("DeleteVpc of red changed blue's %s: %v, was %v", table, rows, blueRows[table])
		}
	}
	if got := len(readPorts(t, central.NB)) - len(vpcRows(t, central.NB, "blue")["Logical_Switch_Port"]); got != clusterPorts {
		t.Errorf("DeleteVpc of red changed the cluster network's ports: %d, was %d", got, clusterPorts)
	}
	if _, ok := readSwitches(t, central.NB)["octopus-east"]; !ok {
		t.Error("DeleteVpc took the cluster's switch")
	}
	// Blue still works, and a second Delete has nothing to do.
	ovntest.ExchangeTCP(t, nsB1, nsB2, b2.IP.Addr())
	if err := c.DeleteVpc(context.Background(), "east", "red"); err != nil {
		t.Fatal(err)
	}
	// Rows someone else put on blue's router and switch survive its deletion, and keep them.
	ctx := context.Background()
	if _, err := central.NB.Ctl(ctx, "lsp-add", "octopus-east.blue.a", "intruder", "--",
		"lrp-add", "octopus-east.blue", "intruder-lrp", "0a:00:00:00:00:09", "192.0.2.1/24"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		obs, err := c.observeVpc(ctx, "east", "blue")
		if err == nil && len(obs.lrps) == 3 && len(obs.subnets["a"].ports) == 5 { // the cache has them (router, r1, r2, b3, intruder)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client never saw the foreign rows: %+v, %v", obs, err)
		}
	}
	if err := c.DeleteVpc(ctx, "east", "blue"); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"Logical_Router_Port", "Logical_Switch_Port"} {
		if rows := vpcRows(t, central.NB, "blue")[table]; len(rows) != 0 {
			t.Errorf("DeleteVpc left %s rows %v", table, rows)
		}
	}
	for _, args := range [][]string{{"lsp-list", "octopus-east.blue.a"}, {"lrp-list", "octopus-east.blue"}} {
		if out, err := central.NB.Ctl(ctx, args...); err != nil || !strings.Contains(out, "intruder") || len(strings.Fields(out)) != 2 {
			t.Errorf("%v after DeleteVpc: %q, %v; want the foreign port alone", args, out, err)
		}
	}
	if _, err := central.NB.Ctl(ctx, "ls-del", "octopus-east.blue.a", "--", "lr-del", "octopus-east.blue"); err != nil {
		t.Fatal(err)
	}
	out, err := central.NB.Ctl(context.Background(), "--bare", "--columns=name", "list", "Logical_Router")
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("routers left after deleting both VPCs: %q, %v", out, err)
	}
	if sw := readSwitches(t, central.NB); len(sw) != 1 {
		t.Errorf("switches left after deleting both VPCs: %v, want only the cluster's", sw)
	}
}

// vpcRows are the names of every row of a VPC in the VPC tables, found by ovn-nbctl through
// the VPC's external_ids.
func vpcRows(t *testing.T, nb *ovntest.Server, vpc string) map[string][]string {
	t.Helper()
	rows := map[string][]string{}
	for _, table := range vpcTables {
		out, err := nb.Ctl(context.Background(), "--bare", "--columns=name", "find", table, "external_ids:octopus.io/vpc="+vpc)
		if err != nil {
			t.Fatal(err)
		}
		rows[table] = strings.Fields(out)
	}
	return rows
}

// TestConcurrentVpcWritersNeverShareAnAddress: two clients apply different pods to one VPC at
// once, from nothing. The router's and the switches' guards make the later writer re-read, so
// there is one router, one switch per subnet, and no address twice on a subnet.
func TestConcurrentVpcWritersNeverShareAnAddress(t *testing.T) {
	nb := ovntest.StartNB(t)
	a, b := connect(t, nb), connect(t, nb)
	subnets := []Subnet{{Name: "a", CIDR: netip.MustParsePrefix("10.1.0.0/24")}, {Name: "b", CIDR: netip.MustParsePrefix("10.1.1.0/24")}}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 20 {
		for j, c := range []*Client{a, b} {
			wg.Go(func() {
				v := Vpc{ClusterID: "east", Name: "red", Subnets: subnets}
				for _, p := range pods(fmt.Sprintf("c%d-", j), 0, i+1) {
					v.Pods = append(v.Pods, VpcPod{Pod: p, Subnet: subnets[i%2].Name})
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, err := c.ApplyVpc(ctx, v)
				errs <- err
			})
		}
		wg.Wait()
	}
	close(errs)
	for err := range errs {
		// Losing every retry to the other writer is allowed; a duplicate row or address is not.
		if err != nil && !strings.Contains(err.Error(), "timed out") {
			t.Errorf("ApplyVpc: %v", err)
		}
	}
	if rows := readTable(t, nb, "Logical_Router", "name"); len(rows) != 1 {
		t.Errorf("%d logical routers, want one", len(rows))
	}
	if rows := readTable(t, nb, "Logical_Switch", "name"); len(rows) != 2 {
		t.Errorf("%d logical switches, want one per subnet", len(rows))
	}
	seen := map[string]string{}
	for _, p := range readPorts(t, nb) {
		if other, dup := seen[p.Addresses[0]]; dup && p.Addresses[0] != "router" {
			t.Errorf("ports %s and %s share %s", other, p.Name, p.Addresses[0])
		}
		seen[p.Addresses[0]] = p.Name
	}
}

// outside stands for what lies beyond a VPC's gateway: an address outside every subnet of
// the VPC, on the loopback of the gateway's namespace, reached only through the router's
// default route.
var (
	outside    = netip.MustParsePrefix("192.0.2.0/24")
	redBeyond  = netip.MustParseAddr("192.0.2.10")
	blueBeyond = netip.MustParseAddr("192.0.2.20")
)

// attachVpcGateway joins a namespace of its own on ch to the VPC's gateway port, a veth
// like a pod's (podport.Attach: the gateway's MAC and link address, the VPC's subnets routed
// back through the router's link address), puts beyond on its loopback and answers TCP there
// on port 7003 with name. It returns the namespace.
func attachVpcGateway(t *testing.T, ch *ovntest.Chassis, gw Attachment, subnets []Subnet, beyond netip.Addr, name string) string {
	t.Helper()
	ns := ch.NewPod()
	att := podport.Attachment{
		Sandbox: ovntest.SandboxID(), PodNetns: ovntest.NetnsPath(ns), Node: ch.Node(),
		Port: gw.Port, Interface: "vpcgw", MAC: gw.MAC, IP: gw.IP, MTU: 1400,
	}
	for _, s := range subnets {
		att.Routes = append(att.Routes, podport.Route{Dst: s.CIDR, Via: gw.Gateway})
	}
	if err := podport.Attach(context.Background(), att); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"ip", "link", "set", "lo", "up"}, {"ip", "addr", "add", netip.PrefixFrom(beyond, 32).String(), "dev", "lo"}} {
		if out, err := ovntest.Exec(context.Background(), ns, args...); err != nil {
			t.Fatalf("%v in %s: %v: %s", args, ns, err, out)
		}
	}
	serveName(t, ns, beyond, 7003, name)
	return ns
}

// answersWithin dials ip:7003 from netns until the answer is want or the time is up, and
// returns the last answer and error.
func answersWithin(from string, ip netip.Addr, want string, d time.Duration) (string, error) {
	deadline := time.Now().Add(d)
	for {
		got, err := dialAnswer(from, ip, 7003)
		if (err == nil && got == want) || time.Now().After(deadline) {
			return got, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// boundWithin waits until the southbound database binds port to chassis ("" for none).
func boundWithin(t *testing.T, central *ovntest.Central, port, chassis string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got := central.BoundChassis(t, port)
		if got == chassis {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("port %s is bound to %q, want %q", port, got, chassis)
		}
	}
}

// TestVpcGatewaysLeadOutAndFollowTheirChassis gives red and blue, VPCs with identical
// subnets, each a gateway on the same gateway chassis (real OVN daemons: a pod chassis and two
// gateway chassis on a Geneve underlay), and attaches each gateway port into a namespace of
// its own there. Red's pods, on both subnets, reach an address that only red's gateway holds
// (outside the VPC's subnets: the router's default route), blue's reach blue's, and neither
// reaches the other's. A second Apply writes nothing. Moving red's gateway to the second
// chassis updates its port's row in place (same UUID, blue's untouched) and rebinds it there
// once that chassis attaches it, and red's traffic follows; removing the gateway removes its
// rows and the way out, and DeleteVpc leaves no gateway row.
func TestVpcGatewaysLeadOutAndFollowTheirChassis(t *testing.T) {
	central := ovntest.StartCentral(t)
	podNode := ovntest.StartChassis(t, central)
	gwA, gwB := ovntest.StartChassis(t, central), ovntest.StartChassis(t, central)
	ovntest.Underlay(t, 248, podNode, gwA, gwB)
	c := connect(t, central.NB)
	ctx := context.Background()

	subnets := []Subnet{{Name: "a", CIDR: netip.MustParsePrefix("10.112.0.0/24")}, {Name: "b", CIDR: netip.MustParsePrefix("10.112.1.0/24")}}
	vpcPod := func(name, subnet string) VpcPod {
		return VpcPod{Pod: Pod{Namespace: "apps", Name: name, UID: name}, Subnet: subnet}
	}
	red := Vpc{ClusterID: "east", Name: "red", Subnets: subnets, Pods: []VpcPod{vpcPod("p1", "a"), vpcPod("p2", "b")},
		Gateway: &VpcGateway{Chassis: gwA.Name()}}
	blue := Vpc{ClusterID: "east", Name: "blue", Subnets: subnets, Pods: []VpcPod{vpcPod("p1", "a")},
		Gateway: &VpcGateway{Chassis: gwA.Name()}}
	redRes, blueRes := applyVpc(t, c, red), applyVpc(t, c, blue)
	k := func(name string) PodKey { return PodKey{Namespace: "apps", Name: name} }
	r1, r2, b1 := redRes.Attached[k("p1")], redRes.Attached[k("p2")], blueRes.Attached[k("p1")]
	rg, bg := redRes.Gateway, blueRes.Gateway
	if rg.Port != VpcGatewayPortName("east", "red") || rg.IP != netip.MustParsePrefix("100.127.255.254/30") ||
		rg.Gateway != netip.MustParseAddr("100.127.255.253") || bg.IP != rg.IP || bg.Port == rg.Port {
		t.Fatalf("gateways: red %+v, blue %+v; want the link's second host on ports of their own", rg, bg)
	}
	if r1.IP != b1.IP {
		t.Fatalf("red's p1 at %s, blue's at %s: want the same address", r1.IP, b1.IP)
	}

	nsR1 := attachVpcPod(t, podNode, central.NB, r1, subnets[1].CIDR, outside)
	nsR2 := attachVpcPod(t, podNode, central.NB, r2, subnets[0].CIDR, outside)
	nsB1 := attachVpcPod(t, podNode, central.NB, b1, subnets[1].CIDR, outside)
	attachVpcGateway(t, gwA, rg, subnets, redBeyond, "red gateway on A")
	attachVpcGateway(t, gwA, bg, subnets, blueBeyond, "blue gateway on A")
	gwA.WaitPortUp(central.NB, rg.Port)
	gwA.WaitPortUp(central.NB, bg.Port)
	boundWithin(t, central, rg.Port, gwA.Name())

	// Each VPC's pods leave through their own gateway, from either subnet.
	for _, tc := range []struct {
		from, what string
		to         netip.Addr
		want       string
	}{
		{nsR1, "red p1 (subnet a)", redBeyond, "red gateway on A"},
		{nsR2, "red p2 (subnet b)", redBeyond, "red gateway on A"},
		{nsB1, "blue p1", blueBeyond, "blue gateway on A"},
	} {
		if got, err := answersWithin(tc.from, tc.to, tc.want, 20*time.Second); err != nil || got != tc.want {
			t.Fatalf("%s -> %s: %q, %v; want %q", tc.what, tc.to, got, err, tc.want)
		}
	}
	// And never through the other's, though both gateways are on one node with one address.
	if got, err := dialAnswer(nsB1, redBeyond, 7003); err == nil || strings.HasPrefix(got, "red") {
		t.Errorf("blue p1 -> %s (behind red's gateway): %q: blue reaches red's gateway", redBeyond, got)
	}
	if got, err := dialAnswer(nsR1, blueBeyond, 7003); err == nil || strings.HasPrefix(got, "blue") {
		t.Errorf("red p1 -> %s (behind blue's gateway): %q: red reaches blue's gateway", blueBeyond, got)
	}

	// The same VPCs again: nothing to write.
	before := dumpNB(t, central.NB)
	for _, v := range []Vpc{red, blue} {
		obs, err := c.observeVpc(ctx, v.ClusterID, v.Name)
		if err != nil {
			t.Fatal(err)
		}
		blocks, _ := v.validate()
		if p := makeVpcPlan(v, blocks, obs); !p.empty() {
			t.Errorf("VPC %s: the plan against what Apply wrote is not empty: %+v", v.Name, p)
		}
		applyVpc(t, c, v)
	}
	if after := dumpNB(t, central.NB); after != before {
		t.Errorf("a second Apply changed the database:\nbefore %s\nafter  %s", before, after)
	}

	// Red's gateway moves to B: the same row, requested there; A lets it go, B binds it once
	// it has the interface, and red's traffic follows. Blue's is not touched.
	rowOf := func(port string) string {
		t.Helper()
		out, err := central.NB.Ctl(ctx, "--bare", "--columns=_uuid,options", "find", "Logical_Switch_Port", "name="+port)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(out), " ")
	}
	redRow, blueRow := rowOf(rg.Port), rowOf(bg.Port)
	red.Gateway = &VpcGateway{Chassis: gwB.Name()}
	if res := applyVpc(t, c, red); !res.Gateway.Equal(rg) {
		t.Errorf("after the move red's gateway is %+v, was %+v", res.Gateway, rg)
	}
	if got := rowOf(rg.Port); got != strings.Replace(redRow, gwA.Name(), gwB.Name(), 1) || got == redRow {
		t.Errorf("red's gateway row after the move: %q, was %q: want the same row requested on %s", got, redRow, gwB.Name())
	}
	if got := rowOf(bg.Port); got != blueRow {
		t.Errorf("moving red's gateway changed blue's: %q, was %q", got, blueRow)
	}
	boundWithin(t, central, rg.Port, "")
	attachVpcGateway(t, gwB, rg, subnets, redBeyond, "red gateway on B")
	boundWithin(t, central, rg.Port, gwB.Name())
	if got, err := answersWithin(nsR1, redBeyond, "red gateway on B", 20*time.Second); err != nil || got != "red gateway on B" {
		t.Fatalf("red p1 -> %s after the move: %q, %v; want B's gateway", redBeyond, got, err)
	}
	if got, err := answersWithin(nsB1, blueBeyond, "blue gateway on A", 5*time.Second); err != nil || got != "blue gateway on A" {
		t.Errorf("blue p1 -> %s after red's move: %q, %v", blueBeyond, got, err)
	}
	if got := central.BoundChassis(t, bg.Port); got != gwA.Name() {
		t.Errorf("blue's gateway port is bound to %q, want A's %s", got, gwA.Name())
	}

	// Red without a gateway: its rows go, and nothing leaves red; red's pods still meet.
	red.Gateway = nil
	if res := applyVpc(t, c, red); res.Gateway.Port != "" {
		t.Errorf("red without a gateway reports %+v", res.Gateway)
	}
	if rows := gatewayRows(t, central.NB, "red"); len(rows) != 0 {
		t.Errorf("red's gateway rows after it was removed: %v", rows)
	}
	if got, err := dialAnswer(nsR1, redBeyond, 7003); err == nil {
		t.Errorf("red p1 -> %s without a gateway: answered %q", redBeyond, got)
	}
	ovntest.ExchangeTCP(t, nsR1, nsR2, r2.IP.Addr())

	// DeleteVpc takes blue's gateway rows with the rest of blue.
	if rows := gatewayRows(t, central.NB, "blue"); len(rows) != 5 {
		t.Errorf("blue's gateway rows %v, want 5 (link switch, router port, two switch ports, route)", rows)
	}
	if err := c.DeleteVpc(ctx, "east", "blue"); err != nil {
		t.Fatal(err)
	}
	if rows := gatewayRows(t, central.NB, "blue"); len(rows) != 0 {
		t.Errorf("DeleteVpc left blue's gateway rows %v", rows)
	}
	if out, err := central.NB.Ctl(ctx, "--bare", "--columns=_uuid", "list", "Logical_Router_Static_Route"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("static routes left: %q, %v", out, err)
	}
}

// gatewayRows lists the rows of a VPC's gateway (the gateway role) in every table it writes.
func gatewayRows(t *testing.T, nb *ovntest.Server, vpc string) []string {
	t.Helper()
	var rows []string
	for _, table := range append(slices.Clone(vpcTables), "Logical_Router_Static_Route") {
		out, err := nb.Ctl(context.Background(), "--bare", "--columns=_uuid", "find", table,
			"external_ids:octopus.io/vpc="+vpc, "external_ids:octopus.io/role=gateway")
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range strings.Fields(out) {
			rows = append(rows, table+" "+u)
		}
	}
	return rows
}
