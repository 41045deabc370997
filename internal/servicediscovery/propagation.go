package servicediscovery

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

// propagation observes propagationSeconds once per export and importing agent: the first time
// a reconcile imported a cluster's export of a service. An export made before the agent started
// is not measured: its import after a restart measures the agent's downtime, not the path.
type propagation struct {
	hist *prometheus.HistogramVec
	// since is when the agent started, truncated to the second like creation times.
	since time.Time
	now   func() time.Time

	mu sync.Mutex
	// imported holds, per service, the creation time of each cluster's export that was
	// imported already; an export deleted and made again has a new one and is measured anew.
	imported map[types.NamespacedName]map[string]time.Time
}

func newPropagation(hist *prometheus.HistogramVec, started time.Time, now func() time.Time) *propagation {
	return &propagation{hist: hist, since: started.Truncate(time.Second), now: now,
		imported: map[types.NamespacedName]map[string]time.Time{}}
}

// observe records that the import of key now holds the endpoints of clusters, exported as
// records says. Clusters no longer imported are forgotten. A nil propagation measures nothing.
func (p *propagation) observe(key types.NamespacedName, records []exportRecord, clusters []string) {
	if p == nil {
		return
	}
	created := make(map[string]time.Time, len(records))
	for _, r := range records {
		created[r.Cluster] = r.Created
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.imported[key]
	next := make(map[string]time.Time, len(clusters))
	for _, c := range clusters {
		t := created[c]
		next[c] = t
		if old, ok := prev[c]; (ok && old.Equal(t)) || t.IsZero() || t.Before(p.since) {
			continue
		}
		// A clock behind the exporter's would make it negative.
		p.hist.WithLabelValues(c).Observe(max(now.Sub(t), 0).Seconds())
	}
	p.imported[key] = next
}

// forget drops what observe knows of key, whose import is gone.
func (p *propagation) forget(key types.NamespacedName) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.imported, key)
}
