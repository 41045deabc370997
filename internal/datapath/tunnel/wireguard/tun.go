package wireguard

import (
	"sync/atomic"

	"golang.zx2c4.com/wireguard/tun"
)

// ownedTUN hands wireguard-go a TUN device whose up/down events never reach it. wireguard-go
// reacts to the link going up by opening its UDP sockets from its event goroutine, on whatever
// OS thread that runs: in a process whose threads are in different network namespaces (tests;
// any caller that switches a thread's namespace) the sockets would land in the wrong one, and
// the initial "down" event racing our Up could close the right ones. The driver instead calls
// Up itself, from the Apply caller's thread. MTU changes are announced by the driver too, with
// the value it set, so wireguard-go never asks the kernel by name from a foreign namespace.
type ownedTUN struct {
	tun.Device
	events chan tun.Event
	mtu    atomic.Int64
}

func newOwnedTUN(dev tun.Device) *ownedTUN {
	t := &ownedTUN{Device: dev, events: make(chan tun.Event, 8)}
	go func() {
		// Ends when the TUN device closes its event channel (on Close).
		defer close(t.events)
		for ev := range dev.Events() {
			_ = ev // up/down and MTU events are the driver's to decide, see above
		}
	}()
	return t
}

// Events implements tun.Device.
func (t *ownedTUN) Events() <-chan tun.Event { return t.events }

// MTU implements tun.Device: the MTU the driver set, once it set one.
func (t *ownedTUN) MTU() (int, error) {
	if m := t.mtu.Load(); m > 0 {
		return int(m), nil
	}
	return t.Device.MTU()
}

// setMTU records the MTU the driver gave the link and tells wireguard-go.
func (t *ownedTUN) setMTU(mtu int) {
	if t.mtu.Swap(int64(mtu)) == int64(mtu) {
		return
	}
	select {
	case t.events <- tun.EventMTUUpdate:
	default: // an update is already queued; it will read the latest value
	}
}
