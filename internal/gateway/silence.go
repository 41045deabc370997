package gateway

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// DefaultSilentClusterTTL is how long a cluster's heartbeat Lease may go unrenewed, beyond its
// lease duration, before every gateway tears its tunnel down (Options.SilentClusterTTL,
// `octopus-agent gateway --silent-cluster-ttl`). It is longer than the service discovery's
// endpoint TTL (servicediscovery.DefaultStaleClusterTTL): a cluster whose agent is down may
// still forward for its pods, and a tunnel costs nothing while no endpoint points at it.
const DefaultSilentClusterTTL = 5 * time.Minute

// silence tells, from the clusters' heartbeat Leases on the hub, which clusters have been
// silent for longer than ttl: their Lease's renewTime has not changed for lease duration + ttl
// by this gateway's clock. Renewals are timed by when this gateway saw them change, not by the
// renewTime itself, so clock skew between clusters does not count.
//
// The data plane must not depend on the hub: while no Lease changes at all, the hub (or this
// gateway's connection to it) is down, and nobody is silent. After such an outage every other
// cluster's renewal is late by the outage's length, so silence counts only from when the hub
// was seen back (a Lease changed after none had for longer than its lease duration). A cluster
// without a Lease (not heartbeating yet) is never silent here; one that left or was revoked
// has no Cluster either, which Compute refuses.
type silence struct {
	ttl time.Duration
	// renewed is each cluster's last seen renewTime, and changed when this gateway saw it
	// change.
	renewed, changed map[string]time.Time
	// lastChange is when any Lease last changed; hubBack when the hub was last seen back.
	lastChange, hubBack time.Time
}

func newSilence(ttl time.Duration) *silence {
	return &silence{ttl: ttl, renewed: map[string]time.Time{}, changed: map[string]time.Time{}}
}

// observe takes the Leases of the hub namespace as seen at now and returns the silent
// clusters. Only heartbeat Leases count: named after a cluster and labelled with its ID.
func (s *silence) observe(leases []coordinationv1.Lease, now time.Time) map[string]bool {
	durations := map[string]time.Duration{}
	seen := map[string]bool{}
	var longest time.Duration
	for _, l := range leases {
		id := l.Name
		if l.Labels[v1alpha1.ClusterLabel] != id || l.Spec.RenewTime == nil {
			continue
		}
		seen[id] = true
		d := 40 * time.Second
		if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
			d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		durations[id], longest = d, max(longest, d)
		renew := l.Spec.RenewTime.Time
		if last, ok := s.renewed[id]; ok && last.Equal(renew) {
			continue
		}
		if _, ok := s.renewed[id]; ok && !s.lastChange.IsZero() && now.Sub(s.lastChange) > d {
			s.hubBack = now // the first renewal after a quiet spell: the hub is back
		}
		s.renewed[id], s.changed[id], s.lastChange = renew, now, now
	}
	for id := range s.renewed {
		if !seen[id] {
			delete(s.renewed, id)
			delete(s.changed, id)
		}
	}
	if s.lastChange.IsZero() || now.Sub(s.lastChange) > longest {
		return nil // no Lease is changing: the hub is unreachable, or every cluster is silent
	}
	silent := map[string]bool{}
	for id, changed := range s.changed {
		if since := now.Sub(later(changed, s.hubBack)); since > durations[id]+s.ttl {
			silent[id] = true
		}
	}
	return silent
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
