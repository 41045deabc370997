// Package owner holds every marker by which Octopus's data plane finds its own state in the
// kernel and in OVN's northbound database again: route protocols and metrics, routing
// tables, nftables tables, link aliases and name prefixes, the VXLAN identifiers, the
// external_ids keys of OVN rows. Each writer lists,
// replaces and deletes only what carries its marker, so it never touches what it did not make
// and finds what it made after a restart by reading the kernel. Keeping all of them in this
// one file is what makes them distinct: a new writer (globalnet's NAT, the OVN network) picks
// its markers here, next to every value already taken. None of them uses ip rules or fwmarks
// yet; the first one that does puts its rule priorities and mark bits here too.
//
// The lab keeps markers of its own (internal/lab/labnet/ownership.go): route protocol 211,
// the nftables table "octopus-lab", names starting "octo-". They are taken: a new writer here
// picks other values, and labnet checks at compile time that its route protocol differs from
// the ones here.
//
// The package imports nothing, so every data-plane package can share it.
package owner

// Routes. A route is identified in the kernel by (table, destination, TOS, metric) and
// carries the protocol (rtm_protocol) of whoever made it, which `ip route show proto N` filters
// on. 212 and 213 are unused by the kernel (0-4) and by the routing daemons listed in
// /etc/iproute2/rt_protos (up to 192, plus 254 and 255), and differ from each other and from
// the lab's 211 (internal/lab/labnet/ownership.go), so the lab, the route agent and the
// tunnel drivers never take each other's routes, also where they share a network namespace
// (a gateway node runs both a tunnel driver and a route agent).
const (
	// RouteAgentProtocol marks the route agent's routes: remote clusters' CIDRs via the
	// active gateway node, on every node.
	RouteAgentProtocol = 212
	// RouteAgentMetric is the metric of the route agent's routes. With a metric of its own,
	// its RouteReplace can never overwrite someone else's route to the same destination (the
	// tunnel driver's on the gateway node, metric TunnelRouteMetric), and theirs, preferred
	// for its lower metric, keeps winning where both exist.
	RouteAgentMetric = 212

	// TunnelRouteProtocol marks a tunnel driver's routes: remote clusters' CIDRs into the
	// tunnel device on the active gateway node. A driver owns only the routes that carry it
	// AND leave through its own device, so two drivers in one namespace (tests) keep apart.
	TunnelRouteProtocol = 213
	// TunnelRouteMetric is the metric of a tunnel driver's routes: 0, the most preferred, so
	// that on the gateway node they win over the route agent's routes (RouteAgentMetric) to
	// the same CIDRs, which a node that just became the gateway still has, pointing at the
	// previous gateway, until its route agent sees the new Lease holder.
	TunnelRouteMetric = 0

	// MainTable is where both the route agent and the tunnel drivers put their routes: pods'
	// traffic is routed by the main table, and a table of our own would need an ip rule, one
	// more thing to own.
	MainTable = 254
)

// nftables. Each writer owns whole tables (add-then-flush in one transaction), never rules in
// someone else's, so deleting its table removes exactly its own state.
const (
	// TunnelNFTTablePrefix + the device name is the one inet table a tunnel driver owns: the
	// TCP MSS clamp and, for vxlan, the per-peer byte counters. One table per device, because
	// devices are unique per machine and Close must remove exactly its own.
	TunnelNFTTablePrefix = "octopus-tunnel-"
	// GlobalnetNFTTable is the one inet table globalnet's NAT owns on the active gateway node
	// (internal/datapath/nat): ingress DNAT of global addresses, egress SNAT to them. One table
	// for both IP families, so that the whole translation changes in one transaction, and one
	// per node, since one gateway process at a time is active there. Its chains run at
	// dstnat-10 and srcnat-10, ahead of kube-proxy's and the node's masquerade (nat.go says why).
	GlobalnetNFTTable = "octopus-globalnet"
	// HostFirewallNFTTable is the inet table a gateway owns on its node to accept its tunnel's
	// UDP port in the input hook (internal/datapath/hostfirewall, which says what such an
	// accept can and cannot do against the host's own firewall). Removed on clean shutdown.
	HostFirewallNFTTable = "octopus-host-firewall"
	// GatewayGuardNFTTable is the inet table `octopus-ovn gateway-port` owns on a gateway node
	// of the secondary network: in the input hook it drops what arrives on the node's interface
	// on the logical switch (podport.GatewayLink) for the node itself, but replies and ICMP
	// (internal/datapath/podfence).
	GatewayGuardNFTTable = "octopus-gateway-guard"
	// VpcGatewayNFTTable is the inet table a VPC gateway's namespace holds
	// (internal/datapath/vpcnat): the SNAT of the VPC's traffic to its egress address. The
	// namespace is the gateway's alone (podport.VpcGatewayNetns), so one name serves every VPC.
	VpcGatewayNFTTable = "octopus-vpc-gateway"
	// IngressFilterNFTTable is the inet table a gateway owns on its node to drop what comes
	// out of its tunnel towards anything but this cluster's advertised prefixes, and vxlan
	// datagrams from anything but the remote gateways (internal/datapath/ingressfilter).
	// A table of its own rather than rules in the tunnel's: it must hold on every gateway
	// node whatever the backend, and a drop in any table is final.
	IngressFilterNFTTable = "octopus-ingress-filter"
)

