package kernel

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/octopus-mcs/octopus/internal/datapath/netnsrun"
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

// greInThrowawayNetns adds a gretap link in a new network namespace, which nothing holds
// after: it goes, and the link with it (netnsrun.InNew).
func greInThrowawayNetns() (ok bool, err error) {
	err = netnsrun.InNew(func(string) error {
		h, err := netlink.NewHandle()
		if err != nil {
			return fmt.Errorf("opening netlink in the GRE probe's namespace: %w", err)
		}
		defer h.Close()
		link := &netlink.Gretap{LinkAttrs: netlink.LinkAttrs{Name: greProbeLink}, Local: []byte{192, 0, 2, 1}, Remote: []byte{192, 0, 2, 2}}
		switch err := h.LinkAdd(link); {
		case err == nil:
			ok = true
			return nil
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENODEV):
			// "Unknown device type": no GRE in the kernel, and none to load.
			return nil
		default:
			return fmt.Errorf("adding a gretap link to probe for GRE: %w", err)
		}
	})
	return ok, err
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
