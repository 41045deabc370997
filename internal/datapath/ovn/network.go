// Package ovn writes the secondary network of one cluster into the OVN northbound database:
// a logical switch for the cluster's secondary CIDR, a logical switch port, with an address
// from that block and port security, for every pod, and the port of the cluster's active
// gateway at the block's first host, bound to the active gateway's chassis. Apply takes the whole desired
// state and makes the database match it in one transaction; the database is the source of
// truth for who has which address. The package imports no Kubernetes client: the ovnmaster
// (internal/ovn) translates pods into a Network.
package ovn

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/ipam/hostaddr"
)

// Network is the desired secondary network of one cluster.
type Network struct {
	// ClusterID names the cluster; it names the switch and the ports (required).
	ClusterID string
	// CIDR is the cluster's secondary block (required): an IPv4 prefix no longer than /30.
	CIDR netip.Prefix
	// Pods are the pods that should have a port, each listed once.
	Pods []Pod
	// GatewayChassis is the OVN chassis (Open_vSwitch external_ids:system-id, the node name
	// by convention) of the node that is the cluster's active gateway. The gateway's port,
	// GatewayPortName at the block's gateway address, is requested there
	// (options:requested-chassis): both gateway nodes may have an interface bound to the port,
	// and OVN binds it only on this one, so moving the active gateway is changing this field.
	// Empty means no active gateway, and no gateway port: without requested-chassis OVN would
	// bind the port on every chassis that has its interface, and they would take it from each
	// other in turn.
	GatewayChassis string
}

// Pod is a pod that should have a port on the switch.
type Pod struct {
	Namespace, Name string
	// UID tells this pod from an earlier one of the same name (required).
	UID string
	// RequestedIP, if valid, is the address the pod asks for. It is honoured when the port is
	// created; a pod keeps its address for its lifetime, so a later change is ignored.
	RequestedIP netip.Addr
}

// PodKey identifies a pod within a cluster.
type PodKey struct{ Namespace, Name string }

func (k PodKey) String() string { return k.Namespace + "/" + k.Name }

// Key is the pod's PodKey.
func (p Pod) Key() PodKey { return PodKey{Namespace: p.Namespace, Name: p.Name} }

// Attachment is what a pod got: what the NRI plugin configures as the pod's net1 and what the
// pod's annotation reports.
type Attachment struct {
	// Port is the logical switch port's name; ovn-controller binds it to the OVS interface
	// whose external_ids:iface-id is this name.
	Port string
	// MAC is the port's MAC address, derived from IP (MACFor).
	MAC net.HardwareAddr
	// IP is the pod's address with the block's prefix length.
	IP netip.Prefix
	// Gateway is the block's gateway address, reserved for the gateway's own port.
	Gateway netip.Addr
}

// Equal reports whether a and b are the same attachment.
func (a Attachment) Equal(b Attachment) bool {
	return a.Port == b.Port && a.IP == b.IP && a.Gateway == b.Gateway && bytes.Equal(a.MAC, b.MAC)
}

// Result is what Apply made of a Network.
type Result struct {
	// Attached holds every pod that has its port, with the port's address.
	Attached map[PodKey]Attachment
	// Failed holds every pod that could not get a port, and why: an address request that
	// cannot be met (errors.Is hostaddr.ErrOutsideBlock, ErrReserved, ErrInUse) or an
	// exhausted block (hostaddr.ErrExhausted). Nothing was written for these pods.
	Failed map[PodKey]error
	// Gateway is the gateway's port, when the network has one (GatewayChassis set and the
	// port written): what a gateway node attaches its interface to. Its IP is the block's
	// gateway address with the block's prefix length. Zero otherwise.
	Gateway Attachment
	// GatewayFailed says why the network has no gateway port although GatewayChassis is set:
	// a port Octopus did not make holds the gateway address (errors.Is hostaddr.ErrInUse).
	// Nothing was written for the gateway then; the pods are not affected.
	GatewayFailed error
}

// SwitchName is the name of a cluster's logical switch.
func SwitchName(clusterID string) string { return owner.OVNSwitchNamePrefix + clusterID }

// PortName is the name of a pod's logical switch port: "<cluster>_<namespace>_<pod>". Port
// names are unique in the whole NB database, hence the cluster ID; "_" cannot occur in a
// cluster ID, a namespace or a pod name, so the name is unambiguous. The NRI plugin computes
// the same name to set iface-id on the pod's OVS interface.
func PortName(clusterID string, pod PodKey) string {
	return clusterID + "_" + pod.Namespace + "_" + pod.Name
}

// GatewayPortName is the name of the gateway's logical switch port: "<cluster>_gateway". A
// pod's port name has two "_" and this one has one, so no pod's port can take it. The gateway
// node sets it as its interface's external_ids:iface-id.
func GatewayPortName(clusterID string) string { return clusterID + "_gateway" }

// MACFor derives a port's MAC address from its IPv4 address: 0a:58 and the four address
// bytes. Locally administered and unicast (0x0a), unique on the switch because the
// addresses are, and the same after any restart without being stored anywhere.
func MACFor(ip netip.Addr) net.HardwareAddr {
	a := ip.As4()
	return net.HardwareAddr{0x0a, 0x58, a[0], a[1], a[2], a[3]}
}

// dns1123Label is the form of a cluster ID and of a namespace.
var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// validate checks the network and returns its block.
func (n Network) validate() (hostaddr.Block, error) {
	if !dns1123Label.MatchString(n.ClusterID) || len(n.ClusterID) > 63 {
		return hostaddr.Block{}, fmt.Errorf("cluster ID %q is not an RFC 1123 label", n.ClusterID)
	}
	block, err := hostaddr.NewBlock(n.CIDR)
	if err != nil {
		return hostaddr.Block{}, fmt.Errorf("secondary CIDR of cluster %s: %w", n.ClusterID, err)
	}
	if strings.ContainsAny(n.GatewayChassis, ", \t\n") || len(n.GatewayChassis) > 253 {
		// OVN reads a comma-separated requested-chassis as several chassis (a port bound
		// on all of them during a migration); one chassis is meant here, and node names
		// are DNS subdomains.
		return hostaddr.Block{}, fmt.Errorf("gateway chassis %q of cluster %s is not one chassis name", n.GatewayChassis, n.ClusterID)
	}
	return block, validatePods(n.Pods)
}

// validatePods checks that every pod can name a port and is listed once.
func validatePods(pods []Pod) error {
	seen := make(map[PodKey]bool, len(pods))
	var errs []error
	for _, p := range pods {
		k := p.Key()
		switch {
		case !dns1123Label.MatchString(p.Namespace):
			errs = append(errs, fmt.Errorf("pod %s: namespace is not an RFC 1123 label", k))
		case p.Name == "" || strings.ContainsAny(p.Name, "_/"):
			errs = append(errs, fmt.Errorf("pod %s: name is empty or holds '_' or '/'", k))
		case p.UID == "":
			errs = append(errs, fmt.Errorf("pod %s: UID is not set", k))
		case seen[k]:
			errs = append(errs, fmt.Errorf("pod %s is listed twice", k))
		}
		seen[k] = true
	}
	return errors.Join(errs...)
}
