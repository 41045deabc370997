package labnet

import (
	"fmt"
	"net"
	"net/netip"
)

// ListenTCP opens a TCP listener on addr inside the named network namespace. A socket belongs
// to the namespace of the thread that created it, for good, so the listener is created on a
// thread switched into the namespace and keeps serving there after the thread switches back:
// the lab's node agent serves a kubelet's port on a node's address this way without a process
// per node.
func ListenTCP(netnsName string, addr netip.AddrPort) (net.Listener, error) {
	var l net.Listener
	err := inNamespace(netnsName, func() error {
		var err error
		l, err = net.Listen("tcp", addr.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listening on %s in network namespace %s: %w", addr, netnsName, err)
	}
	return l, nil
}
