package labnet

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestAbandoned tells a lab a killed run left behind (its network, nothing running) from one
// that runs: its lock held, a process in one of its namespaces, or a listener on its API
// address make it live.
func TestAbandoned(t *testing.T) {
	testenv.LabNetwork(t)
	id := LabID(t.TempDir())
	p := applyPlan(t, id, specs(1, 2), 0)
	others, err := OtherLabs(LabID(t.TempDir()))
	if err != nil || len(others) != 1 || others[0] != id {
		t.Fatalf("OtherLabs from another lab's view = %v, %v; want [%s]", others, err, id)
	}
	// check waits a little for the answer: nsenter joins the namespace only after it started.
	check := func(want bool, wantReason string) {
		t.Helper()
		var abandoned bool
		var reason string
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var err error
			if abandoned, reason, err = Abandoned(id); err != nil {
				t.Fatal(err)
			}
			if abandoned == want && strings.Contains(reason, wantReason) {
				return
			}
		}
		t.Errorf("Abandoned = %t (%q); want %t (%q)", abandoned, reason, want, wantReason)
	}
	check(true, "")

	// The process running a lab holds its lock from before its network exists: a second
	// lab of the same ID is refused, and the lab is not abandoned while its processes start.
	lock, err := Lock(id)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := Lock(id); err == nil || !strings.Contains(err.Error(), "already running: process "+strconv.Itoa(os.Getpid())+" holds") {
		t.Errorf("second Lock = %v, %v; want it refused, naming this process", again, err)
	}
	check(false, "process "+strconv.Itoa(os.Getpid())+" holds")
	lock.Close()
	check(true, "")

	node := p.Clusters[0].Nodes[0].Netns
	sleep := exec.Command("nsenter", "--net="+NetnsPath(node), "sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	check(false, "process "+strconv.Itoa(sleep.Process.Pid))
	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	check(true, "")

	ln, err := net.Listen("tcp", netip.AddrPortFrom(APIAddress, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	check(false, "1 TCP sockets listen on its API address")
	// A client's connection from the API address outlives the server it talked to; it is
	// not a running lab.
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ln.Close()
	check(true, "")
}
