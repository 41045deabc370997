package kube

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// Backoff of WaitForServerOnReads while the server cannot be dialled.
const (
	dialRetryMin = 100 * time.Millisecond
	dialRetryMax = 2 * time.Second
)

// WaitForServerOnReads returns a copy of cfg whose GET requests, when the server cannot be
// dialled, dial again until it can or the request's context ends, instead of failing.
//
// It is for the configuration of informer caches that must catch up as soon as a server comes
// back; clients that should see an outage (heartbeats, status, the CLI) keep the plain one.
// Every failed list or watch sends client-go's reflector into an exponential backoff that,
// after half a minute of outage, reaches [30 s, 60 s): an informer then stays stale for up to
// a minute after its server returned, whatever else recovered. Waiting inside the transport
// keeps the reflector's one attempt open instead, and the first dial that succeeds serves it.
// A dial that failed never reached the server, so dialling again is safe for any request; only
// reads wait, so that a cache's client still fails its writes fast.
func WaitForServerOnReads(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(next http.RoundTripper) http.RoundTripper { return dialRetrier{next: next} })
	return out
}

type dialRetrier struct{ next http.RoundTripper }

func (d dialRetrier) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		return d.next.RoundTrip(req)
	}
	ctx := req.Context()
	delay := dialRetryMin
	var lastDial error
	for {
		resp, err := d.next.RoundTrip(req)
		switch {
		case err == nil:
			return resp, nil
		case isDialError(err):
			lastDial = err
		case lastDial != nil && ctx.Err() != nil:
			// Gave up waiting: say why it waited, not only that it stopped.
			return nil, fmt.Errorf("%w; while waiting for the server: %w", err, lastDial)
		default:
			return resp, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w; while waiting for the server: %w", ctx.Err(), lastDial)
		case <-t.C:
		}
		delay = min(2*delay, dialRetryMax)
	}
}

// WrappedRoundTripper lets client-go's transport debugging see through the wrapper.
func (d dialRetrier) WrappedRoundTripper() http.RoundTripper { return d.next }

// isDialError reports whether err is a failure to connect (refused, unreachable, timed out
// connecting): the request was never sent.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
