package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"

	utilexec "k8s.io/client-go/util/exec"
)

// TestRetryUnstarted: an exec that did not start is tried again, up to the bound; one whose
// command ran and failed, or that succeeded, is not.
func TestRetryUnstarted(t *testing.T) {
	unstarted := fmt.Errorf("octopus-echo: %w", errors.New("Internal error occurred: failed to exec in container: failed to load task: context deadline exceeded"))
	exited := fmt.Errorf("octopus-echo: %w: dial timeout", utilexec.CodeExitError{Err: errors.New("command terminated with exit code 1"), Code: 1})
	for _, tc := range []struct {
		name      string
		results   []error
		wantRuns  int
		wantError bool
	}{
		{"succeeds", []error{nil}, 1, false},
		{"starts on the second try", []error{unstarted, nil}, 2, false},
		{"never starts", []error{unstarted, unstarted, unstarted, nil}, 3, true},
		{"ran and failed", []error{exited, nil}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs, retries := 0, 0
			out, err := retryUnstarted(context.Background(), 3, 0, func() (string, error) {
				runs++
				return "out", tc.results[runs-1]
			}, func(error) { retries++ })
			if runs != tc.wantRuns || retries != runs-1 || (err != nil) != tc.wantError || out != "out" {
				t.Errorf("%d runs, %d retries, %q, %v; want %d runs, an error %v", runs, retries, out, err, tc.wantRuns, tc.wantError)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	runs := 0
	if _, err := retryUnstarted(ctx, 3, 0, func() (string, error) { runs++; return "", unstarted }, func(error) {}); err == nil || runs != 1 {
		t.Errorf("a cancelled context: %d runs, %v; want one run and its error", runs, err)
	}
}
