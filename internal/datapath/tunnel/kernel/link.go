// Package kernel holds what both tunnel drivers do to the kernel besides the tunnel itself:
// claiming a link name, their route table (a route.Table with the tunnel markers), the MTU,
// the TCP MSS clamp and byte counters. Their ownership markers are in
// internal/datapath/owner.
package kernel

import (
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/route"
)

// ClaimLinkName makes sure name is free for a new device: a link of that name that carries
// our alias is a leftover of a crashed driver and is deleted; any other link is refused, since
// we never delete what we cannot prove is ours.
func ClaimLinkName(name string) error {
	l, err := linkByName(name)
	if err != nil || l == nil {
		return err
	}
	if l.Attrs().Alias != owner.TunnelLinkAlias {
		return fmt.Errorf("link %s exists and is not ours (alias %q, want %q): choose another tunnel device name", name, l.Attrs().Alias, owner.TunnelLinkAlias)
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("deleting our stale link %s: %w", name, err)
	}
	return nil
}

// DeleteLink deletes name if it exists and is ours.
func DeleteLink(name string) error {
	l, err := linkByName(name)
	if err != nil || l == nil || l.Attrs().Alias != owner.TunnelLinkAlias {
		return err
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("deleting link %s: %w", name, err)
	}
	return nil
}

// linkByName returns the link called name, or nil when there is none.
func linkByName(name string) (netlink.Link, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, nil
		}
		return nil, fmt.Errorf("looking up link %s: %w", name, err)
	}
	return l, nil
}

// LinkCounters are a tunnel device's packet counters as the kernel keeps them: all peers
// together, since neither WireGuard nor VXLAN counts packets per peer.
type LinkCounters struct {
	RxPackets, TxPackets, RxDropped, TxDropped, RxErrors, TxErrors uint64
}

// ReadLinkCounters reads name's counters in the calling thread's network namespace; ok is
// false when there is no such link (a standby gateway has none).
func ReadLinkCounters(name string) (c LinkCounters, ok bool, err error) {
	l, err := linkByName(name)
	if err != nil || l == nil {
		return LinkCounters{}, false, err
	}
	st := l.Attrs().Statistics
	if st == nil {
		return LinkCounters{}, true, nil
	}
	return LinkCounters{RxPackets: st.RxPackets, TxPackets: st.TxPackets, RxDropped: st.RxDropped,
		TxDropped: st.TxDropped, RxErrors: st.RxErrors, TxErrors: st.TxErrors}, true, nil
}

// NewRouteTable opens, in the calling thread's network namespace, the route table of the
// driver of device: its routes carry the tunnel drivers' markers (internal/datapath/owner) and
// leave through device, so that the route agent's routes on the same node and another
// driver's stay untouched.
func NewRouteTable(device string, log logr.Logger) (*route.Table, error) {
	return route.NewTable(route.TableOptions{Protocol: owner.TunnelRouteProtocol, Metric: owner.TunnelRouteMetric, Device: device, Log: log})
}
