package netnsrun

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

// TestIn: fn runs in the named namespace (it sees a link only that namespace has), its error
// comes back, the thread is back in its own namespace afterwards, and a path that is no
// namespace is an error naming it, with fn never run.
func TestIn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace")
	}
	name := fmt.Sprintf("octnsrun-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	if out, err := exec.Command("ip", "-n", name, "link", "add", "octnsrun0", "type", "veth", "peer", "name", "octnsrun1").CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}
	path := filepath.Join("/run/netns", name)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()

	want := errors.New("fn's own error")
	var sawLink bool
	err = In(path, func() error {
		// The calling thread's own view of the devices: the namespace it is in.
		out, err := os.ReadFile("/proc/thread-self/net/dev")
		sawLink = err == nil && strings.Contains(string(out), "octnsrun0:")
		return want
	})
	if !errors.Is(err, want) {
		t.Errorf("In returned %v, want fn's error", err)
	}
	if !sawLink {
		t.Error("fn did not run in the namespace: it saw no octnsrun0")
	}
	checkStillIn(t, before, "the thread was left in the other namespace")

	ran := false
	err = In("/nonexistent/netns", func() error { ran = true; return nil })
	if err == nil || ran {
		t.Errorf("In on a missing namespace: err %v, fn ran %v; want an error and no run", err, ran)
	}
}

// TestInNew: fn runs in a namespace of its own, other than the caller's, named by the path it
// gets; the caller's thread never leaves its namespace; an error of fn comes back.
func TestInNew(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()

	want := errors.New("fn's own error")
	var devices string
	var sameAsPath bool
	err = InNew(func(self string) error {
		out, err := os.ReadFile("/proc/thread-self/net/dev")
		devices = string(out)
		if err != nil {
			return err
		}
		named, err := netns.GetFromPath(self)
		if err != nil {
			return err
		}
		defer named.Close()
		current, err := netns.Get()
		if err != nil {
			return err
		}
		defer current.Close()
		sameAsPath = named.Equal(current) && !current.Equal(before)
		return want
	})
	if !errors.Is(err, want) {
		t.Errorf("InNew returned %v, want fn's error", err)
	}
	// Not "lo alone": with ip_gre, ipip or sit loaded, every new namespace also gets their
	// fallback devices.
	if !strings.Contains(devices, "lo:") {
		t.Errorf("fn saw the devices %q, want a namespace's own lo", devices)
	}
	if !sameAsPath {
		t.Error("fn did not run in a namespace of its own named by the path it got")
	}
	checkStillIn(t, before, "the caller's thread left its namespace")
}

// checkStillIn fails with msg unless the calling (locked) thread is in the namespace before.
func checkStillIn(t *testing.T, before netns.NsHandle, msg string) {
	t.Helper()
	after, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if !after.Equal(before) {
		t.Error(msg)
	}
}
