package kernel

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// greProbeLink is the link GREAvailable tries to make. It lives only in a network namespace
// of its own, which goes with it, so no name of the host's can clash with it.
const greProbeLink = "octopus-gre"

// GREAvailable tells whether this kernel makes GRE (gretap) links. It asks the kernel itself
// rather than guessing from files: it creates a throwaway network namespace and tries to add a
// gretap link there, which also loads ip_gre where the kernel loads modules on demand (the
// link type is all a VpcNatTunnel of type gre needs). The namespace is released before it
// returns, so nothing of the probe is left on the host whatever the answer.
//
// A process without the right to make a network namespace (CAP_SYS_ADMIN) cannot ask that way;
// it looks for ip_gre in /sys/module and /proc/modules instead, which finds a loaded or
// built-in module but not one the kernel would load on demand: then it says false, the safe
// answer (a gre tunnel is refused with a condition rather than half-made).
func GREAvailable() (bool, error) {
	ok, err := greInThrowawayNetns()
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return greModulePresent("/sys/module", "/proc/modules")
	}
	return ok, err
}

// greInThrowawayNetns adds a gretap link in a new network namespace. The thread that enters
// it is locked and returned to its namespace before it is unlocked; one that cannot be
// returned stays locked, so that the Go runtime ends it instead of reusing it elsewhere.
func greInThrowawayNetns() (ok bool, err error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return false, fmt.Errorf("reading the thread's network namespace: %w", err)
	}
	defer orig.Close()
	probe, err := netns.New()
	if err != nil {
		// New may have unshared before it failed: the thread goes back to its namespace
		// before it is shared again, or stays locked for the runtime to end.
		if rerr := netns.Set(orig); rerr == nil {
			runtime.UnlockOSThread()
		}
		return false, fmt.Errorf("creating a network namespace to probe for GRE: %w", err)
	}
	defer func() {
		// Closing the last handle of a namespace with no process in it frees it, and the
		// link with it.
		probe.Close()
		if rerr := netns.Set(orig); rerr != nil {
			err = errors.Join(err, fmt.Errorf("returning to the thread's network namespace after the GRE probe: %w", rerr))
			return
		}
		runtime.UnlockOSThread()
	}()
	h, err := netlink.NewHandleAt(probe)
	if err != nil {
		return false, fmt.Errorf("opening netlink in the GRE probe's namespace: %w", err)
	}
	defer h.Close()
	link := &netlink.Gretap{LinkAttrs: netlink.LinkAttrs{Name: greProbeLink}, Local: []byte{192, 0, 2, 1}, Remote: []byte{192, 0, 2, 2}}
	switch err := h.LinkAdd(link); {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENODEV):
		// "Unknown device type": no GRE in the kernel, and none to load.
		return false, nil
	default:
		return false, fmt.Errorf("adding a gretap link to probe for GRE: %w", err)
	}
}

// greModulePresent looks for ip_gre in sysModule (a directory per loaded or built-in module
// with parameters) and in procModules (the loaded modules, one a line). Missing files are no
// error: a kernel built without modules has no /proc/modules.
func greModulePresent(sysModule, procModules string) (bool, error) {
	if _, err := os.Stat(sysModule + "/ip_gre"); err == nil {
		return true, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("looking for ip_gre in %s: %w", sysModule, err)
	}
	data, err := os.ReadFile(procModules)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", procModules, err)
	}
	for line := range strings.Lines(string(data)) {
		if name, _, _ := strings.Cut(line, " "); name == "ip_gre" {
			return true, nil
		}
	}
	return false, nil
}
