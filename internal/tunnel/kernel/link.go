package kernel

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// ClaimLinkName makes sure name is free for a new device: a link of that name that carries
// our alias is a leftover of a crashed driver and is deleted; any other link is refused, since
// we never delete what we cannot prove is ours.
func ClaimLinkName(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("looking up link %s: %w", name, err)
	}
	if l.Attrs().Alias != LinkAlias {
		return fmt.Errorf("link %s exists and is not ours (alias %q, want %q): choose another tunnel device name", name, l.Attrs().Alias, LinkAlias)
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("deleting our stale link %s: %w", name, err)
	}
	return nil
}

// DeleteLink deletes name if it exists and is ours.
func DeleteLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("looking up link %s: %w", name, err)
	}
	if l.Attrs().Alias != LinkAlias {
		return nil
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("deleting link %s: %w", name, err)
	}
	return nil
}
