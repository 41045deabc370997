package ovn

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/ipam/hostaddr"
)

const testCluster = "east"

func pod(name string) Pod { return Pod{Namespace: "default", Name: name, UID: name + "-uid"} }

func key(name string) PodKey { return PodKey{Namespace: "default", Name: name} }

// existing is a port as an earlier Apply wrote it, with a UUID.
func existing(p Pod, ip string) nbdb.LogicalSwitchPort {
	row := portRow(testCluster, p, netip.MustParseAddr(ip))
	row.UUID = "uuid-" + p.Name
	return row
}

func sw(lastAllocated string, ports ...nbdb.LogicalSwitchPort) *nbdb.LogicalSwitch {
	s := &nbdb.LogicalSwitch{UUID: "sw", Name: SwitchName(testCluster), ExternalIDs: map[string]string{
		owner.OVNKeyOwner: owner.OVNOwnerSecondary, owner.OVNKeyCluster: testCluster, owner.OVNKeyCIDR: "10.1.0.0/24",
	}}
	if lastAllocated != "" {
		s.ExternalIDs[owner.OVNKeyLastAllocated] = lastAllocated
	}
	for _, p := range ports {
		s.Ports = append(s.Ports, p.UUID)
	}
	return s
}

func TestMakePlan(t *testing.T) {
	foreign := nbdb.LogicalSwitchPort{UUID: "uuid-foreign", Name: "gw", Addresses: []string{"0a:00:00:00:00:01 10.1.0.3"}}
	dynamic := "0a:00:00:00:00:02 10.1.0.4"
	foreignDynamic := nbdb.LogicalSwitchPort{UUID: "uuid-dyn", Name: "dyn", Addresses: []string{"dynamic"}, DynamicAddresses: &dynamic}
	stale := existing(pod("a"), "10.1.0.2")
	stale.ExternalIDs[owner.OVNKeyPodUID] = "old-uid"
	edited := existing(pod("a"), "10.1.0.2")
	edited.PortSecurity = nil
	outside := existing(pod("a"), "10.9.0.2")
	otherCluster := existing(pod("z"), "10.1.0.9")
	otherCluster.ExternalIDs[owner.OVNKeyCluster] = "west"
	misnamed := existing(pod("a"), "10.1.0.2")
	misnamed.Name = "a"

	for _, tc := range []struct {
		name     string
		pods     []Pod
		obs      observed
		attached map[string]string // pod -> address
		failed   map[string]error
		create   []string // port names
		update   []string
		remove   []string // UUIDs
		cursor   string
	}{
		{
			name:     "new switch, addresses in turn after the gateway",
			pods:     []Pod{pod("b"), pod("a")},
			attached: map[string]string{"a": "10.1.0.2", "b": "10.1.0.3"},
			create:   []string{"east_default_a", "east_default_b"},
			cursor:   "10.1.0.3",
		},
		{
			name:     "unchanged network plans nothing",
			pods:     []Pod{pod("a")},
			obs:      observed{sw: sw("10.1.0.2", existing(pod("a"), "10.1.0.2")), ports: []nbdb.LogicalSwitchPort{existing(pod("a"), "10.1.0.2")}},
			attached: map[string]string{"a": "10.1.0.2"},
			cursor:   "10.1.0.2",
		},
		{
			name:     "continues after the last allocated, not at the lowest free",
			pods:     []Pod{pod("a"), pod("b")},
			obs:      observed{sw: sw("10.1.0.7", existing(pod("a"), "10.1.0.2")), ports: []nbdb.LogicalSwitchPort{existing(pod("a"), "10.1.0.2")}},
			attached: map[string]string{"a": "10.1.0.2", "b": "10.1.0.8"},
			create:   []string{"east_default_b"},
			cursor:   "10.1.0.8",
		},
		{
			name:     "a deleted pod's port goes; its address is not reused at once",
			pods:     []Pod{pod("c")},
			obs:      observed{sw: sw("", existing(pod("a"), "10.1.0.2")), ports: []nbdb.LogicalSwitchPort{existing(pod("a"), "10.1.0.2")}},
			attached: map[string]string{"c": "10.1.0.3"},
			create:   []string{"east_default_c"},
			remove:   []string{"uuid-a"},
			cursor:   "10.1.0.3",
		},
		{
			name:     "foreign ports' addresses, static and dynamic, are in use and kept",
			pods:     []Pod{pod("a")},
			obs:      observed{sw: sw("10.1.0.2", foreign, foreignDynamic), ports: []nbdb.LogicalSwitchPort{foreign, foreignDynamic}},
			attached: map[string]string{"a": "10.1.0.5"},
			create:   []string{"east_default_a"},
			cursor:   "10.1.0.5",
		},
		{
			name:     "a pod recreated under the same name gets a new port and address",
			pods:     []Pod{pod("a")},
			obs:      observed{sw: sw("10.1.0.2", stale), ports: []nbdb.LogicalSwitchPort{stale}},
			attached: map[string]string{"a": "10.1.0.3"},
			create:   []string{"east_default_a"},
			remove:   []string{"uuid-a"},
			cursor:   "10.1.0.3",
		},
		{
			name:     "an edited row is repaired in place, keeping its address",
			pods:     []Pod{pod("a")},
			obs:      observed{sw: sw("10.1.0.2", edited), ports: []nbdb.LogicalSwitchPort{edited}},
			attached: map[string]string{"a": "10.1.0.2"},
			update:   []string{"east_default_a"},
			cursor:   "10.1.0.2",
		},
		{
			name:     "an address outside a changed block is replaced",
			pods:     []Pod{pod("a")},
			obs:      observed{sw: sw("", outside), ports: []nbdb.LogicalSwitchPort{outside}},
			attached: map[string]string{"a": "10.1.0.2"},
			create:   []string{"east_default_a"},
			remove:   []string{"uuid-a"},
			cursor:   "10.1.0.2",
		},
		{
			name:     "a row of ours with a name Apply would not write is removed",
			pods:     []Pod{pod("a")},
			obs:      observed{sw: sw("10.1.0.2", misnamed), ports: []nbdb.LogicalSwitchPort{misnamed}},
			attached: map[string]string{"a": "10.1.0.3"},
			create:   []string{"east_default_a"},
			remove:   []string{"uuid-a"},
			cursor:   "10.1.0.3",
		},
		{
			name:     "another cluster's port on the switch is foreign",
			pods:     []Pod{},
			obs:      observed{sw: sw("10.1.0.2", otherCluster), ports: []nbdb.LogicalSwitchPort{otherCluster}},
			attached: map[string]string{},
			cursor:   "10.1.0.2",
		},
		{
			name: "requested addresses: honoured, in use, reserved, outside",
			pods: []Pod{
				{Namespace: "default", Name: "want", UID: "1", RequestedIP: netip.MustParseAddr("10.1.0.77")},
				{Namespace: "default", Name: "taken", UID: "2", RequestedIP: netip.MustParseAddr("10.1.0.3")},
				{Namespace: "default", Name: "gw", UID: "3", RequestedIP: netip.MustParseAddr("10.1.0.1")},
				{Namespace: "default", Name: "far", UID: "4", RequestedIP: netip.MustParseAddr("192.0.2.1")},
			},
			obs:      observed{sw: sw("", foreign), ports: []nbdb.LogicalSwitchPort{foreign}},
			attached: map[string]string{"want": "10.1.0.77"},
			failed:   map[string]error{"taken": hostaddr.ErrInUse, "gw": hostaddr.ErrReserved, "far": hostaddr.ErrOutsideBlock},
			create:   []string{"east_default_want"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			block, err := Network{ClusterID: testCluster, CIDR: netip.MustParsePrefix("10.1.0.0/24"), Pods: tc.pods}.validate()
			if err != nil {
				t.Fatal(err)
			}
			p := makePlan(Network{ClusterID: testCluster, CIDR: block.Prefix(), Pods: tc.pods}, block, tc.obs)
			got := map[string]string{}
			for k, a := range p.result.Attached {
				got[k.Name] = a.IP.Addr().String()
				if a.IP.Bits() != 24 || a.Gateway != netip.MustParseAddr("10.1.0.1") || a.MAC.String() != MACFor(a.IP.Addr()).String() {
					t.Errorf("attachment of %s = %+v", k, a)
				}
			}
			if !maps.Equal(got, tc.attached) {
				t.Errorf("attached %v, want %v", got, tc.attached)
			}
			if len(p.result.Failed) != len(tc.failed) {
				t.Errorf("failed %v, want %v", p.result.Failed, tc.failed)
			}
			for name, want := range tc.failed {
				if err := p.result.Failed[key(name)]; !errors.Is(err, want) {
					t.Errorf("pod %s failed with %v, want %v", name, err, want)
				}
			}
			if names := portNames(p.create); !slices.Equal(names, tc.create) {
				t.Errorf("create %v, want %v", names, tc.create)
			}
			if names := portNames(p.update); !slices.Equal(names, tc.update) {
				t.Errorf("update %v, want %v", names, tc.update)
			}
			if !slices.Equal(p.remove, tc.remove) {
				t.Errorf("remove %v, want %v", p.remove, tc.remove)
			}
			if c := p.switchIDs[owner.OVNKeyLastAllocated]; c != tc.cursor {
				t.Errorf("last allocated %q, want %q", c, tc.cursor)
			}
			if p.createSwitch != (tc.obs.sw == nil) {
				t.Errorf("createSwitch = %v", p.createSwitch)
			}
		})
	}
}

