// Package health measures the connection to remote gateways: round-trip time (last, min, avg,
// max) and loss per target, probing at a fixed interval, and marks a target down after
// Options.DownAfter probes in a row go unanswered.
//
// It probes with ICMP echo rather than UDP to a responder of our own: every remote gateway
// answers echo in its kernel (the health-check address is on its tunnel device), so nothing
// extra has to run, be versioned or be reachable there, and the answer proves the path through
// the tunnel and the remote node's forwarding. It needs a raw socket (the gateway runs as root
// with CAP_NET_RAW anyway to program its tunnel).
package health

import (
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Defaults of Options.
const (
	DefaultInterval = time.Second
	DefaultWindow   = 60
)

// Transport sends echo requests and delivers the matching replies.
type Transport interface {
	// Send sends an echo request with seq to dst.
	Send(dst netip.Addr, seq uint16) error
	// Receive blocks until a reply to one of our requests arrives; after Close it returns
	// net.ErrClosed.
	Receive() (from netip.Addr, seq uint16, err error)
	// Close releases the transport and unblocks Receive.
	Close() error
}

// Options configure a Prober. All are optional.
type Options struct {
	// Interval between probes to each target; DefaultInterval when 0. A probe unanswered
	// after one interval is lost.
	Interval time.Duration
	// Window is how many recent probes the loss is computed over; DefaultWindow when 0.
	Window int
	// DownAfter is how many probes in a row may go unanswered before a target is down;
	// DefaultDownAfter when 0.
	DownAfter int
	// Transport: ICMP echo from the current network namespace when nil.
	Transport Transport
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	Log logr.Logger
}

// Prober probes a set of targets until Close.
type Prober struct {
	opts Options
	tr   Transport

	mu      sync.Mutex
	tracker *tracker

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// New starts a prober with no targets.
func New(opts Options) (*Prober, error) {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.DownAfter <= 0 {
		opts.DownAfter = DefaultDownAfter
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	tr := opts.Transport
	if tr == nil {
		var err error
		if tr, err = NewICMP(); err != nil {
			return nil, err
		}
	}
	p := &Prober{opts: opts, tr: tr, tracker: newTracker(opts.Interval, opts.Window, opts.DownAfter), stop: make(chan struct{})}
	p.wg.Add(2)
	go p.receive()
	go p.send()
	return p, nil
}

// SetTargets replaces the targets (name → address). Targets whose address is unchanged keep
// their statistics.
func (p *Prober) SetTargets(targets map[string]netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tracker.setTargets(targets)
}

// Snapshot returns the current statistics of every target.
func (p *Prober) Snapshot() map[string]Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tracker.snapshot()
}

// Close stops probing; every goroutine of the prober has returned when it does.
func (p *Prober) Close() error {
	var err error
	p.once.Do(func() {
		close(p.stop)
		err = p.tr.Close()
		p.wg.Wait()
	})
	return err
}

func (p *Prober) send() {
	defer p.wg.Done()
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		p.mu.Lock()
		probes := p.tracker.due(p.opts.Now())
		p.mu.Unlock()
		for _, pr := range probes {
			if err := p.tr.Send(pr.addr, pr.seq); err != nil {
				// An unreachable target is what we measure: the probe counts as lost.
				p.opts.Log.V(1).Info("Sending a health probe failed", "target", pr.addr, "error", err.Error())
			}
		}
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
	}
}

func (p *Prober) receive() {
	defer p.wg.Done()
	for {
		from, seq, err := p.tr.Receive()
		if err != nil {
			select {
			case <-p.stop:
			default:
				p.opts.Log.Error(err, "Health probe replies can no longer be received: recreate the prober")
			}
			return
		}
		p.mu.Lock()
		p.tracker.reply(from, seq, p.opts.Now())
		p.mu.Unlock()
	}
}
