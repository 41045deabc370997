package lab_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
)

// TestVpcScenarioAddresses checks the lab's VPC scenario's addresses (Options.Vpcs, vpcs.go)
// against the lab's other ranges: a VPC subnet meeting a cluster's pod or service CIDR, the
// secondary or globalnet pool or the lab's own networks would take routes from the pods' eth0,
// and an echo pod's address must be a pod address of the first subnet (not its network address
// or the router's first host) on every node a cluster may have.
func TestVpcScenarioAddresses(t *testing.T) {
	taken := map[string]netip.Prefix{
		"the LAN range": labnet.LANRange, "the underlay": labnet.UnderlayRange,
		"the secondary pool": netip.MustParsePrefix(hub.DefaultSecondaryPool.CIDR),
		"the globalnet pool": netip.MustParsePrefix(hub.DefaultGlobalnetPool.CIDR),
	}
	for i := 0; i <= lab.MaxClusters; i++ {
		taken[fmt.Sprintf("cluster %d's pod CIDR", i)] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16)
		taken[fmt.Sprintf("cluster %d's service CIDR", i)] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(96 + i), 0, 0}), 16)
	}
	subnets := lab.VpcSubnets()
	for i, s := range subnets {
		p, err := netip.ParsePrefix(s.CIDR)
		if err != nil || p != p.Masked() {
			t.Fatalf("subnet %s: %q is no masked CIDR (%v)", s.Name, s.CIDR, err)
		}
		for what, q := range taken {
			if p.Overlaps(q) {
				t.Errorf("subnet %s (%s) overlaps %s (%s)", s.Name, p, what, q)
			}
		}
		for _, o := range subnets[:i] {
			if p.Overlaps(netip.MustParsePrefix(o.CIDR)) {
				t.Errorf("subnets %s and %s overlap", s.Name, o.Name)
			}
		}
	}
	first := netip.MustParsePrefix(subnets[0].CIDR)
	seen := map[netip.Addr]int{}
	for k := 0; k <= labnet.MaxNodesPerCluster; k++ { // one more: a test's extra pod
		a := lab.VpcEchoAddr(k)
		if !first.Contains(a) || a == first.Addr() || a == first.Addr().Next() {
			t.Errorf("node %d's echo address %s is no pod address of %s", k, a, first)
		}
		if prev, dup := seen[a]; dup {
			t.Errorf("nodes %d and %d share the echo address %s", prev, k, a)
		}
		seen[a] = k
	}
}
