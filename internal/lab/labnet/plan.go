package labnet

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Limits of the address plan.
const (
	// MaxClusters is how many /28 LANs LANRange holds, less the one kept for APIAddress.
	MaxClusters = 1<<(lanBits-24) - 1
	// MaxNodesPerCluster: a /28 minus network, broadcast and the root uplink's address.
	MaxNodesPerCluster = 1<<(32-lanBits) - 3
	// MinNodesPerCluster: every cluster has a gateway node and at least one other, a worker or
	// a standby gateway, so that traffic between nodes of one cluster is exercised as well as
	// traffic through the active gateway from another node.
	MinNodesPerCluster = 2
	// MaxHubGateways is how many gateway nodes the hub can have (one active, the others
	// standing by): underlay addresses after the clusters' 16 each, before the range's end.
	MaxHubGateways = 3
)

// GatewayLabel marks the nodes that join the underlay; Octopus places its gateway there. It
// is v1alpha1.GatewayNodeLabel, the member chart's default selector (labnet imports no API).
const GatewayLabel = "node-restriction.kubernetes.io/octopus-gateway"

// LabID derives a lab's ID from its state directory (absolute, canonical), so that `lab down
// --dir D` computes the same ID as the `lab up --dir D` that crashed, without reading state.
func LabID(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return hex.EncodeToString(sum[:])[:idLen]
}

// ClusterSpec is the input for one cluster's network.
type ClusterSpec struct {
	// Name is the cluster's name (an RFC 1123 label), e.g. "cluster1".
	Name string
	// Index numbers the cluster from 1 and picks its LAN: distinct clusters need distinct
	// indexes.
	Index int
	// ServiceCIDR gets a route in every node namespace: kube-proxy DNATs locally generated
	// packets in the output hook, after the routing decision, so without a route they fail
	// with "network unreachable" before kube-proxy sees them.
	ServiceCIDR netip.Prefix
	// Nodes is the number of nodes, MinNodesPerCluster..MaxNodesPerCluster. The first
	// Gateways of them are gateway nodes.
	Nodes int
	// Gateways is how many nodes (the first ones) carry GatewayLabel and join the underlay:
	// one is active, the others stand by for failover. Optional, default 1; at most Nodes
	// (with every node a gateway, the standbys' nodes do a worker's part while they stand by).
	Gateways int
	// ServiceCIDR6 makes the cluster dual-stack: its IPv6 service range gets a route in every
	// node namespace as ServiceCIDR does, and every node an IPv6 LAN address (LANAddr6) in
	// the cluster's /64 of LANRange6. Optional; invalid (the zero value) for IPv4 only.
	ServiceCIDR6 netip.Prefix
}

// Plan is the whole lab network: names and addresses of everything Apply creates.
type Plan struct {
	ID string
	// APILink is the root-namespace link carrying APIAddress.
	APILink string
	// Underlay is the namespace joining the gateway nodes.
	Underlay string
	Clusters []ClusterNet
	// HubGateways are the hub's gateway nodes, for the hub topology; none without it.
	HubGateways []HubGatewayNet
}

// HubGatewayNet is a namespace where one of the hub's gateways runs: on the underlay like the
// clusters' gateway nodes, and with a link of its own to the API servers, since the hub has no
// cluster LAN.
type HubGatewayNet struct {
	// Name is the node's name, "hub-gw1", "hub-gw2", ...: its gateway's Lease identity and the
	// hostname in the hub's Peer (the hub has no Node objects).
	Name string
	// Netns is the namespace.
	Netns string
	// UnderlayAddr is its address on the underlay, the one every cluster tunnels to.
	UnderlayAddr netip.Prefix
	// Uplink is the root-namespace link into Netns; the root end has UplinkAddr, the other
	// end (nodeLANName) Addr, both in a /31 of the API's /28 of LANRange.
	Uplink           string
	UplinkAddr, Addr netip.Prefix
	// underlayPort is the underlay namespace's end of its underlay veth.
	underlayPort string
}

// NetnsPath is where the hub gateway's namespace is mounted.
func (h HubGatewayNet) NetnsPath() string { return NetnsPath(h.Netns) }

// Node is the hub gateway as a node of the hub cluster. Its InternalIP (LANAddr) is its
// underlay address, where the clusters tunnel to it: the hub chart's gateway tunnels from its
// node's address (status.hostIP), and its identity may not read Nodes for anything else.
func (h HubGatewayNet) Node() NodeNet {
	return NodeNet{Name: h.Name, Netns: h.Netns, Gateway: true, LANAddr: h.UnderlayAddr, UnderlayAddr: h.UnderlayAddr}
}

