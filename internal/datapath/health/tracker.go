package health

import (
	"net/netip"
	"time"
)

// DefaultDownAfter is how many consecutive probes go unanswered before a target is down when
// Options.DownAfter is 0.
const DefaultDownAfter = 3

// Stats is one target's health.
type Stats struct {
	Addr netip.Addr
	// Up is true once a probe was answered and fewer than Options.DownAfter probes in a row since
	// then went unanswered.
	Up bool
	// Answered tells whether any probe to this target was ever answered.
	Answered bool
	// Last, Min, Avg and Max are round-trip times of the answered probes since the target was
	// set (Last: the most recent one).
	Last, Min, Avg, Max time.Duration
	// Sent and Lost count the probes of the loss window whose fate is known: answered within
	// one interval, or lost.
	Sent, Lost int
	// LossPercent is 100*Lost/Sent, 0 before any probe's fate is known.
	LossPercent int
	// LastReply is when the last answer arrived.
	LastReply time.Time
}

// target is the pure state of one target: what was sent when, and what came back.
type target struct {
	addr      netip.Addr
	seq       uint16
	pending   map[uint16]time.Time // seq → sent
	outcomes  []bool               // ring of the last window fates, true = answered
	next      int
	lostInRow int
	answered  bool
	last      time.Duration
	min, max  time.Duration
	sum       time.Duration
	replies   int64
	lastReply time.Time
}

// tracker is the pure core of the prober: it decides which probes to send and turns replies
// and timeouts into Stats. It does no I/O and reads no clock, so tests drive it with any
// times they like.
type tracker struct {
	interval  time.Duration
	window    int
	downAfter int
	targets   map[string]*target
}

func newTracker(interval time.Duration, window, downAfter int) *tracker {
	return &tracker{interval: interval, window: window, downAfter: downAfter, targets: map[string]*target{}}
}

// setTargets keeps the state of targets whose address is unchanged and starts new ones fresh.
func (tr *tracker) setTargets(targets map[string]netip.Addr) {
	for name, t := range tr.targets {
		if a, ok := targets[name]; !ok || a != t.addr {
			delete(tr.targets, name)
		}
	}
	for name, a := range targets {
		if _, ok := tr.targets[name]; !ok {
			tr.targets[name] = &target{addr: a, pending: map[uint16]time.Time{}}
		}
	}
}

// probe is one echo request to send.
type probe struct {
	addr netip.Addr
	seq  uint16
}

// due expires the probes older than one interval (they are lost) and returns one new probe
// per target, recorded as sent at now.
func (tr *tracker) due(now time.Time) []probe {
	out := make([]probe, 0, len(tr.targets))
	for _, t := range tr.targets {
		for seq, sent := range t.pending {
			if now.Sub(sent) >= tr.interval {
				delete(t.pending, seq)
				tr.record(t, false)
				t.lostInRow++
			}
		}
		t.seq++
		t.pending[t.seq] = now
		out = append(out, probe{addr: t.addr, seq: t.seq})
	}
	return out
}

// reply accounts an echo reply from addr with seq that arrived at now. Late replies (their
// probe already counted as lost) and unknown ones are ignored.
func (tr *tracker) reply(addr netip.Addr, seq uint16, now time.Time) {
	for _, t := range tr.targets {
		sent, ok := t.pending[seq]
		if t.addr != addr || !ok {
			continue
		}
		delete(t.pending, seq)
		rtt := max(now.Sub(sent), 0)
		if rtt >= tr.interval {
			// Too late, whether or not the next tick has expired it yet: lost, so the
			// outcome does not depend on which of the two events came first.
			tr.record(t, false)
			t.lostInRow++
			continue
		}
		tr.record(t, true)
		t.lostInRow = 0
		if !t.answered || rtt < t.min {
			t.min = rtt
		}
		t.max = max(t.max, rtt)
		t.answered = true
		t.last = rtt
		t.sum += rtt
		t.replies++
		t.lastReply = now
	}
}

func (tr *tracker) record(t *target, answered bool) {
	if len(t.outcomes) < tr.window {
		t.outcomes = append(t.outcomes, answered)
		return
	}
	t.outcomes[t.next] = answered
	t.next = (t.next + 1) % tr.window
}

func (tr *tracker) snapshot() map[string]Stats {
	out := make(map[string]Stats, len(tr.targets))
	for name, t := range tr.targets {
		s := Stats{Addr: t.addr, Answered: t.answered, Up: t.answered && t.lostInRow < tr.downAfter,
			Last: t.last, Min: t.min, Max: t.max, LastReply: t.lastReply, Sent: len(t.outcomes)}
		if t.replies > 0 {
			s.Avg = t.sum / time.Duration(t.replies)
		}
		for _, ok := range t.outcomes {
			if !ok {
				s.Lost++
			}
		}
		if s.Sent > 0 {
			s.LossPercent = 100 * s.Lost / s.Sent
		}
		out[name] = s
	}
	return out
}