// Links.
const (
	// TunnelLinkAlias is set on every link a tunnel driver creates (`ip link show` prints
	// it), so that an existing link of that name left by a crashed process is recognised as
	// ours and replaced, while a foreign link is refused rather than deleted. The device name
	// itself is configured (unique per machine), so it cannot be the marker.
	TunnelLinkAlias = "octopus-tunnel"
)

// VXLAN.
const (
	// VXLANVNI is the fixed VNI of the vxlan driver: one device per gateway carries all peers,
	// told apart by the outer address, so a single VNI suffices. Any fixed value works as long
	// as every cluster uses the same one; 7473 is arbitrary but easy to spot in a capture.
	VXLANVNI = 7473
	// VXLANMACPrefix starts every tunnel MAC address the vxlan driver derives (locally
	// administered, unicast), so its FDB and neighbour entries are recognisable.
	VXLANMACPrefix = "\x02\x6f"
)

// OVN northbound rows. Every row the secondary network writes (internal/datapath/ovn) carries
// these keys in its external_ids, and Apply reads, changes and deletes only rows that carry
// them: it never touches what it did not make, and after a restart it finds everything it made
// by reading the NB database, which is the only record of who has which address.
const (
	// OVNKeyOwner marks a row as the secondary network's; its value is always OVNOwnerSecondary.
	// One key with a fixed value, rather than the presence of any octopus.io key, so that a
	// future OVN writer of Octopus (a load balancer for ClusterSet VIPs, if it gets a writer of
	// its own) owns its rows under another value. The gateway's port is not such a writer: the
	// same Apply writes it, in the same transaction as the pods' ports, under the same value
	// and OVNKeyRole.
	OVNKeyOwner = "octopus.io/owner"
	// OVNOwnerSecondary is OVNKeyOwner's value on the rows Apply manages.
	OVNOwnerSecondary = "secondary-network"
	// OVNKeyCluster is the cluster ID a switch or port belongs to: one NB database could serve
	// several clusters (tests do), and each Apply manages one cluster's rows only.
	OVNKeyCluster = "octopus.io/cluster"

	// OVNKeyCIDR, on the switch, is the block its ports' addresses come from, for people reading
	// the database (`ovn-nbctl list Logical_Switch`); Apply takes the block from its input and
	// replaces ports whose address is outside it.
	OVNKeyCIDR = "octopus.io/cidr"
	// OVNKeyLastAllocated, on the switch, is the address handed out last. Allocation continues
	// after it (internal/ipam/hostaddr), so a released address is reused last; kept in the
	// database, not in memory, so that this holds across restarts of the ovnmaster too.
	OVNKeyLastAllocated = "octopus.io/last-allocated"

	// OVNKeyPodNamespace, OVNKeyPodName and OVNKeyPodUID, on a port, name the pod it belongs to. The
	// UID tells a pod from a later one of the same name, which must not inherit the port
	// (nor, right away, the address) of the one before.
	OVNKeyPodNamespace = "octopus.io/pod-namespace"
	OVNKeyPodName      = "octopus.io/pod-name"
	OVNKeyPodUID       = "octopus.io/pod-uid"

	// OVNKeyRole, on the gateway's port, is OVNRoleGateway: the one port of ours that belongs
	// to no pod (pods' ports carry no role, they are told by the pod keys). Apply finds the
	// gateway's port by it, not by its name alone, so that a foreign port of that name is
	// never taken for ours.
	OVNKeyRole     = "octopus.io/role"
	OVNRoleGateway = "gateway"

	// OVNSwitchNamePrefix + the cluster ID is the name of a cluster's logical switch. Names in
	// the Logical_Switch table are not unique in OVN's schema; Apply finds its switch by
	// external_ids and uses the name only to refuse creating a second switch of that name.
	OVNSwitchNamePrefix = "octopus-"
)