func TestPlanExhaustion(t *testing.T) {
	n := Network{ClusterID: testCluster, CIDR: netip.MustParsePrefix("10.1.0.0/29")}
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		n.Pods = append(n.Pods, pod(name))
	}
	block, err := n.validate()
	if err != nil {
		t.Fatal(err)
	}
	p := makePlan(n, block, observed{})
	if len(p.result.Attached) != 5 || len(p.create) != 5 {
		t.Fatalf("a /29 has 5 addresses for pods; attached %d, created %d", len(p.result.Attached), len(p.create))
	}
	for _, name := range []string{"f", "g"} {
		if !errors.Is(p.result.Failed[key(name)], hostaddr.ErrExhausted) {
			t.Errorf("pod %s: %v, want ErrExhausted", name, p.result.Failed[key(name)])
		}
	}
}

func TestValidate(t *testing.T) {
	cidr := netip.MustParsePrefix("10.1.0.0/24")
	for _, tc := range []struct {
		name string
		n    Network
	}{
		{"bad cluster ID", Network{ClusterID: "East_1", CIDR: cidr}},
		{"no CIDR", Network{ClusterID: "east"}},
		{"IPv6 block", Network{ClusterID: "east", CIDR: netip.MustParsePrefix("fd00::/64")}},
		{"pod without UID", Network{ClusterID: "east", CIDR: cidr, Pods: []Pod{{Namespace: "default", Name: "a"}}}},
		{"pod twice", Network{ClusterID: "east", CIDR: cidr, Pods: []Pod{pod("a"), pod("a")}}},
		{"underscore in a name", Network{ClusterID: "east", CIDR: cidr, Pods: []Pod{pod("a_b")}}},
		{"two gateway chassis", Network{ClusterID: "east", CIDR: cidr, GatewayChassis: "node-a,node-b"}},
		{"a space in the gateway chassis", Network{ClusterID: "east", CIDR: cidr, GatewayChassis: "node a"}},
	} {
		if _, err := tc.n.validate(); err == nil {
			t.Errorf("%s: validate accepted %+v", tc.name, tc.n)
		}
	}
}

