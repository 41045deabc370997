package diagnose

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/octopus-mcs/octopus/internal/heartbeat"
)

var clockCheck = check{
	Check:  Check{Name: "clock-skew", Summary: "every cluster's API server clock against the hub's (measured from HTTP Date headers; the resolution is shown)"},
	member: checkClock,
}

// clockWarn is the skew from which times stop lining up across clusters for a person reading
// Events and logs side by side, long before it matters to any Lease.
const clockWarn = time.Second

func checkClock(ctx context.Context, e *env, m *member) []Finding {
	hubOffset, err := e.hub.offset.get(ctx)
	if err != nil {
		return []Finding{notChecked("the clock skew", fmt.Errorf("measuring the hub's clock: %w", err), "hub-access")}
	}
	offset, err := m.offset.get(ctx)
	if errors.Is(err, errClockDisagrees) {
		return []Finding{warning("if several API servers answer at "+hostOf(m.cfg.Host)+", synchronise their clocks (NTP)", "the cluster's clock cannot be measured: %v", err)}
	}
	if err != nil {
		return []Finding{notChecked("the clock skew", fmt.Errorf("measuring the cluster's clock: %w", err), "versions")}
	}
	// The skew that matters is the one against the heartbeat Leases the other clusters judge:
	// the longest Lease duration in use is the bound (the default when none can be read).
	lease := 3 * heartbeat.DefaultInterval
	if l := heartbeatLeaseOf(ctx, e, m); l > 0 {
		lease = l
	}
	return []Finding{judgeSkew(offset.minus(hubOffset), lease)}
}

// heartbeatLeaseOf is the duration of the cluster's heartbeat Lease on the hub, 0 if unknown.
func heartbeatLeaseOf(ctx context.Context, e *env, m *member) time.Duration {
	leases, err := e.hub.leases.get(ctx)
	if err != nil || m.id == "" {
		return 0
	}
	if l := heartbeatLease(leases, m.id); l != nil && l.Spec.LeaseDurationSeconds != nil {
		return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return 0
}

// judgeSkew judges the skew of a cluster's clock against the hub's. lease is the cluster's
// heartbeat Lease duration: other clusters compare its renewTime with their own clocks.
func judgeSkew(skew interval, lease time.Duration) Finding {
	est, resolution := skew.mid(), skew.width()/2
	// atLeast is the skew the measurement proves, whatever its resolution.
	atLeast := max(abs(est)-resolution, 0)
	const fix = "synchronise the clocks of the cluster's and the hub's control-plane nodes with NTP (chrony, systemd-timesyncd)"
	switch {
	case atLeast >= lease:
		return failure(fix, "the API server's clock is %s the hub's (±%s), more than the cluster's heartbeat Lease lasts (%s): the other clusters judge its heartbeat by clocks that far off, so they see it expired while it renews (and withdraw its services) or alive after it stopped",
			direction(est), resolution.Round(time.Millisecond), lease)
	case atLeast >= clockWarn:
		return warning(fix, "the API server's clock is %s the hub's (±%s): the times in Events, logs and `octopus gather` archives do not line up across clusters",
			direction(est), resolution.Round(time.Millisecond))
	}
	return ok("clock %s the hub's (±%s)", direction(est), resolution.Round(time.Millisecond))
}

// direction says "1.2s ahead of" or "300ms behind".
func direction(d time.Duration) string {
	r := abs(d).Round(time.Millisecond)
	switch {
	case r == 0:
		return "within 1ms of"
	case d > 0:
		return r.String() + " ahead of"
	}
	return r.String() + " behind"
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
