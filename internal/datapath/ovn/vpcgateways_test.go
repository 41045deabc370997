package ovn

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn/sbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// rowsOf are the switches and switch ports ApplyVpc would write for the plans, as a gateway
// node's VpcGatewaysOn reads them.
func rowsOf(plans ...vpcPlan) ([]nbdb.LogicalSwitchPort, []nbdb.LogicalSwitch) {
	var ports []nbdb.LogicalSwitchPort
	var switches []nbdb.LogicalSwitch
	for _, p := range plans {
		for _, s := range p.subnets {
			switches = append(switches, nbdb.LogicalSwitch{Name: s.name, ExternalIDs: s.plan.switchIDs})
			ports = append(ports, s.plan.create...)
		}
		if g := p.gateway; g != nil {
			switches = append(switches, nbdb.LogicalSwitch{Name: "link", ExternalIDs: g.switchIDs})
			ports = append(ports, g.create...)
		}
	}
	return ports, switches
}

// TestVpcGatewaysOn reads back, from the rows ApplyVpc writes, the gateways a chassis must
// attach: its own cluster's VPCs whose gateway is requested there, each with its subnets,
// and the very attachment ApplyVpc reported; not another chassis's, another cluster's, a VPC
// without a gateway, nor the link switch's router port, which carries the same marks. A
// gateway port not as ApplyVpc writes it fails the answer.
func TestVpcGatewaysOn(t *testing.T) {
	subnets := []Subnet{{Name: "b", CIDR: netip.MustParsePrefix("10.1.1.0/24")}, {Name: "a", CIDR: netip.MustParsePrefix("10.1.0.0/24")}}
	redIP := netip.MustParseAddr("242.1.0.9")
	plan := func(cluster, vpc, chassis string) vpcPlan {
		v := Vpc{ClusterID: cluster, Name: vpc, Subnets: subnets, Pods: []VpcPod{vpod("p1", "a")}}
		if chassis != "" {
			v.Gateway = &VpcGateway{Chassis: chassis}
		}
		if cluster == "east" && vpc == "red" {
			v.Gateway.ExternalIP = redIP
		}
		return mustPlan(t, v, vpcObserved{})
	}
	red, blue := plan("east", "red", "node-a"), plan("east", "blue", "node-a")
	plans := []vpcPlan{red, blue, plan("east", "green", "node-b"), plan("east", "grey", ""), plan("west", "red", "node-a")}
	ports, switches := rowsOf(plans...)
	want := []VpcGatewayPort{
		{Vpc: "blue", Attachment: blue.result.Gateway, Subnets: []netip.Prefix{subnets[1].CIDR, subnets[0].CIDR}},
		{Vpc: "red", Attachment: red.result.Gateway, Subnets: []netip.Prefix{subnets[1].CIDR, subnets[0].CIDR}, ExternalIP: redIP},
	}
	for _, tc := range []struct {
		cluster, chassis string
		want             []VpcGatewayPort
	}{
		{"east", "node-a", want},
		{"east", "node-b", []VpcGatewayPort{{Vpc: "green", Attachment: plans[2].result.Gateway, Subnets: want[0].Subnets}}},
		{"east", "node-c", nil},
		{"west", "node-a", []VpcGatewayPort{{Vpc: "red", Attachment: plans[4].result.Gateway, Subnets: want[0].Subnets}}},
	} {
		got, err := vpcGatewaysOn(tc.cluster, tc.chassis, ports, switches)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(got, tc.want, func(a, b VpcGatewayPort) bool {
			return a.Vpc == b.Vpc && a.Equal(b.Attachment) && slices.Equal(a.Subnets, b.Subnets) && a.ExternalIP == b.ExternalIP
		}) {
			t.Errorf("vpcGatewaysOn(%s, %s) = %+v, want %+v", tc.cluster, tc.chassis, got, tc.want)
		}
	}
	if g := want[1].Attachment; g.IP.String() != "100.127.255.254/30" || g.Gateway.String() != "100.127.255.253" || g.Port != "octopus-east.red.gateway.port" {
		t.Errorf("red's gateway %+v", g)
	}

	// A gateway port with an external address that is no IPv4 address refuses the whole
	// answer, naming the key: the node must not SNAT to half an address.
	for _, bad := range []string{"242.1.0", "2001:db8::9"} {
		broken := slices.Clone(ports)
		for i := range broken {
			if broken[i].Name == VpcGatewayPortName("east", "red") {
				broken[i].ExternalIDs = maps.Clone(broken[i].ExternalIDs)
				broken[i].ExternalIDs[owner.OVNKeyExternalIP] = bad
			}
		}
		if got, err := vpcGatewaysOn("east", "node-a", broken, switches); err == nil || !strings.Contains(err.Error(), owner.OVNKeyExternalIP) {
			t.Errorf("vpcGatewaysOn with external address %q = %+v, %v; want an error naming %s", bad, got, err, owner.OVNKeyExternalIP)
		}
	}

	// A gateway port whose address is not the link's gateway address refuses the whole answer.
	for i := range ports {
		if ports[i].Name == VpcGatewayPortName("east", "red") {
			ports[i].Addresses = []string{"0a:58:64:7f:ff:fe 10.9.9.9"}
		}
	}
	if got, err := vpcGatewaysOn("east", "node-a", ports, switches); err == nil || !strings.Contains(err.Error(), "octopus-east.red.gateway.port") {
		t.Errorf("vpcGatewaysOn with a malformed port = %+v, %v; want an error naming it", got, err)
	}
}

