// Package procfs reads what Octopus needs from /proc. Mostly the two questions it asks about a
// PID before it signals it: is the process still alive, and is it still the process we
// started (its command line). A PID read from a pidfile may have been reused; only a live
// process whose command line matches may be stopped. The benchmarks also read CPU times
// here, of a process and of the whole machine.
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// Alive reports whether pid exists and is not a zombie: a zombie holds no resources and is
// its parent's to reap, so it counts as gone.
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may contain spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state != 'Z' && state != 'X'
}

// Cmdline returns the arguments of pid, the program first.
func Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, fmt.Errorf("reading the command line of pid %d: %w", pid, err)
	}
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil, nil // a kernel thread or a process that is exiting
	}
	return strings.Split(string(b), "\x00"), nil
}