// ClusterNet is one cluster's LAN.
type ClusterNet struct {
	Name        string
	ServiceCIDR netip.Prefix
	// ServiceCIDR6 is the IPv6 service range of a dual-stack cluster; invalid otherwise.
	ServiceCIDR6 netip.Prefix
	// LAN is the namespace holding the cluster's bridge.
	LAN string
	// Uplink is the root-namespace link into the LAN; it has UplinkAddr.
	Uplink string
	// UplinkAddr (first address of the LAN /28) is the nodes' next hop to APIAddress.
	UplinkAddr netip.Prefix
	Nodes      []NodeNet
}

// NodeNet is one node.
type NodeNet struct {
	// Name is the Kubernetes Node name, "<cluster>-node<k>".
	Name string
	// Netns is the node's network namespace.
	Netns string
	// Gateway nodes carry GatewayLabel and join the underlay.
	Gateway bool
	// LANAddr is the node's InternalIP, with the LAN's prefix length.
	LANAddr netip.Prefix
	// LANAddr6 is the node's IPv6 InternalIP in a dual-stack cluster (ClusterSpec.
	// ServiceCIDR6), in the cluster's /64 of LANRange6; invalid otherwise.
	LANAddr6 netip.Prefix
	// UnderlayAddr is set for gateway nodes only.
	UnderlayAddr netip.Prefix
	// port is the LAN namespace's end of the node's veth, a bridge port.
	port string
	// underlayPort is the underlay namespace's end of a gateway's underlay veth.
	underlayPort string
}

// NetnsPath is where the node's namespace is mounted, for setns and `ip netns exec`.
func (n NodeNet) NetnsPath() string { return NetnsPath(n.Netns) }

// UnderlayLink is the name, inside the node's namespace, of a gateway node's link to the
// underlay (the one fault tests cut), or "" for a worker.
func (n NodeNet) UnderlayLink() string {
	if !n.Gateway {
		return ""
	}
	return nodeUnderlayName
}

// Cable is the far end of one of a node's links, in the namespace across from the node.
// Setting it down is pulling the node's cable: the node keeps its addresses and routes (its
// side only loses carrier), as a node whose switch port died would, and setting it up again
// restores everything.
type Cable struct{ Netns, Link string }

// Cables are the far ends of node's links in cluster: its LAN bridge port and, for a
// gateway, its underlay port.
func (p Plan) Cables(cluster ClusterNet, node NodeNet) []Cable {
	cables := []Cable{{Netns: cluster.LAN, Link: node.port}}
	if node.Gateway {
		cables = append(cables, Cable{Netns: p.Underlay, Link: node.underlayPort})
	}
	return cables
}

// NetnsPath is the bind mount of a named network namespace.
func NetnsPath(name string) string { return netnsDir + "/" + name }

// netnsDir is where named namespaces are mounted, the same place `ip netns` uses, so the
// lab's namespaces show up in `ip netns list`.
const netnsDir = "/run/netns"

// NetnsOwnerPrefix is the prefix of every namespace of the lab with the given ID.
func NetnsOwnerPrefix(id string) string { return netnsPrefix + id + "-" }

// RootLinkOwnerPrefix is the prefix of every root-namespace link of the lab with the given ID.
func RootLinkOwnerPrefix(id string) string { return rootLinkPrefix + id + "-" }