// gatewayReader is what a gateway node reads its VPC gateways through: Client (NB) or
// SBClient (SB).
type gatewayReader interface {
	VpcGatewaysOn(ctx context.Context, clusterID, chassis string) ([]VpcGatewayPort, error)
	OnVpcGatewayChange(fn func())
}

// TestVpcGatewaysOnRealDatabases reads back from real databases, through a second client as a
// gateway node has, what ApplyVpc wrote: from the NB itself, and from the SB bindings
// ovn-northd makes of it (with the same answer, subnets and external address included); the
// gateway on its chassis, following a move, gone with the gateway; OnVpcGatewayChange tells
// the reader of each of these writes, and of no write that leaves the gateways alone (a pod
// added to a VPC).
func TestVpcGatewaysOnRealDatabases(t *testing.T) {
	central := ovntest.StartCentral(t)
	master := connect(t, central.NB)
	ctx := context.Background()
	for i, tc := range []struct {
		db     string
		reader func() gatewayReader
	}{
		{"NB", func() gatewayReader { return connect(t, central.NB) }},
		{"SB", func() gatewayReader { return connectSB(t, central.SB) }},
	} {
		t.Run(tc.db, func(t *testing.T) {
			checkGatewayReader(t, ctx, master, tc.reader(), fmt.Sprintf("red%d", i))
		})
	}

	// Both readers give one answer, to the byte.
	red := Vpc{ClusterID: "east", Name: "red", Subnets: testSubnets, Pods: []VpcPod{vpod("p1", "a")},
		Gateway: &VpcGateway{Chassis: "gw-a", ExternalIP: netip.MustParseAddr("242.1.0.9")}}
	applyVpc(t, master, red)
	nb, sb := connect(t, central.NB), connectSB(t, central.SB)
	eventually(t, "the SB answer equal to the NB one", func() error {
		fromNB, errNB := nb.VpcGatewaysOn(ctx, "east", "gw-a")
		fromSB, errSB := sb.VpcGatewaysOn(ctx, "east", "gw-a")
		if err := errors.Join(errNB, errSB); err != nil {
			return err
		}
		if len(fromNB) != 1 || fmt.Sprintf("%+v", fromNB) != fmt.Sprintf("%+v", fromSB) {
			return fmt.Errorf("NB %+v, SB %+v", fromNB, fromSB)
		}
		return nil
	})
}

// eventually retries check for 10 s, as testenv.Eventually does (this package's tests do not
// link testenv and its Kubernetes dependencies).
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = check(); err == nil {
			return
		}
	}
	t.Fatalf("%s: %v", what, err)
}

