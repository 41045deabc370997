// Package progress prints the one-line steps long operations show to the user.
package progress

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Reporter writes steps to W; a nil Reporter or nil W prints nothing. Steps of work done
// concurrently (the lab joins its clusters at once) may share one Reporter: each line is
// written whole.
type Reporter struct {
	W  io.Writer
	mu sync.Mutex
}

// Step announces a step that is starting or has happened.
func (r *Reporter) Step(format string, args ...any) {
	if r == nil || r.W == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.W, "==> "+format+"\n", args...)
}

// Done reports a step that finished, with how long it took.
func (r *Reporter) Done(start time.Time, format string, args ...any) {
	if r == nil || r.W == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.W, "    "+format+" (%s)\n", append(args, time.Since(start).Round(10*time.Millisecond))...)
}
