package servicediscovery

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

// TestPropagation feeds successive imports of services into one propagation and checks what
// the histogram observed after each: an export once, when first imported; anew when made
// again; never an export older than the agent or without a creation time.
func TestPropagation(t *testing.T) {
	start := time.Date(2026, 11, 24, 12, 0, 0, 500e6, time.UTC)
	now := start
	at := func(d time.Duration) time.Time { return start.Truncate(time.Second).Add(d) }
	web := types.NamespacedName{Namespace: "shop", Name: "web"}
	db := types.NamespacedName{Namespace: "shop", Name: "db"}
	type obs struct {
		count int
		sum   float64
	}
	steps := []struct {
		name     string
		now      time.Duration // since start
		key      types.NamespacedName
		records  []exportRecord
		clusters []string
		forget   bool
		want     map[string]obs // per exporting cluster, the histogram so far
	}{
		{name: "east's export, made 1s after the start, imported 2.5s after", now: 3 * time.Second, key: web,
			records: []exportRecord{{Cluster: "east", Created: at(time.Second)}}, clusters: []string{"east"},
			want: map[string]obs{"east": {1, 2.5}}},
		{name: "the same import reconciled again: not measured again", now: 10 * time.Second, key: web,
			records: []exportRecord{{Cluster: "east", Created: at(time.Second)}}, clusters: []string{"east"},
			want: map[string]obs{"east": {1, 2.5}}},
		{name: "west joins the import; its export predates the agent: not measured", now: 11 * time.Second, key: web,
			records:  []exportRecord{{Cluster: "east", Created: at(time.Second)}, {Cluster: "west", Created: at(-time.Minute)}},
			clusters: []string{"east", "west"}, want: map[string]obs{"east": {1, 2.5}}},
		{name: "north's export is in conflict, not imported: not measured", now: 12 * time.Second, key: web,
			records:  []exportRecord{{Cluster: "east", Created: at(time.Second)}, {Cluster: "north", Created: at(11 * time.Second)}},
			clusters: []string{"east"}, want: map[string]obs{"east": {1, 2.5}}},
		{name: "north's conflict resolved: measured once imported", now: 13 * time.Second, key: web,
			records:  []exportRecord{{Cluster: "east", Created: at(time.Second)}, {Cluster: "north", Created: at(11 * time.Second)}},
			clusters: []string{"east", "north"}, want: map[string]obs{"east": {1, 2.5}, "north": {1, 2.5}}},
		{name: "east's export made again: a new creation time is measured", now: 20 * time.Second, key: web,
			records:  []exportRecord{{Cluster: "east", Created: at(19 * time.Second)}, {Cluster: "north", Created: at(11 * time.Second)}},
			clusters: []string{"east", "north"}, want: map[string]obs{"east": {2, 4}, "north": {1, 2.5}}},
		{name: "another service of east's, no creation time: not measured", now: 21 * time.Second, key: db,
			records: []exportRecord{{Cluster: "east"}}, clusters: []string{"east"},
			want: map[string]obs{"east": {2, 4}, "north": {1, 2.5}}},
		{name: "web's import removed", key: web, forget: true,
			want: map[string]obs{"east": {2, 4}, "north": {1, 2.5}}},
		{name: "web exported again by east with the same creation time (the hub came back): measured anew",
			now: 30 * time.Second, key: web,
			records: []exportRecord{{Cluster: "east", Created: at(19 * time.Second)}}, clusters: []string{"east"},
			want: map[string]obs{"east": {3, 4 + 11.5}, "north": {1, 2.5}}},
		{name: "the importer's clock behind the exporter's: zero, not negative", now: 30 * time.Second, key: db,
			records: []exportRecord{{Cluster: "west", Created: at(31 * time.Second)}}, clusters: []string{"west"},
			want: map[string]obs{"east": {3, 15.5}, "north": {1, 2.5}, "west": {1, 0}}},
	}
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "test_propagation_seconds", Buckets: []float64{1}}, []string{"cluster"})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(hist)
	p := newPropagation(hist, start, func() time.Time { return now })
	for _, s := range steps {
		now = start.Add(s.now)
		if s.forget {
			p.forget(s.key)
		} else {
			p.observe(s.key, s.records, s.clusters)
		}
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range fams {
			n += len(f.GetMetric())
			for _, m := range f.GetMetric() {
				c := m.GetLabel()[0].GetValue()
				got := obs{int(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()}
				if got != s.want[c] {
					t.Errorf("%s: cluster %s: observed %+v, want %+v", s.name, c, got, s.want[c])
				}
			}
		}
		if n != len(s.want) {
			t.Errorf("%s: %d clusters observed, want %d", s.name, n, len(s.want))
		}
	}
}

// TestPropagationNil: reconcilers built without one measure nothing and do not fail.
func TestPropagationNil(t *testing.T) {
	var p *propagation
	p.observe(types.NamespacedName{Name: "web"}, []exportRecord{{Cluster: "east", Created: time.Now()}}, []string{"east"})
	p.forget(types.NamespacedName{Name: "web"})
}
