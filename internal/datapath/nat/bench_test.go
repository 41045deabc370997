package nat

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
	"github.com/octopus-mcs/octopus/internal/ipam"
)

// manyServices is stateB with n more services, each TCP port 80 onto both servers, at
// consecutive global IPs from 242.2.1.0.
func manyServices(n int) State {
	s := stateB()
	for i := range n {
		ip, _ := ipam.Add(netip.MustParseAddr("242.2.1.0"), uint64(i))
		s.Services = append(s.Services, Service{Name: fmt.Sprintf("bench/svc-%d", i), GlobalIP: ip, Ports: []Port{{
			Protocol: TCP, Port: 80, Endpoints: []netip.AddrPort{netip.AddrPortFrom(server1, 8080), netip.AddrPortFrom(server2, 8080)},
		}}})
	}
	return s
}

// BenchmarkKernelAddService measures, on a gateway already translating services=N exports,
// the time from a new export's Apply call until a client in the other cluster gets an answer
// through its global IP (ms-to-answer, p50 and p99 over b.N exports; ns/op is that time too,
// mean), and how big the table is: rules against set and map elements.
//
//	go test -run '^$' -bench KernelAddService -benchtime 200x ./internal/datapath/nat/
func BenchmarkKernelAddService(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			topo, gwb := twoClusters(b)
			base := manyServices(n)
			start := time.Now()
			apply(b, topo.gwb, gwb, base)
			firstApply := time.Since(start)
			rules, elements := tableSize(b, topo.gwb)

			extra, _ := ipam.Add(netip.MustParseAddr("242.2.1.0"), uint64(n))
			with := base
			with.Services = append(slices.Clone(base.Services), Service{Name: "bench/new", GlobalIP: extra, Ports: []Port{{
				Protocol: TCP, Port: 80, Endpoints: []netip.AddrPort{netip.AddrPortFrom(server1, 8080)},
			}}})
			var took []time.Duration
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				apply(b, topo.gwb, gwb, with)
				for {
					if _, err := ask(b, topo.client, "tcp", netip.Addr{}, netip.AddrPortFrom(extra, 80)); err == nil {
						break
					}
					if time.Since(start) > 10*time.Second {
						b.Fatalf("%s does not answer 10 s after its Apply", extra)
					}
				}
				took = append(took, time.Since(start))
				b.StopTimer()
				apply(b, topo.gwb, gwb, base) // unexport it again, untimed
				b.StartTimer()
			}
			b.StopTimer()
			// After the loop: ResetTimer drops metrics reported before it.
			b.ReportMetric(float64(firstApply.Milliseconds()), "ms-first-apply")
			b.ReportMetric(float64(rules), "rules")
			b.ReportMetric(float64(elements), "elements")
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms-to-answer")
			b.ReportMetric(float64(took[(len(took)*99)/100].Microseconds())/1000, "p99-ms-to-answer")
		})
	}
}

// tableSize counts the rules, and the elements of all sets and maps, of our table in ns.
func tableSize(b testing.TB, ns string) (rules, elements int) {
	out := tunneltest.Run(b, "ip", "netns", "exec", ns, "nft", "-j", "list", "table", "inet", owner.GlobalnetNFTTable)
	var v struct {
		Nftables []struct {
			Rule *json.RawMessage `json:"rule"`
			Set  *struct {
				Elem []json.RawMessage `json:"elem"`
			} `json:"set"`
			Map *struct {
				Elem []json.RawMessage `json:"elem"`
			} `json:"map"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		b.Fatal(err)
	}
	for _, o := range v.Nftables {
		switch {
		case o.Rule != nil:
			rules++
		case o.Set != nil:
			elements += len(o.Set.Elem)
		case o.Map != nil:
			elements += len(o.Map.Elem)
		}
	}
	return rules, elements
}
