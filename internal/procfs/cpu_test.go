package procfs

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProcessCPU spins this process for a while and checks that its CPU time grew by about
// that much, and that the system's did at least as much.
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
	const spin = 300 * time.Millisecond
	for end := time.Now().Add(spin); time.Now().Before(end); {
	}
	after, err := ProcessCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	sysAfter, err := ReadSystemCPU()
	if err != nil {
		t.Fatal(err)
	}
	// Wall time spun is an upper bound (the VM may have been descheduled), ticks round down.
	if used := after - before; used < 50*time.Millisecond || used > spin+200*time.Millisecond {
		t.Errorf("ProcessCPU grew by %v while spinning %v", used, spin)
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
