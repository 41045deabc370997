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
	f, err := stat(pid)
	if err != nil {
		return false
	}
	return f[0] != "Z" && f[0] != "X"
}

// stat returns the fields of /proc/<pid>/stat from the third, the state, on: the second, the
// command name, is in parentheses and may contain spaces, so fields are counted after it.
func stat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name in %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) == 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no state in %q", pid, b)
	}
	return f, nil
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