// OVN rows of VPCs (internal/datapath/ovn, ApplyVpc): a VPC's router, router ports, subnet
// switches and their ports carry OVNKeyOwner = OVNOwnerVPC, OVNKeyCluster and OVNKeyVPC, and
// each subnet's rows OVNKeySubnet too. Another owner value than the cluster network's, so
// that the cluster network's Apply and Delete, which take every row of OVNOwnerSecondary and
// their cluster, never take a VPC's, and the other way round; the VPC key scopes ApplyVpc
// and DeleteVpc to one VPC.
const (
	OVNOwnerVPC = "vpc"
	// OVNKeyVPC is the VPC's name (a Vpc object's, an RFC 1123 label).
	OVNKeyVPC = "octopus.io/vpc"
	// OVNKeySubnet is the subnet's name within its VPC, on its switch, its router port and
	// every port on the switch.
	OVNKeySubnet = "octopus.io/subnet"
	// OVNRoleRouter is OVNKeyRole's value on a subnet switch's port that joins the VPC's
	// router (type router): it belongs to no pod.
	OVNRoleRouter = "router"
	// OVNKeyExternalIP, on a VPC's gateway port, is the VPC's external (egress) address, from
	// the cluster's global CIDR (the Vpc's status.gateway.externalIP, which the ovnmaster
	// allocates). It rides on the row the gateway node already reads, so that the node, which
	// has no Kubernetes client, learns the address with the gateway itself and in the same
	// transaction; absent when the cluster has no global CIDR.
	OVNKeyExternalIP = "octopus.io/external-ip"
	// OVNKeySubnets, on a VPC's gateway port, are the VPC's subnets, comma-separated and sorted:
	// the routes the gateway node gives the gateway's namespace back into the VPC. The port's
	// external_ids reach the southbound Port_Binding (ovn-northd copies them), so a gateway node
	// learns everything it attaches from the one row its own chassis credential reads there.
	OVNKeySubnets = "octopus.io/subnets"
)

// OVN interconnection (internal/datapath/ovnic). Its rows in an AZ's NB database carry
// OVNKeyOwner = OVNOwnerInterconnect and OVNKeyCluster = the AZ (the cluster ID), so that its
// Apply and the secondary network's never take each other's rows, also where the
// interconnection's router port sits on the secondary network's switch.
const (
	// OVNOwnerInterconnect is OVNKeyOwner's value on the interconnection's router, router ports,
	// switch ports (on the AZ's switches and on the transit switch) and manual static routes.
	// Routes ovn-ic learns carry ovn-ic's own external_ids:ic-learned-route and not this, so
	// Apply never deletes a learned route (ovn-ic owns them and withdraws them itself).
	OVNOwnerInterconnect = "interconnect"
	// OVNInterconnectNamePrefix + the AZ starts the name of every row the interconnection
	// names: router "octopus-ic-<az>", its ports "octopus-ic-<az>-<switch>". Router port and
	// switch port names are unique in the whole NB database, and a transit switch's port names
	// in every AZ (ovn-ic copies them as remote ports), hence the AZ in each.
	OVNInterconnectNamePrefix = "octopus-ic-"
	// OVNInterconnectOptions are the NB_Global options keys the interconnection owns whole: it
	// sets them to what its desired state says and removes them when that says nothing, and
	// leaves every other key alone. They are what ovn-ic (23.03) reads to advertise and learn.
	// ic-route-blacklist is 23.03's name (later OVN renamed it ic-route-denylist).
	OVNInterconnectOptionAdvertise = "ic-route-adv"
	OVNInterconnectOptionLearn     = "ic-route-learn"
	OVNInterconnectOptionDenylist  = "ic-route-blacklist"
)
