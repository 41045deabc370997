package health

import (
	"net"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"
)

// fakeTransport answers every probe to an address in up after rtt, and none to others.
type fakeTransport struct {
	mu      sync.Mutex
	up      map[netip.Addr]bool
	replies chan reply
	done    chan struct{}
	once    sync.Once
}

var _ Transport = (*fakeTransport)(nil)

func newFake(up ...netip.Addr) *fakeTransport {
	f := &fakeTransport{up: map[netip.Addr]bool{}, replies: make(chan reply, 100), done: make(chan struct{})}
	for _, a := range up {
		f.up[a] = true
	}
	return f
}

func (f *fakeTransport) set(a netip.Addr, up bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.up[a] = up
}

func (f *fakeTransport) Send(dst netip.Addr, seq uint16) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.up[dst] {
		f.replies <- reply{from: dst, seq: seq}
	}
	return nil
}

func (f *fakeTransport) Receive() (netip.Addr, uint16, error) {
	select {
	case r := <-f.replies:
		return r.from, r.seq, nil
	case <-f.done:
		return netip.Addr{}, 0, net.ErrClosed
	}
}

func (f *fakeTransport) Close() error { f.once.Do(func() { close(f.done) }); return nil }

func waitFor(t *testing.T, p *Prober, what string, cond func(map[string]Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if cond(p.Snapshot()) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s: not reached within 5s; last snapshot %+v", what, p.Snapshot())
}

func TestProber(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	f := newFake(a)
	p, err := New(Options{Interval: 10 * time.Millisecond, Transport: f})
	if err != nil {
		t.Fatal(err)
	}
	p.SetTargets(map[string]netip.Addr{"b": a, "c": b})
	waitFor(t, p, "b up, c never answered", func(s map[string]Stats) bool {
		return s["b"].Up && s["b"].Sent >= 3 && s["b"].Lost == 0 && !s["c"].Answered && s["c"].Lost >= 3
	})
	f.set(a, false)
	waitFor(t, p, "b down", func(s map[string]Stats) bool { return !s["b"].Up && s["b"].Answered && s["b"].Lost >= DefaultDownAfter })
	f.set(a, true)
	waitFor(t, p, "b up again", func(s map[string]Stats) bool { return s["b"].Up })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Fatalf("%d goroutines after Close, %d before New", n, goroutines)
	}
}
