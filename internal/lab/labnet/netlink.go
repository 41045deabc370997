package labnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// onLockedThread runs f on a goroutine locked to its own OS thread, for operations that switch
// the thread's network namespace (creating a namespace, writing its sysctls). The thread's
// namespace is restored afterwards; if that fails the thread stays locked, and Go terminates a
// locked thread when its goroutine returns, so a thread in a foreign namespace never goes back
// to the pool where any goroutine could run on it.
func onLockedThread(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("reading the thread's network namespace: %w", err)
			return // still locked: the thread is discarded, which is harmless
		}
		defer orig.Close()
		ferr := f()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("restoring the thread's network namespace: %w", err))
			return // still locked: the thread exits instead of serving other goroutines
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// inNamespace runs f on a locked thread switched into the named namespace.
func inNamespace(name string, f func() error) error {
	return onLockedThread(func() error {
		h, err := netns.GetFromName(name)
		if err != nil {
			return fmt.Errorf("opening network namespace %s: %w", name, err)
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			return fmt.Errorf("entering network namespace %s: %w", name, err)
		}
		return f()
	})
}

// EnsureNamespace creates the named network namespace unless it exists. A leftover file that
// is not a mounted namespace (a crash between creating and mounting it) is replaced.
func EnsureNamespace(name string) error {
	if isMountedNamespace(NetnsPath(name)) {
		return nil
	}
	if err := DeleteNamespace(name); err != nil {
		return err
	}
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("creating network namespace %s: %w", name, err)
	}
	if err := shareNetnsDir(netnsDir); err != nil {
		return fmt.Errorf("creating network namespace %s: %w", name, err)
	}
	return onLockedThread(func() error {
		// NewNamed unshares the calling thread into the new namespace and bind-mounts it;
		// onLockedThread switches the thread back.
		h, err := netns.NewNamed(name)
		if err != nil {
			return fmt.Errorf("creating network namespace %s: %w", name, err)
		}
		return h.Close()
	})
}

// NameNamespace gives the network namespace at path (a process's /proc/<pid>/ns/net) the
// given name, as `ip netns attach` does, replacing a namespace of that name that is another
// one. The bind mount keeps the namespace alive until DeleteNamespace.
func NameNamespace(name, path string) error {
	var want, have unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		return fmt.Errorf("naming network namespace %s: %w", name, err)
	}
	if isMountedNamespace(NetnsPath(name)) && unix.Stat(NetnsPath(name), &have) == nil && have.Ino == want.Ino && have.Dev == want.Dev {
		return nil
	}
	if err := DeleteNamespace(name); err != nil {
		return err
	}
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("naming network namespace %s: %w", name, err)
	}
	if err := shareNetnsDir(netnsDir); err != nil {
		return fmt.Errorf("naming network namespace %s: %w", name, err)
	}
	f, err := os.OpenFile(NetnsPath(name), os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("naming network namespace %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("naming network namespace %s: %w", name, err)
	}
	if err := unix.Mount(path, NetnsPath(name), "none", unix.MS_BIND, ""); err != nil {
		return errors.Join(fmt.Errorf("naming network namespace %s: bind-mounting %s: %w", name, path, err), os.Remove(NetnsPath(name)))
	}
	return nil
}

// shareNetnsDir makes dir a shared mount point of its own, as `ip netns add` does before it
// mounts a namespace there (iproute2's netns_add: make the directory shared, and where that
// fails because it is no mount point, bind it onto itself first). The lab does it before it
// mounts its first namespace, so that a later `ip netns add` (a test running beside the lab,
// a user) finds a mount point and changes nothing. Otherwise that bind would copy the lab's
// namespace mounts into a new layer over the directory, and each of them would stay mounted
// below it after the lab unmounts its visible copy, so that teardown could not remove its
// file (EBUSY) while the namespaces lived on. The same call again is a no-op.
func shareNetnsDir(dir string) error {
	const shared = unix.MS_SHARED | unix.MS_REC
	err := unix.Mount("", dir, "none", shared, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("making %s a shared mount: %w", dir, err)
	}
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mounting %s onto itself, as ip netns does: %w", dir, err)
	}
	if err := unix.Mount("", dir, "none", shared, ""); err != nil {
		return fmt.Errorf("making %s a shared mount: %w", dir, err)
	}
	return nil
}

// NamespaceExists reports whether a network namespace of that name exists.
func NamespaceExists(name string) bool { return isMountedNamespace(NetnsPath(name)) }

// isMountedNamespace reports whether path is a network namespace bind mount (nsfs).
func isMountedNamespace(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// DeleteNamespace unmounts and removes a named network namespace; a missing one is not an
// error. The kernel frees the namespace, and with it every link inside (and the peers of its
// veths), once no process runs in it.
func DeleteNamespace(name string) error {
	path := NetnsPath(name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		// EINVAL: not a mount point (a leftover plain file); ENOENT: already gone.
		return fmt.Errorf("deleting network namespace %s: %w", name, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("deleting network namespace %s: %w", name, err)
	}
	return nil
}

// ListNamespaces returns the named network namespaces whose names start with prefix, sorted.
func ListNamespaces(prefix string) ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing network namespaces: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// nsHandle is a netlink socket bound to one namespace; its operations need no thread switch.
type nsHandle struct {
	name string // "" for the root namespace
	ns   netns.NsHandle
	*netlink.Handle
}

// openNamespace opens a netlink handle in the named namespace, or in the root namespace (the
// one this process started in) for "". Call it from a goroutine that is not locked to a
// thread.
func openNamespace(name string) (*nsHandle, error) {
	var ns netns.NsHandle
	var err error
	if name == "" {
		// The caller's goroutine is not locked to a thread (none of ours that switch
		// namespaces ever run unlocked), so its thread is in the namespace the process
		// started in, where the API servers listen.
		ns, err = netns.Get()
	} else {
		ns, err = netns.GetFromName(name)
	}
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %q: %w", name, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		_ = ns.Close()
		return nil, fmt.Errorf("opening netlink in network namespace %q: %w", name, err)
	}
	return &nsHandle{name: name, ns: ns, Handle: h}, nil
}

func (h *nsHandle) Close() {
	h.Handle.Close()
	_ = h.ns.Close()
}

func (h *nsHandle) where() string {
	if h.name == "" {
		return "root namespace"
	}
	return "namespace " + h.name
}

// link returns the named link.
func (h *nsHandle) link(name string) (netlink.Link, error) {
	l, err := h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("finding link %s in %s: %w", name, h.where(), err)
	}
	return l, nil
}

