package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPU cost is counted per process, not from the whole machine's /proc/stat, because other
// work shares the machine. The kernel's share is in there too: this kernel accounts time by
// tick without IRQ_TIME_ACCOUNTING, so softirq work (veth forwarding, VXLAN, UDP and TCP
// receive) is charged to the task it interrupted, which on our path is one of our processes,
// or to ksoftirqd when deferred. Counted: the iperf3 client and server, the gateway processes,
// and ksoftirqd/N (machine-wide; what other work makes them do is noise in our figure).

// userHZ is the unit of /proc/<pid>/stat times (sysconf(_SC_CLK_TCK), 100 on Linux).
const userHZ = 100

// cpuTime is the sum of user and system time of pids so far; vanished processes count 0.
func cpuTime(pids []int) time.Duration {
	var ticks uint64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if t, err := parseStatTicks(string(b)); err == nil {
			ticks += t
		}
	}
	return time.Duration(ticks) * time.Second / userHZ
}

// parseStatTicks returns utime + stime (fields 14 and 15) of a /proc/<pid>/stat line. The
// command name (field 2) may contain spaces and parentheses, so fields are counted after its
// last ')'.
func parseStatTicks(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("short stat line %q", stat)
	}
	utime, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, err
	}
	stime, err := strconv.ParseUint(f[12], 10, 64)
	return utime + stime, err
}

// ksoftirqdPIDs finds the per-CPU softirq threads.
func ksoftirqdPIDs() []int {
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	var pids []int
	for _, c := range comms {
		b, err := os.ReadFile(c)
		if err != nil || !strings.HasPrefix(string(b), "ksoftirqd/") {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(c))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