func portNames(ports []nbdb.LogicalSwitchPort) []string {
	var names []string
	for _, p := range ports {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}

// gatewayPort is the gateway's port as an earlier Apply wrote it for chassis, with a UUID.
func gatewayPort(chassis string) nbdb.LogicalSwitchPort {
	row := gatewayRow(testCluster, netip.MustParseAddr("10.1.0.1"), chassis)
	row.UUID = "uuid-gw"
	return row
}

func TestMakePlanGateway(t *testing.T) {
	atA := gatewayPort("node-a")
	edited := gatewayPort("node-a")
	edited.PortSecurity = []string{"0a:58:0a:01:00:01 10.1.0.1"}
	misnamed := gatewayPort("node-a")
	misnamed.Name, misnamed.UUID = "gw", "uuid-misnamed"
	second := gatewayPort("node-a")
	second.Name, second.UUID = "gateway-2", "uuid-second"
	holder := nbdb.LogicalSwitchPort{UUID: "uuid-foreign", Name: "router", Addresses: []string{"0a:00:00:00:00:01 10.1.0.1"}}
	onGateway := existing(pod("a"), "10.1.0.1") // a pod given the gateway address under an older block

	for _, tc := range []struct {
		name    string
		chassis string
		pods    []Pod
		ports   []nbdb.LogicalSwitchPort
		create  []string // port names
		update  string   // requested chassis of the gateway port's update, "" for none
		remove  []string // UUIDs
		failed  error
		// attached: whether Result.Gateway is set
		attached bool
	}{
		{name: "no active gateway, no port", ports: nil},
		{name: "a new active gateway gets its port", chassis: "node-a", create: []string{"east_gateway"}, attached: true},
		{name: "an unchanged port plans nothing", chassis: "node-a", ports: []nbdb.LogicalSwitchPort{atA}, attached: true},
		{name: "failover is one update of the port's options", chassis: "node-b", ports: []nbdb.LogicalSwitchPort{atA}, update: "node-b", attached: true},
		{name: "no active gateway removes the port", ports: []nbdb.LogicalSwitchPort{atA}, remove: []string{"uuid-gw"}},
		{name: "an edited port is repaired", chassis: "node-a", ports: []nbdb.LogicalSwitchPort{edited}, update: "node-a", attached: true},
		{name: "a misnamed gateway port of ours is replaced", chassis: "node-a", ports: []nbdb.LogicalSwitchPort{misnamed},
			create: []string{"east_gateway"}, remove: []string{"uuid-misnamed"}, attached: true},
		{name: "a second gateway port of ours is removed", chassis: "node-a", ports: []nbdb.LogicalSwitchPort{atA, second},
			remove: []string{"uuid-second"}, attached: true},
		{name: "a foreign port holding the gateway address keeps it", chassis: "node-a", ports: []nbdb.LogicalSwitchPort{holder},
			failed: hostaddr.ErrInUse},
		{name: "ours made first stays beside a foreign one", chassis: "node-a", ports: []nbdb.LogicalSwitchPort{atA, holder}, attached: true},
		{name: "a pod on the gateway address is re-addressed", chassis: "node-a", pods: []Pod{pod("a")}, ports: []nbdb.LogicalSwitchPort{onGateway},
			create: []string{"east_default_a", "east_gateway"}, remove: []string{"uuid-a"}, attached: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := Network{ClusterID: testCluster, CIDR: netip.MustParsePrefix("10.1.0.0/24"), GatewayChassis: tc.chassis, Pods: tc.pods}
			block, err := n.validate()
			if err != nil {
				t.Fatal(err)
			}
			p := makePlan(n, block, observed{sw: sw("10.1.0.2", tc.ports...), ports: tc.ports})
			if names := portNames(p.create); !slices.Equal(names, tc.create) {
				t.Errorf("create %v, want %v", names, tc.create)
			}
			for _, c := range p.create {
				if c.Name == "east_gateway" && !sameGatewayRow(c, gatewayRow(testCluster, block.Gateway(), tc.chassis)) {
					t.Errorf("created gateway port %+v", c)
				}
			}
			switch {
			case tc.update == "" && p.updateGateway != nil:
				t.Errorf("gateway port updated to %+v, want no update", *p.updateGateway)
			case tc.update != "" && (p.updateGateway == nil || p.updateGateway.UUID != "uuid-gw" ||
				!sameGatewayRow(*p.updateGateway, gatewayRow(testCluster, block.Gateway(), tc.update))):
				t.Errorf("gateway port update %+v, want the row for %s on uuid-gw", p.updateGateway, tc.update)
			}
			if len(p.update) != 0 {
				t.Errorf("pod ports updated: %v", portNames(p.update))
			}
			if !slices.Equal(p.remove, tc.remove) {
				t.Errorf("remove %v, want %v", p.remove, tc.remove)
			}
			if !errors.Is(p.result.GatewayFailed, tc.failed) || (tc.failed == nil) != (p.result.GatewayFailed == nil) {
				t.Errorf("GatewayFailed = %v, want %v", p.result.GatewayFailed, tc.failed)
			}
			want := Attachment{}
			if tc.attached {
				want = Attachment{Port: "east_gateway", MAC: MACFor(block.Gateway()), IP: netip.MustParsePrefix("10.1.0.1/24"), Gateway: block.Gateway()}
			}
			if !p.result.Gateway.Equal(want) {
				t.Errorf("Result.Gateway = %+v, want %+v", p.result.Gateway, want)
			}
			if pa, ok := p.result.Attached[key("a")]; ok && pa.IP.Addr() == block.Gateway() {
				t.Errorf("pod a kept the gateway address")
			}
			if len(tc.create) == 0 && tc.update == "" && len(tc.remove) == 0 && !p.empty() {
				t.Errorf("plan is not empty: %+v", p)
			}
		})
	}
}

// TestGatewayRow pins what OVN is told about the gateway's port: the address of the block's
// gateway, port security on the MAC alone (forwarded packets carry other clusters' addresses),
// the one requested chassis, our markers.
func TestGatewayRow(t *testing.T) {
	row := gatewayRow("east", netip.MustParseAddr("10.112.0.1"), "node-a")
	if row.Name != "east_gateway" || !slices.Equal(row.Addresses, []string{"0a:58:0a:70:00:01 10.112.0.1"}) ||
		!slices.Equal(row.PortSecurity, []string{"0a:58:0a:70:00:01"}) ||
		!maps.Equal(row.Options, map[string]string{"requested-chassis": "node-a"}) ||
		!maps.Equal(row.ExternalIDs, map[string]string{owner.OVNKeyOwner: owner.OVNOwnerSecondary, owner.OVNKeyCluster: "east", owner.OVNKeyRole: owner.OVNRoleGateway}) {
		t.Errorf("gatewayRow = %+v", row)
	}
}

func sameGatewayRow(a, b nbdb.LogicalSwitchPort) bool {
	return samePort(a, b) && maps.Equal(a.Options, b.Options)
}