func connectSB(t *testing.T, sb *ovntest.Server) *SBClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ConnectSB(ctx, Options{Endpoint: sb.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// checkGatewayReader runs VPC vpc through ApplyVpc (master) and follows it with node.
func checkGatewayReader(t *testing.T, ctx context.Context, master *Client, node gatewayReader, vpc string) {
	var mu sync.Mutex
	changes := 0
	node.OnVpcGatewayChange(func() { mu.Lock(); changes++; mu.Unlock() })
	changed := func() int { mu.Lock(); defer mu.Unlock(); return changes }
	// libovsdb runs the handlers after it updates the cache, on a goroutine of its own: a
	// change told is awaited, and "none told" is judged only from a count that has settled.
	told := func(n int, what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); changed() == n; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("%s without a change told", what)
				return
			}
		}
	}
	settled := func() int {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for last := changed(); ; last = changed() {
			time.Sleep(300 * time.Millisecond)
			if changed() == last {
				return last
			}
			if time.Now().After(deadline) {
				t.Fatalf("changes still told after 10 s (%d)", changed())
			}
		}
	}
	// until waits for the node's answer on chassis to be the VPCs want.
	until := func(chassis string, want []string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			got, err := node.VpcGatewaysOn(ctx, "east", chassis)
			var names []string
			for _, g := range got {
				names = append(names, g.Vpc)
			}
			if err == nil && slices.Equal(names, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("VpcGatewaysOn(%s) = %v, %v; want %v", chassis, names, err, want)
			}
		}
	}
	red := Vpc{ClusterID: "east", Name: vpc, Subnets: testSubnets, Gateway: &VpcGateway{Chassis: "gw-a"}}
	n := changed()
	applyVpc(t, master, red)
	until("gw-a", []string{vpc})
	told(n, "the gateway's rows were written")
	n = settled()
	red.Pods = []VpcPod{vpod("p1", "a")}
	applyVpc(t, master, red)
	time.Sleep(300 * time.Millisecond) // the pod's row reaches the node's cache
	if changed() != n {
		t.Errorf("a pod added to %s told %d changes, want none: the gateways did not change", vpc, changed()-n)
	}
	red.Gateway.Chassis = "gw-b"
	applyVpc(t, master, red)
	until("gw-a", nil)
	until("gw-b", []string{vpc})
	told(n, "the gateway moved")
	n = settled()
	if err := master.DeleteVpc(ctx, "east", vpc); err != nil {
		t.Fatal(err)
	}
	until("gw-b", nil)
	told(n, "the VPC deleted")
}

// TestVpcGatewaysFromBindings reads the gateways out of SB bindings as ovn-northd copies them
// from the rows ApplyVpc writes: the same answer as from the NB rows; a binding without its
// subnets, or with one that is no CIDR, fails the answer naming the key.
func TestVpcGatewaysFromBindings(t *testing.T) {
	v := Vpc{ClusterID: "east", Name: "red", Subnets: testSubnets, Pods: []VpcPod{vpod("p1", "a")},
		Gateway: &VpcGateway{Chassis: "node-a", ExternalIP: netip.MustParseAddr("242.1.0.9")}}
	ports, switches := rowsOf(mustPlan(t, v, vpcObserved{}))
	bindings := make([]sbdb.PortBinding, 0, len(ports))
	for _, p := range ports {
		bindings = append(bindings, sbdb.PortBinding{LogicalPort: p.Name, MAC: p.Addresses, ExternalIDs: p.ExternalIDs, Options: p.Options})
	}
	want, err := vpcGatewaysOn("east", "node-a", ports, switches)
	if err != nil || len(want) != 1 {
		t.Fatalf("from the NB rows: %+v, %v", want, err)
	}
	got, err := vpcGatewaysFromBindings("east", "node-a", bindings)
	if err != nil || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("from the bindings: %+v, %v; want %+v", got, err, want)
	}
	if got, err := vpcGatewaysFromBindings("east", "node-b", bindings); err != nil || len(got) != 0 {
		t.Errorf("on another chassis: %+v, %v; want none", got, err)
	}
	for _, bad := range []string{"", "10.1.0.0/24,10.1.1.1/24", "10.1.0.0/24,2001:db8::/64", "red"} {
		broken := slices.Clone(bindings)
		for i := range broken {
			if broken[i].LogicalPort == VpcGatewayPortName("east", "red") {
				broken[i].ExternalIDs = maps.Clone(broken[i].ExternalIDs)
				broken[i].ExternalIDs[owner.OVNKeySubnets] = bad
			}
		}
		if got, err := vpcGatewaysFromBindings("east", "node-a", broken); err == nil || !strings.Contains(err.Error(), owner.OVNKeySubnets) {
			t.Errorf("subnets %q: %+v, %v; want an error naming %s", bad, got, err, owner.OVNKeySubnets)
		}
	}
}