// ensureBridge creates a bridge unless a link of that name exists.
func (h *nsHandle) ensureBridge(name string) error {
	if _, err := h.LinkByName(name); err == nil {
		return nil
	}
	err := h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}})
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("creating bridge %s in %s: %w", name, h.where(), err)
	}
	return nil
}

// ensureVeth creates a veth pair with one end here and the other, peerName, in peer. Both ends
// are created in one netlink request, so a crash never leaves half a pair in the wrong place.
func (h *nsHandle) ensureVeth(name, peerName string, peer *nsHandle) error {
	if _, err := h.LinkByName(name); err == nil {
		return nil
	}
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: name},
		PeerName:      peerName,
		PeerNamespace: netlink.NsFd(peer.ns),
	}
	if err := h.LinkAdd(veth); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("creating veth %s (%s) - %s (%s): %w", name, h.where(), peerName, peer.where(), err)
	}
	return nil
}

// setMaster makes a link a port of a bridge.
func (h *nsHandle) setMaster(name, bridge string) error {
	l, err := h.link(name)
	if err != nil {
		return err
	}
	br, err := h.link(bridge)
	if err != nil {
		return err
	}
	if l.Attrs().MasterIndex == br.Attrs().Index {
		return nil
	}
	if err := h.LinkSetMasterByIndex(l, br.Attrs().Index); err != nil {
		return fmt.Errorf("adding %s to bridge %s in %s: %w", name, bridge, h.where(), err)
	}
	return nil
}

// setUp brings links up.
func (h *nsHandle) setUp(names ...string) error {
	for _, name := range names {
		l, err := h.link(name)
		if err != nil {
			return err
		}
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("bringing %s up in %s: %w", name, h.where(), err)
		}
	}
	return nil
}

// replaceAddr puts addr on a link (idempotent). An IPv6 address skips duplicate address
// detection, so it is usable at once (never tentative): the lab's plan gives no address twice.
func (h *nsHandle) replaceAddr(name string, addr netip.Prefix) error {
	l, err := h.link(name)
	if err != nil {
		return err
	}
	nladdr, err := netlink.ParseAddr(addr.String())
	if err != nil {
		return fmt.Errorf("parsing %s: %w", addr, err)
	}
	if addr.Addr().Is6() {
		nladdr.Flags = unix.IFA_F_NODAD
	}
	if err := h.AddrReplace(l, nladdr); err != nil {
		return fmt.Errorf("adding %s to %s in %s: %w", addr, name, h.where(), err)
	}
	return nil
}

// replaceRoute installs a route to dst over the node's LAN link (where a node's routes go),
// via gw if it is valid, else directly on the link (scope link).
func (h *nsHandle) replaceRoute(dst netip.Prefix, gw netip.Addr) error {
	return h.replaceRouteOn(nodeLANName, dst, gw)
}

// replaceRouteOn is replaceRoute over the link named dev.
func (h *nsHandle) replaceRouteOn(dev string, dst netip.Prefix, gw netip.Addr) error {
	l, err := h.link(dev)
	if err != nil {
		return err
	}
	_, ipnet, err := net.ParseCIDR(dst.String())
	if err != nil {
		return fmt.Errorf("parsing %s: %w", dst, err)
	}
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipnet, Protocol: routeProtocol}
	if gw.IsValid() {
		r.Gw = gw.AsSlice()
	} else {
		r.Scope = netlink.SCOPE_LINK
	}
	if err := h.RouteReplace(r); err != nil {
		return fmt.Errorf("adding route %s via %s dev %s in %s: %w", dst, gw, dev, h.where(), err)
	}
	return nil
}

// deleteLink removes a link; a missing one is not an error.
func (h *nsHandle) deleteLink(name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		return fmt.Errorf("finding link %s in %s: %w", name, h.where(), err)
	}
	if err := h.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("deleting link %s in %s: %w", name, h.where(), err)
	}
	return nil
}

// linksWithPrefix lists the names of links whose names start with prefix.
func (h *nsHandle) linksWithPrefix(prefix string) ([]string, error) {
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links in %s: %w", h.where(), err)
	}
	var names []string
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, prefix) {
			names = append(names, l.Attrs().Name)
		}
	}
	return names, nil
}

// disableIPv6 turns IPv6 off on a link of the root namespace before it comes up, so that the
// kernel adds no link-local address and no fe80::/64 or multicast route for it there: the
// root namespace gains only the IPv4 routes of the plan. It must run on a thread in the root
// namespace, which every unlocked goroutine's thread is (see onLockedThread).
func disableIPv6(link string) error {
	path := filepath.Join("/proc/sys/net/ipv6/conf", link, "disable_ipv6")
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // IPv6 is off in this kernel
		}
		return fmt.Errorf("disabling IPv6 on %s: %w", link, err)
	}
	return nil
}
