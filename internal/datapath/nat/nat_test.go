package nat

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/nat/nattest"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/ipam"
)

var (
	globalCIDR = netip.MustParsePrefix("242.1.0.0/16")
	webIP      = netip.MustParseAddr("242.1.0.16")
	dbIP       = netip.MustParseAddr("242.1.0.17")
	kafkaIP    = netip.MustParseAddr("242.1.0.18")
)

func rng(first, last string) ipam.Range {
	return ipam.Range{First: netip.MustParseAddr(first), Last: netip.MustParseAddr(last)}
}

func eps(s ...string) []netip.AddrPort {
	out := make([]netip.AddrPort, 0, len(s))
	for _, e := range s {
		out = append(out, netip.MustParseAddrPort(e))
	}
	return out
}

// fullState uses every feature once: merged remote CIDRs, cluster and pod egress, a service
// with two ports of different endpoint counts, one sharing a count with another service, and
// a headless pod.
func fullState() State {
	return State{
		GlobalCIDRs:  []netip.Prefix{globalCIDR},
		TunnelDevice: "octopus0",
		RemoteCIDRs: []netip.Prefix{
			netip.MustParsePrefix("242.3.0.0/16"), netip.MustParsePrefix("242.2.0.0/16"),
			netip.MustParsePrefix("242.3.4.0/24"), // inside 242.3.0.0/16: merged away
			netip.MustParsePrefix("10.5.0.0/16"),  // a direct-addressing cluster's pods
		},
		ClusterEgress: []ipam.Range{rng("242.1.0.0", "242.1.0.7")},
		PodEgress:     []PodEgress{{Pod: netip.MustParseAddr("10.244.1.7"), Range: rng("242.1.0.8", "242.1.0.9")}},
		Services: []Service{
			{Name: "demo/web", GlobalIP: webIP, Ports: []Port{
				{Protocol: UDP, Port: 53, Endpoints: eps("10.244.1.5:5353")},
				{Protocol: TCP, Port: 80, Endpoints: eps("10.244.2.6:8080", "10.244.1.5:8080")},
			}},
			{Name: "demo/db", GlobalIP: dbIP, Ports: []Port{
				{Protocol: TCP, Port: 5432, Endpoints: eps("10.244.1.9:5432")},
			}},
		},
		Pods: []PodIngress{{Name: "demo/kafka-0", GlobalIP: kafkaIP, Pod: netip.MustParseAddr("10.244.2.5")}},
	}
}

// IPv6 global addresses, from the documentation prefix 2001:db8::/32 like every IPv6 address of
// the lab.
var (
	globalCIDR6 = netip.MustParsePrefix("2001:db8:242:1::/64")
	webIP6      = netip.MustParseAddr("2001:db8:242:1::16")
	kafkaIP6    = netip.MustParseAddr("2001:db8:242:1::18")
)

// dualStackState is fullState with the same services, egress and headless pod in IPv6 beside
// the IPv4 ones: a dual-stack cluster whose pod CIDRs overlap another's in both families.
func dualStackState() State {
	s := fullState()
	s.GlobalCIDRs = append(s.GlobalCIDRs, globalCIDR6)
	s.RemoteCIDRs = append(s.RemoteCIDRs, netip.MustParsePrefix("2001:db8:242:2::/64"), netip.MustParsePrefix("2001:db8:10:5::/64"))
	s.ClusterEgress = append(s.ClusterEgress, rng("2001:db8:242:1::", "2001:db8:242:1::7"))
	s.PodEgress = append(s.PodEgress, PodEgress{Pod: netip.MustParseAddr("2001:db8:244:1::7"), Range: rng("2001:db8:242:1::8", "2001:db8:242:1::9")})
	s.Services = append(s.Services, Service{Name: "demo/web", GlobalIP: webIP6, Ports: []Port{
		{Protocol: UDP, Port: 53, Endpoints: eps("[2001:db8:244:1::5]:5353")},
		{Protocol: TCP, Port: 80, Endpoints: eps("[2001:db8:244:2::6]:8080", "[2001:db8:244:1::5]:8080")},
	}})
	s.Pods = append(s.Pods, PodIngress{Name: "demo/kafka-0", GlobalIP: kafkaIP6, Pod: netip.MustParseAddr("2001:db8:244:2::5")})
	return s
}

// ipv6OnlyState is dualStackState without its IPv4 part.
func ipv6OnlyState() State { return dualStackState().only(ipv6) }

func newFake() (*knftables.Fake, *NAT) {
	fake := knftables.NewFake(knftables.InetFamily, owner.GlobalnetNFTTable)
	return fake, NewWith(fake, Options{})
}

