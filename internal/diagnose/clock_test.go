package diagnose

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// virtualServer is an API server on a virtual timeline: its clock runs offset ahead of ours,
// every request takes rtt, and the server stamps its Date at a random point of it.
type virtualServer struct {
	now    time.Time
	offset time.Duration
	rtt    time.Duration
	rnd    *rand.Rand
	// stepAfter, when positive, steps the server's clock by step after that many requests.
	stepAfter, requests int
	step                time.Duration
}

func (v *virtualServer) source() clockSource {
	return clockSource{
		now: func() time.Time { return v.now },
		sleepUntil: func(_ context.Context, t time.Time) error {
			if t.After(v.now) {
				v.now = t
			}
			return nil
		},
		date: func(context.Context) (time.Time, error) {
			v.requests++
			if v.stepAfter > 0 && v.requests > v.stepAfter {
				v.offset += v.step
				v.stepAfter = 0
			}
			stamp := v.now.Add(time.Duration(v.rnd.Float64() * float64(v.rtt)))
			v.now = v.now.Add(v.rtt)
			return stamp.Add(v.offset).Truncate(time.Second), nil
		},
	}
}

func TestEstimateOffset(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, rtt := range []time.Duration{200 * time.Microsecond, 2 * time.Millisecond, 30 * time.Millisecond} {
		for _, offset := range []time.Duration{0, 1234567 * time.Microsecond, -777 * time.Millisecond, 17300 * time.Millisecond, -3 * time.Minute, 999 * time.Millisecond} {
			for range 10 {
				start := time.Unix(1_700_000_000, 0).Add(time.Duration(rnd.Int64N(int64(time.Second))))
				v := &virtualServer{now: start, offset: offset, rtt: rtt, rnd: rnd}
				got, err := estimateOffset(t.Context(), v.source())
				if err != nil {
					t.Fatalf("rtt %s offset %s: %v", rtt, offset, err)
				}
				if offset < got.lo || offset > got.hi {
					t.Fatalf("rtt %s offset %s: estimate [%s, %s] excludes it", rtt, offset, got.lo, got.hi)
				}
				// Two rounds cut the first answer's second nine times each; every bound is
				// also loose by up to a round trip.
				if limit := time.Second/81 + 3*rtt; got.width() > limit {
					t.Errorf("rtt %s offset %s: resolution %s, want at most %s", rtt, offset, got.width(), limit)
				}
				// A second for the first round, up to a second's wait for the second, and
				// sequential requests that may each take a round trip.
				if took, limit := v.now.Sub(start), 2200*time.Millisecond+2*clockProbesPerRound*rtt; took > limit {
					t.Errorf("rtt %s offset %s: the measurement took %s, want at most %s", rtt, offset, took, limit)
				}
			}
		}
	}
}

func TestEstimateOffsetDisagreeing(t *testing.T) {
	// An NTP step of the server's clock in the middle of the measurement, or a second API
	// server with another clock behind one address, cannot be one offset.
	v := &virtualServer{now: time.Unix(1_700_000_000, 0), offset: 300 * time.Millisecond, rtt: time.Millisecond,
		rnd: rand.New(rand.NewPCG(3, 4)), stepAfter: 5, step: 2 * time.Second}
	if _, err := estimateOffset(t.Context(), v.source()); !errors.Is(err, errClockDisagrees) {
		t.Fatalf("estimateOffset: %v, want errClockDisagrees", err)
	}
	failing := clockSource{now: time.Now, sleepUntil: sleepUntil, date: func(context.Context) (time.Time, error) {
		return time.Time{}, fmt.Errorf("connection refused")
	}}
	if _, err := estimateOffset(t.Context(), failing); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("estimateOffset against a dead server: %v", err)
	}
}

func TestDateBound(t *testing.T) {
	sent := time.Date(2026, 5, 1, 12, 0, 0, 900_000_000, time.UTC)
	received := sent.Add(200 * time.Millisecond)
	// The server said 12:00:03: its clock read 3.0..4.0 s somewhere in [0.9 s, 1.1 s].
	got := dateBound(time.Date(2026, 5, 1, 12, 0, 3, 0, time.UTC), sent, received)
	if want := (interval{lo: 1900 * time.Millisecond, hi: 3100 * time.Millisecond}); got != want {
		t.Errorf("dateBound = %+v, want %+v", got, want)
	}
	a, b := interval{lo: -10 * time.Millisecond, hi: 30 * time.Millisecond}, interval{lo: 5 * time.Millisecond, hi: 7 * time.Millisecond}
	if got := a.minus(b); got != (interval{lo: -17 * time.Millisecond, hi: 25 * time.Millisecond}) {
		t.Errorf("minus = %+v", got)
	}
	if _, ok := a.intersect(interval{lo: 31 * time.Millisecond, hi: time.Second}); ok {
		t.Error("disjoint intervals intersect")
	}
}

func TestJudgeSkew(t *testing.T) {
	lease := 30 * time.Second
	tests := []struct {
		skew     interval
		severity Severity
		message  string
	}{
		{interval{lo: -4 * time.Millisecond, hi: 6 * time.Millisecond}, SeverityOK, "clock 1ms ahead of the hub's (±5ms)"},
		{interval{lo: -2 * time.Millisecond, hi: 2 * time.Millisecond}, SeverityOK, "clock within 1ms of the hub's (±2ms)"},
		// 1.2 s ± 0.5 s proves only 0.7 s: not enough for a warning.
		{interval{lo: 700 * time.Millisecond, hi: 1700 * time.Millisecond}, SeverityOK, "1.2s ahead of"},
		{interval{lo: -2510 * time.Millisecond, hi: -2490 * time.Millisecond}, SeverityWarning, "2.5s behind the hub's (±10ms): the times in Events"},
		{interval{lo: 45 * time.Second, hi: 45*time.Second + 20*time.Millisecond}, SeverityError, "45.01s ahead of the hub's (±10ms), more than the cluster's heartbeat Lease lasts (30s)"},
	}
	for _, tt := range tests {
		f := judgeSkew(tt.skew, lease)
		if f.Severity != tt.severity || !strings.Contains(f.Message, tt.message) {
			t.Errorf("judgeSkew(%+v) = %s %q, want %s containing %q", tt.skew, f.Severity, f.Message, tt.severity, tt.message)
		}
		if (f.Severity >= SeverityWarning) != strings.Contains(f.Fix, "NTP") {
			t.Errorf("judgeSkew(%+v) fix %q", tt.skew, f.Fix)
		}
	}
}
