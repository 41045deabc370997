package procfs

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProcessCPU spins this process until ProcessCPU says it used 100 ms, checks that this
// is no more than the wall time allows, and that the system's busy time grew with it.
func TestProcessCPU(t *testing.T) {
	pid := os.Getpid()
	before, err := ProcessCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	sysBefore, err := ReadSystemCPU()
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the process has used want, not for a fixed wall time: the suite runs this
	// package at nice 19 beside the lab, where 300 ms of wall time has brought no CPU at all.
	const want = 100 * time.Millisecond
	start := time.Now()
	var after time.Duration
	for after-before < want {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("ProcessCPU grew by %v in 30 s of spinning, want %v", after-before, want)
		}
		for end := time.Now().Add(10 * time.Millisecond); time.Now().Before(end); {
		}
		if after, err = ProcessCPU(pid); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	sysAfter, err := ReadSystemCPU()
	if err != nil {
		t.Fatal(err)
	}
	// Every CPU busy for the whole wall time is an upper bound; a clock tick more for rounding.
	if used, most := after-before, elapsed*time.Duration(runtime.NumCPU())+20*time.Millisecond; used > most {
		t.Errorf("ProcessCPU grew by %v in %v of wall time on %d CPUs", used, elapsed, runtime.NumCPU())
	}
	d := sysAfter.Sub(sysBefore)
	if busy := d.Total - d.Idle - d.Steal; busy < (after-before)/2 {
		t.Errorf("the system's busy time grew by %v, less than this process's %v", busy, after-before)
	}
	if d.Idle > d.Total || d.Steal > d.Total {
		t.Errorf("inconsistent system CPU times %+v", d)
	}
	if _, err := ProcessCPU(1 << 30); err == nil {
		t.Error("ProcessCPU of a PID that cannot exist returned no error")
	}
}

// TestLoadAverage reads this machine's three load averages.
func TestLoadAverage(t *testing.T) {
	fields := strings.Fields(LoadAverage())
	if len(fields) != 3 {
		t.Fatalf("LoadAverage() = %q, want three numbers", LoadAverage())
	}
	for _, f := range fields {
		if _, err := strconv.ParseFloat(f, 64); err != nil {
			t.Errorf("load average %q: %v", f, err)
		}
	}
}
