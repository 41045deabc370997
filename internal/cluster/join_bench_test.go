package cluster

import (
	"testing"
)

// BenchmarkJoin measures `join` against real API servers: one op enrols a cluster (hub
// credential, CIDR claims, Cluster object, member-side state). Leaving again between ops is
// not timed.
//
//	go test -run '^$' -bench BenchmarkJoin -benchtime 3x -count 5 ./internal/cluster
func BenchmarkJoin(b *testing.B) {
	f := newFabric(b, "east")
	cfg := f.env.Cluster("east").RESTConfig()
	for b.Loop() {
		if _, err := Join(b.Context(), cfg, f.joinOptions("east")); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := Leave(b.Context(), cfg, LeaveOptions{}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