// NewPlan computes names and addresses, with hubGateways gateway nodes for the hub (the hub
// topology; 0 without it). It is pure, so the address plan is unit-tested.
func NewPlan(id string, clusters []ClusterSpec, hubGateways int) (Plan, error) {
	if len(id) != idLen || strings.Trim(id, "0123456789abcdef") != "" {
		return Plan{}, fmt.Errorf("lab ID %q: want %d lower-case hex digits (see LabID)", id, idLen)
	}
	if hubGateways < 0 || hubGateways > MaxHubGateways {
		return Plan{}, fmt.Errorf("%d hub gateways: want 0..%d", hubGateways, MaxHubGateways)
	}
	if len(clusters) > MaxClusters {
		return Plan{}, fmt.Errorf("%d clusters: the lab's LAN range %s has room for %d", len(clusters), LANRange, MaxClusters)
	}
	netnsPrefix, linkPrefix := NetnsOwnerPrefix(id), RootLinkOwnerPrefix(id)
	p := Plan{ID: id, APILink: linkPrefix + "api", Underlay: netnsPrefix + "underlay"}
	seenIndex := map[int]bool{}
	seenName := map[string]bool{}
	var errs []error
	for _, c := range clusters {
		if msgs := validation.IsDNS1123Label(c.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("cluster name %q: %s", c.Name, strings.Join(msgs, "; ")))
			continue
		}
		switch {
		case c.Index < 1 || c.Index > MaxClusters:
			errs = append(errs, fmt.Errorf("cluster %s: index %d, want 1..%d", c.Name, c.Index, MaxClusters))
			continue
		case seenIndex[c.Index] || seenName[c.Name]:
			errs = append(errs, fmt.Errorf("cluster %s (index %d) given twice", c.Name, c.Index))
			continue
		case c.Nodes < MinNodesPerCluster || c.Nodes > MaxNodesPerCluster:
			errs = append(errs, fmt.Errorf("cluster %s: %d nodes, want %d..%d (a gateway and at least one other node; a LAN is a /%d)",
				c.Name, c.Nodes, MinNodesPerCluster, MaxNodesPerCluster, lanBits))
			continue
		case !c.ServiceCIDR.IsValid() || !c.ServiceCIDR.Addr().Is4():
			errs = append(errs, fmt.Errorf("cluster %s: IPv4 service CIDR required, got %s", c.Name, c.ServiceCIDR))
			continue
		case c.ServiceCIDR6.IsValid() && (!c.ServiceCIDR6.Addr().Is6() || c.ServiceCIDR6.Addr().Is4In6() || !IPv6Range.Contains(c.ServiceCIDR6.Addr())):
			errs = append(errs, fmt.Errorf("cluster %s: IPv6 service CIDR %s: want a prefix inside %s", c.Name, c.ServiceCIDR6, IPv6Range))
			continue
		}
		if c.Gateways == 0 {
			c.Gateways = 1
		}
		if c.Gateways < 1 || c.Gateways > c.Nodes {
			errs = append(errs, fmt.Errorf("cluster %s: %d gateway nodes of %d nodes, want 1..%d (add nodes)",
				c.Name, c.Gateways, c.Nodes, c.Nodes))
			continue
		}
		seenIndex[c.Index], seenName[c.Name] = true, true
		lan := nthSubnet(LANRange, lanBits, c.Index-1)
		cn := ClusterNet{
			Name:        c.Name,
			ServiceCIDR: c.ServiceCIDR.Masked(),
			LAN:         netnsPrefix + c.Name + "-lan",
			Uplink:      fmt.Sprintf("%sc%d", linkPrefix, c.Index),
			UplinkAddr:  netip.PrefixFrom(nthAddr(lan, 1), lanBits),
		}
		if c.ServiceCIDR6.IsValid() {
			cn.ServiceCIDR6 = c.ServiceCIDR6.Masked()
		}
		for k := 1; k <= c.Nodes; k++ {
			n := NodeNet{
				Name:    fmt.Sprintf("%s-node%d", c.Name, k),
				Gateway: k <= c.Gateways,
				LANAddr: netip.PrefixFrom(nthAddr(lan, 1+k), lanBits),
				port:    fmt.Sprintf("n%d", k),
			}
			if c.ServiceCIDR6.IsValid() {
				// The same host part as LANAddr's, in the cluster's /64.
				n.LANAddr6 = netip.PrefixFrom(nthAddr6(LAN6(c.Index), 1+k), 64)
			}
			n.Netns = netnsPrefix + n.Name
			if n.Gateway {
				// 16 underlay addresses per cluster index: room for every gateway a /28 LAN can
				// have (MaxNodesPerCluster-1).
				n.UnderlayAddr = netip.PrefixFrom(nthAddr(UnderlayRange, 16*(c.Index-1)+k), UnderlayRange.Bits())
				n.underlayPort = fmt.Sprintf("c%dn%d", c.Index, k)
			}
			cn.Nodes = append(cn.Nodes, n)
		}
		p.Clusters = append(p.Clusters, cn)
	}
	if err := errors.Join(errs...); err != nil {
		return Plan{}, fmt.Errorf("lab network plan: %w", err)
	}
	uplink := APIAddress.Next()
	for i := 1; i <= hubGateways; i++ {
		// After the clusters' gateways (16 underlay addresses per cluster index); the uplinks
		// take the /31s after APIAddress in the /28 no cluster LAN uses.
		name := fmt.Sprintf("hub-gw%d", i)
		p.HubGateways = append(p.HubGateways, HubGatewayNet{
			Name:         name,
			Netns:        netnsPrefix + name,
			UnderlayAddr: netip.PrefixFrom(nthAddr(UnderlayRange, 16*MaxClusters+9+i), UnderlayRange.Bits()),
			Uplink:       linkPrefix + fmt.Sprintf("hub%d", i),
			UplinkAddr:   netip.PrefixFrom(uplink, 31),
			Addr:         netip.PrefixFrom(uplink.Next(), 31),
			underlayPort: fmt.Sprintf("hub%d", i),
		})
		uplink = uplink.Next().Next()
	}
	for _, name := range p.rootLinks() {
		if len(name) > maxIfNameLen {
			return Plan{}, fmt.Errorf("lab network plan: link name %q is longer than %d bytes", name, maxIfNameLen)
		}
	}
	return p, nil
}

