package health

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

var (
	t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a  = netip.MustParseAddr("10.2.0.1")
	b  = netip.MustParseAddr("10.3.0.1")
)

// step is one interval of a scripted run: the RTT of the reply to this interval's probe, or
// lost (-1).
const lost = -1 * time.Millisecond

func TestTracker(t *testing.T) {
	tests := []struct {
		name  string
		rtts  []time.Duration
		want  Stats
		after time.Duration // extra time before the snapshot's expiring tick
	}{
		{name: "no probe answered yet", rtts: nil, want: Stats{Addr: a}},
		{name: "all answered", rtts: []time.Duration{10 * time.Millisecond, 30 * time.Millisecond, 20 * time.Millisecond},
			want: Stats{Addr: a, Up: true, Answered: true, Last: 20 * time.Millisecond, Min: 10 * time.Millisecond,
				Avg: 20 * time.Millisecond, Max: 30 * time.Millisecond, Sent: 3}},
		{name: "two lost in a row stay up", rtts: []time.Duration{10 * time.Millisecond, lost, lost},
			want: Stats{Addr: a, Up: true, Answered: true, Last: 10 * time.Millisecond, Min: 10 * time.Millisecond,
				Avg: 10 * time.Millisecond, Max: 10 * time.Millisecond, Sent: 3, Lost: 2, LossPercent: 66}},
		{name: "three lost in a row is down", rtts: []time.Duration{10 * time.Millisecond, lost, lost, lost},
			want: Stats{Addr: a, Answered: true, Last: 10 * time.Millisecond, Min: 10 * time.Millisecond,
				Avg: 10 * time.Millisecond, Max: 10 * time.Millisecond, Sent: 4, Lost: 3, LossPercent: 75}},
		{name: "an answer brings it back up", rtts: []time.Duration{lost, lost, lost, 40 * time.Millisecond},
			want: Stats{Addr: a, Up: true, Answered: true, Last: 40 * time.Millisecond, Min: 40 * time.Millisecond,
				Avg: 40 * time.Millisecond, Max: 40 * time.Millisecond, Sent: 4, Lost: 3, LossPercent: 75}},
		{name: "loss is over the window only", rtts: []time.Duration{lost, lost, lost, lost, 5 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond},
			want: Stats{Addr: a, Up: true, Answered: true, Last: 5 * time.Millisecond, Min: 5 * time.Millisecond,
				Avg: 5 * time.Millisecond, Max: 5 * time.Millisecond, Sent: 4}},
		{name: "a reply later than the interval is lost", rtts: []time.Duration{1500 * time.Millisecond},
			want: Stats{Addr: a, Sent: 1, Lost: 1, LossPercent: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTracker(time.Second, 4, DefaultDownAfter)
			tr.setTargets(map[string]netip.Addr{"b": a})
			now := t0
			for _, rtt := range tt.rtts {
				probes := tr.due(now)
				if len(probes) != 1 || probes[0].addr != a {
					t.Fatalf("due() = %+v, want one probe to %s", probes, a)
				}
				if rtt != lost {
					tr.reply(a, probes[0].seq, now.Add(rtt))
				}
				now = now.Add(time.Second)
			}
			tr.due(now) // the tick that settles the last probe's fate
			got := tr.snapshot()["b"]
			got.LastReply = time.Time{}
			if got != tt.want {
				t.Fatalf("snapshot = %+v\nwant       %+v", got, tt.want)
			}
		})
	}
}

func TestTrackerReplies(t *testing.T) {
	tr := newTracker(time.Second, 10, DefaultDownAfter)
	tr.setTargets(map[string]netip.Addr{"b": a, "c": b})
	probes := tr.due(t0)
	seq := probes[0].seq
	tr.reply(netip.MustParseAddr("10.9.9.9"), seq, t0.Add(time.Millisecond)) // a stranger
	tr.reply(a, seq+7, t0.Add(time.Millisecond))                             // not our sequence
	if s := tr.snapshot(); s["b"].Answered || s["c"].Answered {
		t.Fatalf("foreign replies were counted: %+v", s)
	}
	tr.reply(a, seq, t0.Add(3*time.Millisecond))
	tr.reply(a, seq, t0.Add(4*time.Millisecond)) // a duplicate
	s := tr.snapshot()
	if !s["b"].Up || s["b"].Last != 3*time.Millisecond || s["c"].Answered {
		t.Fatalf("snapshot = %+v, want b up at 3ms and c unanswered", s)
	}

	// Changing targets keeps unchanged ones and drops the rest.
	tr.setTargets(map[string]netip.Addr{"b": a, "d": b})
	s = tr.snapshot()
	if len(s) != 2 || !s["b"].Up || s["d"].Answered {
		t.Fatalf("after SetTargets: %+v, want b kept and d fresh", s)
	}
	tr.setTargets(map[string]netip.Addr{"b": b})
	if s := tr.snapshot(); s["b"].Answered || s["b"].Addr != b {
		t.Fatalf("a target whose address changed kept its state: %+v", s)
	}
}

// TestTrackerDownAfter checks that a target stays up through downAfter-1 lost probes in a row
// and is down at exactly the downAfter-th, for the default and configured values.
func TestTrackerDownAfter(t *testing.T) {
	for _, downAfter := range []int{1, DefaultDownAfter, 5, 10} {
		t.Run(fmt.Sprint(downAfter), func(t *testing.T) {
			tr := newTracker(time.Second, 60, downAfter)
			tr.setTargets(map[string]netip.Addr{"b": a})
			now := t0
			p := tr.due(now)
			tr.reply(a, p[0].seq, now.Add(time.Millisecond))
			for missed := 0; missed <= downAfter; missed++ {
				now = now.Add(time.Second)
				tr.due(now) // settles the previous probe (lost from the second on) and sends the next
				if up, want := tr.snapshot()["b"].Up, missed < downAfter; up != want {
					t.Fatalf("after %d lost probes in a row: up = %v, want %v", missed, up, want)
				}
			}
		})
	}
}
