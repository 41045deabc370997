package diagnose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// Clock skew between API servers, measured from this machine without any access to the nodes.
//
// The only clock an API server shows every client is the HTTP Date header of its answers: whole
// seconds, rounded down, stamped at some instant between our sending the request and receiving
// the answer. One answer therefore bounds the offset θ = server clock − local clock to an
// interval about one second wide: Date − received ≤ θ < Date + 1 s − sent. Answers stamped on
// either side of one of the server's second boundaries cut that interval: requests sent at
// instants spread over the stretch of local time where, for the θ still possible, the
// boundary must fall, narrow it by the number of requests at each round, down to about one
// round trip. Two rounds of clockProbesPerRound requests take at most about 2.2 seconds and
// reach a resolution of ~1/81 s plus a round trip (a few milliseconds on a LAN). The skew
// between a cluster and the hub is the difference of their two offsets, so its uncertainty
// is the sum of theirs.
//
// Timestamps that the API server sets itself (creationTimestamp, managedFields) have whole
// seconds too, cost a write, and would be no better.

// interval bounds an offset: it lies in [lo, hi].
type interval struct{ lo, hi time.Duration }

func (i interval) width() time.Duration { return i.hi - i.lo }

// mid is the best estimate: the interval's middle; the error is at most half the width.
func (i interval) mid() time.Duration { return i.lo + i.width()/2 }

// intersect returns what both intervals allow; ok is false when they are disjoint.
func (i interval) intersect(o interval) (interval, bool) {
	r := interval{lo: max(i.lo, o.lo), hi: min(i.hi, o.hi)}
	return r, r.lo <= r.hi
}

// minus is the interval of a − b for a in i and b in o: the skew of one clock against another
// from their offsets against ours.
func (i interval) minus(o interval) interval { return interval{lo: i.lo - o.hi, hi: i.hi - o.lo} }

// dateBound is what one answer says about the offset: the server stamped date (whole seconds,
// rounded down) at some instant between sent and received.
func dateBound(date, sent, received time.Time) interval {
	return interval{lo: date.Sub(received), hi: date.Add(time.Second).Sub(sent)}
}

const (
	// clockProbesPerRound requests, evenly spread over where the boundary may fall, cut the
	// interval into clockProbesPerRound-1 parts per round.
	clockProbesPerRound = 10
	// clockRounds bounds the time a measurement takes: each round waits for the server's next
	// second boundary.
	clockRounds = 2
	// clockGoal ends the rounds early: skews below it do not matter to anything Octopus does.
	clockGoal = 5 * time.Millisecond
	// clockLead keeps the first request of a round from being scheduled in the past.
	clockLead = 20 * time.Millisecond
	// clockTimeout bounds one measurement: the rounds plus a few slow answers.
	clockTimeout = 5 * time.Second
)

// errClockDisagrees means two answers are inconsistent with any one constant offset.
var errClockDisagrees = errors.New("its answers disagree about the time: its clock stepped meanwhile, or several API servers with different clocks answer at this address")

// clockSource is what estimateOffset measures: the local clock, a way to wait, and a request
// that returns the server's Date. Tests replace all three.
type clockSource struct {
	now        func() time.Time
	sleepUntil func(ctx context.Context, t time.Time) error
	date       func(ctx context.Context) (time.Time, error)
}

// estimateOffset measures the offset of the server's clock from the local one (see above).
func estimateOffset(ctx context.Context, src clockSource) (interval, error) {
	sample := func() (interval, error) {
		sent := src.now()
		date, err := src.date(ctx)
		if err != nil {
			return interval{}, err
		}
		return dateBound(date, sent, src.now()), nil
	}
	est, err := sample()
	if err != nil {
		return interval{}, err
	}
	for round := 0; round < clockRounds && est.width() > clockGoal; round++ {
		// Requests spread over a stretch of local time as long as the interval is wide cover
		// at least one second of the server's time, so some second boundary falls among them
		// whatever the offset: the first round starts at once.
		first := src.now().Add(clockLead)
		if est.width() < time.Second {
			// A narrower stretch must be placed: from where the server's next second boundary
			// falls for the largest offset still possible to where it falls for the smallest.
			boundary := src.now().Add(est.hi + clockLead).Truncate(time.Second).Add(time.Second)
			first = boundary.Add(-est.hi)
		}
		step := est.width() / (clockProbesPerRound - 1)
		for j := range clockProbesPerRound {
			if err := src.sleepUntil(ctx, first.Add(time.Duration(j)*step)); err != nil {
				return est, err
			}
			b, err := sample()
			if err != nil {
				return est, err
			}
			var consistent bool
			if est, consistent = est.intersect(b); !consistent {
				return est, errClockDisagrees
			}
		}
	}
	return est, nil
}

// measureOffset measures the offset of the clock of the API server cfg reaches.
func (e *env) measureOffset(ctx context.Context, cfg *rest.Config) (interval, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return interval{}, err
	}
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return interval{}, err
	}
	url := base.JoinPath("version").String()
	return estimateOffset(ctx, clockSource{now: time.Now, sleepUntil: sleepUntil, date: func(ctx context.Context) (time.Time, error) {
		return dateOf(ctx, hc, url)
	}})
}

// dateOf requests url and returns the answer's Date, whatever its status: a rejected
// credential is answered, and dated, all the same.
func dateOf(ctx context.Context, hc *http.Client, url string) (time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return time.Time{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return time.Time{}, err
	}
	// Drained so that the connection is reused: a new TLS handshake per request would widen
	// every bound by its round trips.
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	d := resp.Header.Get("Date")
	if d == "" {
		return time.Time{}, fmt.Errorf("GET %s: the answer has no Date header", url)
	}
	t, err := http.ParseTime(d)
	if err != nil {
		return time.Time{}, fmt.Errorf("GET %s: Date header %q: %w", url, d, err)
	}
	return t, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
