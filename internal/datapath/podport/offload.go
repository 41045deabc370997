package podport

import (
	"fmt"
	"unsafe"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/octopus-mcs/octopus/internal/datapath/netnsrun"
)

// disableTxChecksum turns off transmit checksum offload on interface name of namespace ns.
// The pod's packets go from its veth to ovs-vswitchd's packet socket and on to another veth
// in software, where no device ever fills in a checksum left for the hardware: with the
// offload on, pings pass (ICMP is checksummed by the stack) and every TCP segment is dropped
// at its receiver. Turning it off also turns off TSO, so the stack segments before the veth
// and ovs-vswitchd never sees a frame larger than the MTU.
func disableTxChecksum(ns netns.NsHandle, name string) error {
	fd, err := socketIn(ns)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	value := struct{ cmd, data uint32 }{cmd: unix.ETHTOOL_STXCSUM, data: 0}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data uintptr
		_    [16]byte // the rest of struct ifreq
	}
	copy(ifr.name[:unix.IFNAMSIZ-1], name)
	ifr.data = uintptr(unsafe.Pointer(&value))
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return fmt.Errorf("turning off transmit checksum offload on %s: %w", name, errno)
	}
	return nil
}

// socketIn opens a datagram socket in namespace ns: ethtool's ioctls act on the devices of
// the socket's namespace, whichever thread later uses it.
func socketIn(ns netns.NsHandle) (int, error) {
	orig, err := netns.Get()
	if err != nil {
		return -1, fmt.Errorf("getting the current network namespace: %w", err)
	}
	defer orig.Close()
	if ns.Equal(orig) {
		// No setns into one's own namespace: it needs CAP_SYS_ADMIN (see handleAt).
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("opening a socket: %w", err)
		}
		return fd, nil
	}
	fd := -1
	err = netnsrun.InNamespace(ns, "of the pod", func() error {
		s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening a socket in the pod's network namespace: %w", err)
		}
		fd = s
		return nil
	})
	if err != nil {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
		return -1, err
	}
	return fd, nil
}
