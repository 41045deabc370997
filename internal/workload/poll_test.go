package workload

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	tests := []struct {
		name        string
		timeout     time.Duration
		cancelAfter time.Duration
		// round is one call of f: it sees the call's context and says what it waits for.
		round       func(ctx context.Context, call int) (bool, string)
		wantPending string
		wantErr     error
	}{
		{
			name:    "ready on the third round",
			timeout: 10 * time.Second,
			round: func(_ context.Context, call int) (bool, string) {
				return call == 3, "pods east/server (Pending)"
			},
		},
		{
			// What an API call behind the client's rate limiter does on a loaded server:
			// the first round outlasts the whole timeout, and its account still says what
			// the pods are, not that a deadline cut the call short.
			name:    "a round longer than the timeout still accounts for the state",
			timeout: 50 * time.Millisecond,
			round: func(ctx context.Context, _ int) (bool, string) {
				select {
				case <-ctx.Done():
					return false, "pods east/server (" + ctx.Err().Error() + ")"
				case <-time.After(200 * time.Millisecond):
					return false, "pods east/server (Pending)"
				}
			},
			wantPending: "pods east/server (Pending)",
			wantErr:     ErrTimedOut,
		},
		{
			name:        "interrupted before the first round ends",
			timeout:     10 * time.Second,
			cancelAfter: 20 * time.Millisecond,
			round: func(ctx context.Context, _ int) (bool, string) {
				<-ctx.Done()
				return false, "pods east/server (" + ctx.Err().Error() + ")"
			},
			wantPending: "pods east/server (context canceled)",
			wantErr:     context.Canceled,
		},
		{
			name:        "interrupted between rounds keeps the last account",
			timeout:     10 * time.Second,
			cancelAfter: 1500 * time.Millisecond,
			round: func(ctx context.Context, call int) (bool, string) {
				if ctx.Err() != nil {
					return false, "cut short"
				}
				return false, "pods east/server (Pending)"
			},
			wantPending: "pods east/server (Pending)",
			wantErr:     context.Canceled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tt.cancelAfter > 0 {
				time.AfterFunc(tt.cancelAfter, cancel)
			}
			calls := 0
			pending, err := Poll(ctx, nil, tt.timeout, func(ctx context.Context) (bool, string) {
				calls++
				return tt.round(ctx, calls)
			})
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Poll error = %v, want %v", err, tt.wantErr)
			}
			if pending != tt.wantPending {
				t.Errorf("Poll pending = %q, want %q", pending, tt.wantPending)
			}
		})
	}
}