func TestApplyGolden(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		state State
	}{
		{"empty.golden", State{}},
		{"full.golden", fullState()},
		{"dualstack.golden", dualStackState()},
		{"ipv6.golden", ipv6OnlyState()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake, n := newFake()
			if err := n.Apply(ctx, tt.state); err != nil {
				t.Fatal(err)
			}
			nattest.Golden(t, tt.name, nattest.Dump(fake))
			// Applying it again, and from a new process that knows nothing, changes nothing.
			before := nattest.Dump(fake)
			if err := n.Apply(ctx, tt.state); err != nil {
				t.Fatal(err)
			}
			if err := NewWith(fake, Options{}).Apply(ctx, tt.state); err != nil {
				t.Fatal(err)
			}
			if after := nattest.Dump(fake); after != before {
				t.Fatalf("re-applying changed the ruleset:\n%s", after)
			}
		})
	}
}

// TestApplyTransitions applies a series of states in random order through one NAT, which sends
// only differences after its first Apply, and checks after each that the table is exactly what
// a fresh NAT writes for that state from scratch. Every state is applied twice, because a
// load-balancing chain that lost its last user is deleted one Apply late.
func TestApplyTransitions(t *testing.T) {
	ctx := context.Background()
	states := map[string]State{"empty": {}, "full": fullState()}
	s := fullState()
	s.Services = s.Services[1:] // web gone: its ports' count-2 chain goes
	states["without web"] = s
	s = fullState()
	s.Services[0].Ports[1].Endpoints = eps("10.244.2.6:8080", "10.244.1.5:8080", "10.244.3.3:8080") // scaled up
	s.Services[1].Ports[0].Endpoints = eps("10.244.1.10:5432")                                      // pod replaced
	states["scaled"] = s
	s = fullState()
	s.Pods[0].Pod = netip.MustParseAddr("10.244.2.99") // pod restarted elsewhere
	s.PodEgress = nil
	s.ClusterEgress = []ipam.Range{rng("242.1.0.0", "242.1.0.15")}
	s.RemoteCIDRs = s.RemoteCIDRs[:1]
	states["moved"] = s
	states["dual-stack"] = dualStackState()
	states["ipv6 only"] = ipv6OnlyState()
	s = dualStackState()
	s.Services = s.Services[:2] // the IPv6 web service gone
	states["dual-stack without web6"] = s
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range states {
			if !yield(k) {
				return
			}
		}
	})
	fake, n := newFake()
	for round := range 20 {
		name := names[rand.IntN(len(names))] //nolint:gosec // test order, not a secret
		for range 2 {
			if err := n.Apply(ctx, states[name]); err != nil {
				t.Fatalf("round %d, %s: %v", round, name, err)
			}
		}
		wantFake, fresh := newFake()
		if err := fresh.Apply(ctx, states[name]); err != nil {
			t.Fatal(err)
		}
		if got, want := nattest.Dump(fake), nattest.Dump(wantFake); got != want {
			t.Fatalf("round %d, %s: incremental result differs from a full apply:\n--- got\n%s--- want\n%s", round, name, got, want)
		}
	}
}

