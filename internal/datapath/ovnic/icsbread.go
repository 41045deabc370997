package ovnic

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrICSBUnavailable is what the reads of the IC SB database (Apply's overlap check,
// TransitAddresses, Leave) return while the client is not connected to the database's leader.
// libovsdb answers List from its cache, which keeps the last rows it saw while it reconnects:
// without this the overlap check could approve a prefix against stale rows, the very thing the
// leader-only connection is there to prevent, and Leave could find nothing to delete.
var ErrICSBUnavailable = errors.New("not connected to the IC SB database's leader")

// icsbReadTimeout bounds one read: after a reconnect libovsdb's List waits until the cache
// has been refilled, and returns the old cache with no error when its context ends first.
const icsbReadTimeout = 5 * time.Second

// readICSB runs read, Lists of the IC SB cache with the context it is given, only while the
// client is connected to the leader and the cache is consistent, and checks again afterwards
// that the connection did not drop meanwhile: rows read then may be stale.
func (c *Client) readICSB(ctx context.Context, read func(context.Context) error) error {
	if err := c.icsbLive(ctx); err != nil {
		return err
	}
	readCtx, cancel := context.WithTimeout(ctx, icsbReadTimeout)
	defer cancel()
	if err := read(readCtx); err != nil {
		return err
	}
	if err := readCtx.Err(); err != nil {
		// List gave up waiting for a consistent cache and answered from the old one.
		return fmt.Errorf("%w: the cache was not refilled after a reconnect within %s: %w", ErrICSBUnavailable, icsbReadTimeout, err)
	}
	if !c.icsbConnected() {
		return fmt.Errorf("%w: the connection dropped during the read", ErrICSBUnavailable)
	}
	return nil
}

// icsbLive asks the server: the client's own flag stays set after a server dies (libovsdb
// clears only its RPC client then), and a leader-only client is connected to a leader or to
// nothing (libovsdb drops a server that stops being leader), so an answered echo on a
// connected client means the leader answered just now.
func (c *Client) icsbLive(ctx context.Context) error {
	if !c.icsbConnected() {
		return ErrICSBUnavailable
	}
	echoCtx, cancel := context.WithTimeout(ctx, icsbReadTimeout)
	defer cancel()
	if err := c.icsb.Echo(echoCtx); err != nil {
		return fmt.Errorf("%w: %w", ErrICSBUnavailable, err)
	}
	return nil
}

func (c *Client) icsbConnected() bool {
	return c.icsb.Connected() && c.icsb.CurrentEndpoint() != ""
}
