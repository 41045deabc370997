package lab_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/octopus-mcs/octopus/internal/bench"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/workload"
)

// checkBenchFamilies checks, on a running dual-stack lab whose first two clusters are
// connected with direct addressing, that `octopus bench throughput` (binary octopus) measures
// every path in both directions in IPv4 and in IPv6 (issue 35), each at an address of its
// family and beside a baseline of the same family, and reports IPv6/IPv4 for each, with no
// note of IPv6 left out. It asserts what was measured, never how fast: the figures are
// benchmarks (docs/benchmarks.md), only required to exist.
func checkBenchFamilies(ctx context.Context, t *testing.T, l *lab.Lab, octopus string) {
	c1, c2 := l.Network.Clusters[0].Name, l.Network.Clusters[1].Name
	report, table := runBench(ctx, t, l, octopus, bench.KindThroughput, "--duration", "1s", "--repeat", "1")
	if len(report.Notes) > 0 {
		t.Errorf("notes %q on a dual-stack pair: want none (nothing left out)", report.Notes)
	}
	var got []string
	for _, row := range report.Rows {
		got = append(got, fmt.Sprintf("%s/%s %s->%s", row.Path, row.Family, row.From, row.To))
		for _, m := range []bench.Measurement{row.CrossCluster, row.InCluster} {
			ap, err := netip.ParseAddrPort(m.Address)
			switch {
			case m.Family != row.Family:
				t.Errorf("%s/%s %s->%s measured in family %q, want the row's", row.Path, row.Family, m.From, m.To, m.Family)
			case err != nil || ap.Addr().Is6() != (row.Family == workload.FamilyIPv6):
				t.Errorf("%s/%s %s->%s measured at %q, not an address of that family", row.Path, row.Family, m.From, m.To, m.Address)
			case m.Throughput == nil || m.Throughput.BitsPerSecond <= 0:
				t.Errorf("%s/%s %s->%s: no throughput measured (%+v, error %q)", row.Path, row.Family, m.From, m.To, m.Throughput, m.Error)
			}
		}
	}
	var want, wantRatios []string
	for _, p := range bench.Paths {
		for _, d := range [][2]string{{c1, c2}, {c2, c1}} {
			for _, f := range []string{workload.FamilyIPv4, workload.FamilyIPv6} {
				want = append(want, fmt.Sprintf("%s/%s %s->%s", p, f, d[0], d[1]))
			}
			wantRatios = append(wantRatios, fmt.Sprintf("%s %s->%s", p, d[0], d[1]))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("rows %q, want %q", got, want)
	}
	var ratios []string
	for _, f := range report.Families {
		ratios = append(ratios, fmt.Sprintf("%s %s->%s", f.Path, f.From, f.To))
		if f.CrossCluster <= 0 || f.InCluster <= 0 {
			t.Errorf("IPv6/IPv4 of %s %s->%s: cross-cluster %g, in-cluster %g; want both measured", f.Path, f.From, f.To, f.CrossCluster, f.InCluster)
		}
	}
	if !slices.Equal(ratios, wantRatios) {
		t.Errorf("IPv6/IPv4 ratios for %q, want %q", ratios, wantRatios)
	}
	if !strings.Contains(table, "pod-to-service/IPv6") || !strings.Contains(table, "CROSS-CLUSTER IPV6/IPV4") {
		t.Errorf("the table (logged above) does not show the IPv6 rows and the IPv6/IPv4 table")
	}
}
