package nodeagent

import (
	"net"
	"net/netip"
	"time"

	"github.com/octopus-mcs/octopus/internal/lab/labnet"
)

// Network is the kernel side of the agent: pod namespaces and node routing. Every method is
// idempotent. The lab's implementation is LabNetwork (netlink, nft); tests of the agent's
// logic use a fake.
type Network interface {
	// SetupPod creates or completes a pod's namespace, veth, address and routes.
	SetupPod(p labnet.PodNet) error
	// DeletePod kills every process in the pod's namespace, then removes the namespace and
	// the node end of its veth. A pod without a namespace is not an error.
	DeletePod(p labnet.PodNet) error
	// PodAddr returns the address of an existing pod namespace (to keep it across a restart
	// of the agent); ok is false if there is none.
	PodAddr(netns string) (addr netip.Addr, ok bool)
	// ConfigureNode sets a node's forwarding, routes to other nodes' pod CIDRs and masquerade.
	ConfigureNode(c labnet.NodeConfig) error
	// DialTCP connects to addr from inside the named namespace: readiness probes dial from
	// the pod's node, as a kubelet does.
	DialTCP(netns string, addr netip.AddrPort, timeout time.Duration) (net.Conn, error)
	// Listen opens a TCP listener on addr inside the named namespace: the kubelet API of
	// a node listens on the node's address.
	Listen(netns string, addr netip.AddrPort) (net.Listener, error)
}

// LabNetwork is the Network of the lab, on labnet.
type LabNetwork struct{}

var _ Network = LabNetwork{}

// podKillTimeout bounds how long DeletePod waits for a pod's processes to die after SIGKILL.
const podKillTimeout = 10 * time.Second

// SetupPod is labnet.SetupPod.
func (LabNetwork) SetupPod(p labnet.PodNet) error { return labnet.SetupPod(p) }

// DeletePod kills the processes in the pod's namespace, then calls labnet.DeletePod.
func (LabNetwork) DeletePod(p labnet.PodNet) error {
	if err := labnet.KillProcessesIn([]string{p.Netns}, podKillTimeout); err != nil {
		return err
	}
	return labnet.DeletePod(p)
}

// PodAddr is labnet.PodAddr.
func (LabNetwork) PodAddr(netns string) (netip.Addr, bool) { return labnet.PodAddr(netns) }

// ConfigureNode is labnet.ConfigureNode.
func (LabNetwork) ConfigureNode(c labnet.NodeConfig) error { return labnet.ConfigureNode(c) }

// DialTCP is labnet.DialTCP.
func (LabNetwork) DialTCP(netns string, addr netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	return labnet.DialTCP(netns, addr, timeout)
}

// Listen is labnet.ListenTCP.
func (LabNetwork) Listen(netns string, addr netip.AddrPort) (net.Listener, error) {
	return labnet.ListenTCP(netns, addr)
}
