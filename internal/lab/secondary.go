package lab

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/lab/realnode"
)

// SecondaryUnderlayLink is the link, in every node of a lab with Options.SecondaryNetwork,
// that carries the secondary network's Geneve tunnels between the cluster's nodes: a veth
// into the cluster's LAN bridge with an address of SecondaryUnderlayPrefix. The member
// chart's OVN node pod makes it a port of the OVS bridge br-phy and moves its address onto
// br-phy (secondaryNetwork.node.underlayInterface): on the userspace datapath, the only one
// these machines have, ovs-vswitchd sends and receives tunnel packets only through an OVS
// bridge that owns their address. A link of its own rather than the node's LAN link, whose
// address would then hang on ovs-vswitchd too: the kubelet's, kube-proxy's and the pods'
// primary traffic would cross the userspace switch, and every restart of the OVN node pod
// would cut the node off its API server. It goes with the node's namespace at lab down.
const SecondaryUnderlayLink = "ovn-underlay"

// SecondaryUnderlayPrefix is the subnet of cluster i's (1-based) SecondaryUnderlayLinks:
// 192.168.<200+i>.0/24, clear of the lab's documentation ranges and 10/8 blocks; node k
// (0-based) has host k+1.
func SecondaryUnderlayPrefix(i int) string { return fmt.Sprintf("192.168.%d.0/24", 200+i) }

// prepareSecondaryNetwork gives every node of cluster c, the i-th (1-based), its
// SecondaryUnderlayLink, and returns the member chart's secondaryNetwork values for it: join's
// (cluster.SecondaryNetworkValues: the cluster's ID, the block the hub allocated, routes to
// the hub's secondary pool, its globalnet pool for the VPC pods) with the userspace datapath
// over the underlay link and the paths of the lab's nodes (NRI socket, Open vSwitch
// directory); with vpcs (Options.Vpcs), the gateway nodes' gateway-port keeps the VPCs'
// gateways too (gatewayPort.vpcs).
func prepareSecondaryNetwork(ctx context.Context, i int, c labnet.ClusterNet, joined *cluster.Joined, info *hub.BrokerInfo, vpcs bool) (map[string]any, error) {
	values := cluster.SecondaryNetworkValues(joined, info.Secondary.CIDR, info.Globalnet.CIDR)
	if values == nil {
		return nil, fmt.Errorf("%s did not join with secondary addressing", c.Name)
	}
	base := strings.TrimSuffix(SecondaryUnderlayPrefix(i), "0/24")
	for k, n := range c.Nodes {
		// The LAN namespace's end, a port of the cluster's bridge; named by the node's index,
		// unique in that namespace.
		lanEnd := fmt.Sprintf("ovnul%d", k)
		for _, args := range [][]string{
			{"link", "add", SecondaryUnderlayLink, "netns", n.Netns, "type", "veth", "peer", "name", lanEnd, "netns", c.LAN},
			{"-n", c.LAN, "link", "set", lanEnd, "master", labnet.LANBridge, "up"},
			{"-n", n.Netns, "addr", "add", fmt.Sprintf("%s%d/24", base, k+1), "dev", SecondaryUnderlayLink},
			{"-n", n.Netns, "link", "set", SecondaryUnderlayLink, "up"},
		} {
			if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("the secondary network's underlay link of node %s: ip %s: %w: %s",
					n.Name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
			}
		}
	}
	values["node"] = map[string]any{"datapath": "netdev", "underlayInterface": SecondaryUnderlayLink, "ovsDir": realnode.OVSRunPath}
	values["nri"] = map[string]any{"socket": realnode.NRISocketInNode}
	if vpcs {
		// Each node's /run/netns is its own (realnode.NetnsDir), where gateway-port keeps the
		// VPC gateways' namespaces (the chart's --vpc-netns-dir).
		values["gatewayPort"] = map[string]any{"vpcs": true}
	}
	return values, nil
}