// rootLinks are the names of the links Apply puts into the root namespace.
func (p Plan) rootLinks() []string {
	names := []string{p.APILink}
	for _, c := range p.Clusters {
		names = append(names, c.Uplink)
	}
	for _, h := range p.HubGateways {
		names = append(names, h.Uplink)
	}
	return names
}

// Namespaces lists every namespace of the plan.
func (p Plan) Namespaces() []string {
	names := []string{p.Underlay}
	for _, c := range p.Clusters {
		names = append(names, c.LAN)
		for _, n := range c.Nodes {
			names = append(names, n.Netns)
		}
	}
	for _, h := range p.HubGateways {
		names = append(names, h.Netns)
	}
	return names
}

// Cluster returns the named cluster's network, or nil.
func (p Plan) Cluster(name string) *ClusterNet {
	for i := range p.Clusters {
		if p.Clusters[i].Name == name {
			return &p.Clusters[i]
		}
	}
	return nil
}

// nthSubnet returns the n-th /bits subnet of an IPv4 prefix.
func nthSubnet(p netip.Prefix, bits, n int) netip.Prefix {
	return netip.PrefixFrom(nthAddr(p, n<<(32-bits)), bits)
}

// nthAddr returns the address n after the start of an IPv4 prefix.
func nthAddr(p netip.Prefix, n int) netip.Addr {
	b := p.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n) //nolint:gosec // n is bounded by the plan's limits
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// nthAddr6 returns the address n after the start of an IPv6 prefix (n < 2^32).
func nthAddr6(p netip.Prefix, n int) netip.Addr {
	b := p.Masked().Addr().As16()
	v := uint32(b[12])<<24 | uint32(b[13])<<16 | uint32(b[14])<<8 | uint32(b[15])
	v += uint32(n) //nolint:gosec // n is bounded by the plan's limits
	b[12], b[13], b[14], b[15] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	return netip.AddrFrom16(b)
}

// withGroup returns the IPv6 prefix base with its 16-bit group g (0-based) set to v.
func withGroup(base netip.Prefix, g int, v uint16) netip.Prefix {
	b := base.Addr().As16()
	b[2*g], b[2*g+1] = byte(v>>8), byte(v)
	return netip.PrefixFrom(netip.AddrFrom16(b), base.Bits())
}

// LAN6 is the IPv6 LAN of the cluster with the given index (ClusterSpec.Index, 0 for the
// hub): the index-th /64 of LANRange6, 2001:db8:0:<index>::/64.
func LAN6(index int) netip.Prefix {
	return withGroup(netip.PrefixFrom(LANRange6.Addr(), 64), 3, uint16(index)) //nolint:gosec // index <= MaxClusters
}

// PodCIDR6 is the IPv6 pod range of the cluster with the given index (0 for the hub):
// 2001:db8:1xx::/48 with xx the index in hex, in PodRange6, as 10.<index>.0.0/16 is its IPv4
// one; node IPAM gives each node a /64 of it.
func PodCIDR6(index int) netip.Prefix {
	return withGroup(netip.PrefixFrom(PodRange6.Addr(), 48), 2, 0x100+uint16(index)) //nolint:gosec // index <= MaxClusters
}

// ServiceCIDR6 is the IPv6 service range of the cluster with the given index (0 for the
// hub): 2001:db8:2xx::/112 with xx the index in hex, in ServiceRange6. A /112 holds as many
// addresses as the IPv4 /16 (the API server takes at most a /108).
func ServiceCIDR6(index int) netip.Prefix {
	return withGroup(netip.PrefixFrom(ServiceRange6.Addr(), 112), 2, 0x200+uint16(index)) //nolint:gosec // index <= MaxClusters
}

// IsLabNetns says whether a named network namespace has the prefix every lab gives its
// namespaces (whatever the lab's ID): what a lab may have left behind, as against the
// namespaces other packages' tests make beside the lab tier.
func IsLabNetns(name string) bool { return strings.HasPrefix(name, netnsPrefix) }
