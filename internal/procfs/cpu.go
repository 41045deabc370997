package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of every CPU time in /proc (USER_HZ): 100 on every architecture Linux
// runs Go on, whatever the kernel's own tick rate.
const userHZ = 100

func ticks(n uint64) time.Duration { return time.Duration(n) * time.Second / userHZ }

// ProcessCPU returns the CPU time pid has used so far, in user and system mode together.
func ProcessCPU(pid int) (time.Duration, error) {
	f, err := stat(pid)
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of pid %d: %w", pid, err)
	}
	// utime and stime are the stat file's fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	var sum uint64
	for _, v := range f[11:13] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		sum += n
	}
	return ticks(sum), nil
}

// SystemCPU is the time of all CPUs together since boot, from the first line of /proc/stat.
type SystemCPU struct {
	// Total is every state's time; Idle counts iowait too (nothing ran); Steal is the time
	// the hypervisor gave to other guests.
	Total, Idle, Steal time.Duration
}

// ReadSystemCPU reads SystemCPU.
func ReadSystemCPU() (SystemCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return SystemCPU{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal [guest guest_nice, already in user]
	if len(f) < 9 || f[0] != "cpu" {
		return SystemCPU{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var t SystemCPU
	for i, v := range f[1:9] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return SystemCPU{}, fmt.Errorf("/proc/stat: %q: %w", line, err)
		}
		t.Total += ticks(n)
		switch i {
		case 3, 4:
			t.Idle += ticks(n)
		case 7:
			t.Steal = ticks(n)
		}
	}
	return t, nil
}

// Sub is the CPU time spent between before and t.
func (t SystemCPU) Sub(before SystemCPU) SystemCPU {
	return SystemCPU{Total: t.Total - before.Total, Idle: t.Idle - before.Idle, Steal: t.Steal - before.Steal}
}

// LoadAverage is the machine's 1, 5 and 15 minute load average as /proc/loadavg gives it
// ("unknown" if unreadable): benchmarks on a shared machine say it beside their results.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
