package ovnic

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
)

// TestSupervisorFollowsEndpointsFile runs the Supervisor with the real ovn-ic against two
// independent pairs of IC databases, A and B: on the endpoints file naming A, the AZ registers
// in A; once the file is rewritten to B (as the icmaster does when ovn-ic-config's ic-db-host
// changes), the AZ appears in B's Availability_Zone table, restarted by the same supervisor
// (its Run never returned) exactly once, the old ovn-ic gone before the new one started.
func TestSupervisorFollowsEndpointsFile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts OVN daemons")
	}
	dir := scratch(t)
	type pair struct{ nb, sb icDB }
	pairs := map[string]pair{}
	for _, name := range []string{"a", "b"} {
		pairs[name] = pair{
			nb: startICDB(t, dir, "ic-nb-"+name, icNBSchema, "ovn-ic-nbctl"),
			sb: startICDB(t, dir, "ic-sb-"+name, icSBSchema, "ovn-ic-sbctl"),
		}
	}
	central := ovntest.StartCentral(t)
	// The AZ's name in its NB: the icmaster's first write (Apply), which ovn-ic waits for.
	if out, err := central.NB.Ctl(t.Context(), "set", "NB_Global", ".", "name=east"); err != nil {
		t.Fatalf("naming the AZ: %v %s", err, out)
	}
	if _, err := exec.LookPath("ovn-ic"); err != nil {
		t.Skipf("ovn-ic not found (Debian's ovn-ic; run hack/install-deps.sh): %v", err)
	}

	// The real starter, counted: every ovn-ic the supervisor started, in order.
	var mu sync.Mutex
	var started []Process
	start := func(argv []string) (Process, error) {
		p, err := ExecStarter(argv)
		if err == nil {
			mu.Lock()
			started = append(started, p)
			mu.Unlock()
		}
		return p, err
	}
	file := filepath.Join(dir, "ic-endpoints.json")
	s := &Supervisor{
		File: file, Start: start, Poll: 100 * time.Millisecond,
		Argv: []string{"ovn-ic", "--ovnnb-db=" + central.NB.Endpoint, "--ovnsb-db=" + central.SB.Endpoint,
			"--unixctl=" + filepath.Join(dir, "ovn-ic.ctl"), "--log-file=" + filepath.Join(dir, "ovn-ic.log"), "-vconsole:off"},
		Log: testr.New(t),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("supervisor: %v", err)
		}
	})
	running := func() {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("the supervisor returned (%v); it should have restarted ovn-ic in place", err)
		default:
		}
	}
	azs := func(sb icDB) (string, error) {
		out, err := exec.Command("ovn-ic-sbctl", "--db="+sb.endpoint, "--bare", "--columns=name", "list", "Availability_Zone").Output()
		return strings.Join(strings.Fields(string(out)), ","), err
	}
	waitAZ := func(in string) time.Duration {
		t.Helper()
		t0 := time.Now()
		eventually(t, convergeTimeout, "AZ east in IC SB "+in, func() error {
			running()
			got, err := azs(pairs[in].sb)
			if err != nil || got != "east" {
				return fmt.Errorf("availability zones %q: %w", got, err)
			}
			return nil
		})
		return time.Since(t0)
	}
	write := func(name string) {
		t.Helper()
		if _, err := WriteEndpointsFile(file, Endpoints{NB: pairs[name].nb.endpoint, SB: pairs[name].sb.endpoint}); err != nil {
			t.Fatal(err)
		}
	}

	// No file: nothing runs, nothing registers.
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	n := len(started)
	mu.Unlock()
	if n != 0 {
		t.Fatalf("%d ovn-ic started without an endpoints file", n)
	}

	write("a")
	t.Logf("AZ east in A %v after the first file", waitAZ("a"))
	if got, err := azs(pairs["b"].sb); err != nil || got != "" {
		t.Fatalf("IC SB B's availability zones %q (%v) before the file names B; want none", got, err)
	}

	write("b")
	t.Logf("AZ east in B %v after the file was rewritten", waitAZ("b"))
	// The same content again restarts nothing.
	write("b")
	time.Sleep(3 * s.Poll)
	running()
	mu.Lock()
	defer mu.Unlock()
	if len(started) != 2 {
		t.Fatalf("%d ovn-ic started, want 2 (one restart)", len(started))
	}
	select {
	case <-started[0].Done():
	default:
		t.Errorf("the first ovn-ic (pid %d) is still running beside the second (pid %d)", started[0].PID(), started[1].PID())
	}
	select {
	case <-started[1].Done():
		t.Errorf("the restarted ovn-ic (pid %d) exited: %v", started[1].PID(), started[1].Err())
	default:
	}
}