func TestRemovedServiceLeavesNothing(t *testing.T) {
	ctx := context.Background()
	fake, n := newFake()
	if err := n.Apply(ctx, fullState()); err != nil {
		t.Fatal(err)
	}
	s := fullState()
	s.Services = s.Services[1:]
	s.Pods = nil
	for range 2 { // the second Apply deletes the then-unused chain ingress-lb-2-v4
		if err := n.Apply(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	dump := fake.Dump()
	for _, gone := range []string{webIP.String(), kafkaIP.String(), "ingress-lb-2-v4", "demo/web", "10.244.2.6"} {
		if strings.Contains(dump, gone) {
			t.Errorf("ruleset still mentions %s:\n%s", gone, dump)
		}
	}
	if !strings.Contains(dump, dbIP.String()) {
		t.Errorf("ruleset lost the remaining service %s:\n%s", dbIP, dump)
	}
}

func TestInvalidStateIsRefusedBeforeTheKernel(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		modify func(*State)
		want   string
	}{
		{"ipv6 service, ipv4 endpoints", func(s *State) { s.Services[0].GlobalIP = webIP6; s.GlobalCIDRs = append(s.GlobalCIDRs, globalCIDR6) },
			"ingress address and endpoint of demo/web port 80/tcp: 2001:db8:242:1::16 and 10.244.1.5 are of different IP families"},
		{"ipv6 service without an ipv6 global CIDR", func(s *State) { s.Services[0].GlobalIP = webIP6 }, "2001:db8:242:1::16 is outside the cluster's global CIDRs"},
		{"two ipv6 global CIDRs", func(s *State) {
			s.GlobalCIDRs = append(s.GlobalCIDRs, globalCIDR6, netip.MustParsePrefix("2001:db8:242:9::/64"))
		}, "at most one per IP family"},
		{"ipv4-mapped address", func(s *State) { s.Pods[0].Pod = netip.MustParseAddr("::ffff:10.244.2.5") }, "an IPv4-mapped IPv6 address; give it as 10.244.2.5"},
		{"ipv6 pod behind an ipv4 ingress address", func(s *State) { s.Pods[0].Pod = netip.MustParseAddr("2001:db8:244:2::5") },
			"ingress address and address of demo/kafka-0: 242.1.0.18 and 2001:db8:244:2::5 are of different IP families"},
		{"ipv6 pod with an ipv4 egress range", func(s *State) { s.PodEgress[0].Pod = netip.MustParseAddr("2001:db8:244:1::7") },
			"egress range of pod 2001:db8:244:1::7: 2001:db8:244:1::7 and 242.1.0.8 are of different IP families"},
		{"outside global CIDR", func(s *State) { s.Services[0].GlobalIP = netip.MustParseAddr("242.9.0.1") }, "242.9.0.1 is outside the cluster's global CIDRs"},
		{"one IP twice", func(s *State) { s.Pods[0].GlobalIP = webIP }, "global IP 242.1.0.16 is given to both demo/web and demo/kafka-0"},
		{"remote overlaps own", func(s *State) { s.RemoteCIDRs = append(s.RemoteCIDRs, netip.MustParsePrefix("242.0.0.0/8")) }, "remote CIDR 242.0.0.0/8 overlaps the cluster's global CIDR 242.1.0.0/16"},
		{"port twice", func(s *State) { s.Services[1].Ports = append(s.Services[1].Ports, s.Services[1].Ports[0]) }, "demo/db has port 5432/tcp twice"},
		{"bad protocol", func(s *State) { s.Services[1].Ports[0].Protocol = "icmp" }, `protocol "icmp" is not one of`},
		{"reversed range", func(s *State) { s.ClusterEgress = []ipam.Range{rng("242.1.0.7", "242.1.0.0")} }, "the last address comes before the first"},
		{"egress outside", func(s *State) { s.PodEgress[0].Range = rng("242.2.0.1", "242.2.0.1") }, "242.2.0.1 is outside"},
		{"pod twice", func(s *State) { s.PodEgress = append(s.PodEgress, s.PodEgress[0]) }, "pod 10.244.1.7 has two egress ranges"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake, n := newFake()
			if err := n.Apply(ctx, fullState()); err != nil {
				t.Fatal(err)
			}
			before := nattest.Dump(fake)
			s := fullState()
			tt.modify(&s)
			err := n.Apply(ctx, s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Apply: %v; want an error containing %q", err, tt.want)
			}
			if nattest.Dump(fake) != before {
				t.Fatal("a refused state changed the ruleset")
			}
		})
	}
}

// TestFullSyncRepairs: the incremental path trusts its memory of the kernel. A failed Apply
// forgets it, and a periodic full rewrite repairs what someone else changed meanwhile.
func TestFullSyncRepairs(t *testing.T) {
	ctx := context.Background()
	fake, n := newFake()
	now := time.Unix(1000, 0)
	n.now = func() time.Time { return now }
	if err := n.Apply(ctx, fullState()); err != nil {
		t.Fatal(err)
	}
	want := nattest.Dump(fake)
	tamper := func() {
		tx := fake.NewTransaction()
		tx.Delete(&knftables.Element{Map: "ingress-pods-v4", Key: []string{kafkaIP.String()}})
		if err := fake.Run(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}

	// Removed behind our back; the incremental Apply does not look...
	tamper()
	if err := n.Apply(ctx, fullState()); err != nil {
		t.Fatal(err)
	}
	if nattest.Dump(fake) == want {
		t.Fatal("expected the incremental Apply not to notice (else this test proves nothing)")
	}
	// ...the periodic full one does.
	now = now.Add(DefaultFullSyncInterval)
	if err := n.Apply(ctx, fullState()); err != nil {
		t.Fatal(err)
	}
	if got := nattest.Dump(fake); got != want {
		t.Fatalf("full sync did not repair:\n%s", got)
	}

	// An Apply that fails (its delete of the tampered element finds nothing) is followed by
	// a full one.
	tamper()
	s := fullState()
	s.Pods = nil
	if err := n.Apply(ctx, s); err == nil {
		t.Fatal("deleting a missing element should fail")
	}
	if err := n.Apply(ctx, fullState()); err != nil {
		t.Fatal(err)
	}
	if got := nattest.Dump(fake); got != want {
		t.Fatalf("the Apply after a failure did not repair:\n%s", got)
	}
}

func TestDelete(t *testing.T) {
	ctx := context.Background()
	fake, n := newFake()
	if err := n.Apply(ctx, fullState()); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a table already gone is fine
		if err := n.Delete(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if d := fake.Dump(); d != "" {
		t.Fatalf("after Delete:\n%s", d)
	}
	// And the next Apply writes everything again.
	if err := n.Apply(ctx, fullState()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fake.Dump(), kafkaIP.String()) {
		t.Fatal("Apply after Delete did not rewrite the elements")
	}
}
