package labnet

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"strings"
)

// Abandoned tells whether lab id is what a killed run left behind rather than a lab that is
// running: no process holds its lock (Lock, taken before its network is made), no process
// lives in any of its namespaces (every node runs kube-proxy and its pods there; pods can
// outlive a killed `lab up`) and nothing in the root namespace listens on APIAddress (its API
// servers). When it is not, reason says what still runs, so the caller's error can name it.
func Abandoned(id string) (abandoned bool, reason string, err error) {
	held, who, err := lockHeld(id)
	if err != nil || held {
		return false, who, err
	}
	names, err := ListNamespaces(NetnsOwnerPrefix(id))
	if err != nil {
		return false, "", err
	}
	pids, err := pidsIn(namespaceInodes(names))
	if err != nil {
		return false, "", err
	}
	if len(pids) > 0 {
		return false, fmt.Sprintf("process %d runs in its namespaces", pids[0]), nil
	}
	listening, err := listenersOn(APIAddress)
	if err != nil {
		return false, "", err
	}
	if listening > 0 {
		return false, fmt.Sprintf("%d TCP sockets listen on its API address %s", listening, APIAddress), nil
	}
	return true, "", nil
}

// listenersOn counts the listening TCP sockets of the calling thread's network namespace on
// addr. Only listeners: a client's connection to an API server on this machine has the local
// address APIAddress too, and outlives a lab in a process that ran one (CLOSE_WAIT until its
// pool drops it). An address is the hex of its four bytes read as a host-order integer.
func listenersOn(addr netip.Addr) (int, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return 0, fmt.Errorf("listing TCP sockets: %w", err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[3] != tcpListen {
			continue
		}
		local, _, _ := strings.Cut(fields[1], ":")
		if a, ok := parseProcAddr(local); ok && a == addr {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading /proc/net/tcp: %w", err)
	}
	return n, nil
}

// tcpListen is TCP_LISTEN as /proc/net/tcp prints a socket's state.
const tcpListen = "0A"

// parseProcAddr decodes an IPv4 address as /proc/net/tcp prints it.
func parseProcAddr(s string) (netip.Addr, bool) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4 {
		return netip.Addr{}, false
	}
	var a [4]byte
	binary.NativeEndian.PutUint32(a[:], binary.BigEndian.Uint32(b))
	return netip.AddrFrom4(a), true
}
