package ovn

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/nbdb"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/ipam/hostaddr"
)

// observed is what the NB database holds for one segment: its switch (nil if there is none
// yet) and every port on it, Octopus's and anyone else's.
type observed struct {
	sw    *nbdb.LogicalSwitch
	ports []nbdb.LogicalSwitchPort
}

// plan is the difference between a segment's desired pods and what the database holds: the
// rows to create, rewrite and remove, and what each pod gets.
type plan struct {
	// createSwitch: the cluster has no switch yet.
	createSwitch bool
	// switchIDs is the switch's desired external_ids; changed says they differ from the
	// stored ones (always true when the switch is created).
	switchIDs        map[string]string
	switchIDsChanged bool
	// create holds the new ports, update the existing ports (UUID set) whose row differs from
	// what Octopus writes for their address, remove the UUIDs of Octopus's ports of this
	// cluster that no desired pod keeps.
	create, update []nbdb.LogicalSwitchPort
	remove         []string
	// updateGateway is the gateway's port (UUID set) when its row differs from what Octopus
	// writes: apart from the pods' updates because it also rewrites options, which holds the
	// requested chassis (a failover is this one update). A new gateway port is in create.
	updateGateway *nbdb.LogicalSwitchPort
	result        Result
}

func (p *plan) empty() bool {
	return !p.createSwitch && !p.switchIDsChanged && len(p.create) == 0 && len(p.update) == 0 && len(p.remove) == 0 && p.updateGateway == nil
}

// makePlan computes the plan for n against obs. It is pure, so every rule of the address
// management is tested without a database:
//   - every address on the switch is in use, including foreign ports' and those of ports
//     removed in this same plan (they are free from the next Apply on);
//   - a pod keeps its port and address while its UID is the same and the address is in the
//     block; otherwise its old port goes and it gets a new one with a new address;
//   - a new port takes the requested address if the pod asks for one it may have, else the
//     next free one after the switch's last-allocated address; a pod that can get no
//     address fails alone, and nothing is written for it;
//   - the gateway's port exists while GatewayChassis is set, at the block's gateway address,
//     requested on that chassis; it is not created over a foreign port holding that address.
func makePlan(n Network, block hostaddr.Block, obs observed) plan {
	seg := clusterSegment(n.ClusterID)
	var gw *nbdb.LogicalSwitchPort
	if n.GatewayChassis != "" {
		row := gatewayRow(n.ClusterID, block.Gateway(), n.GatewayChassis)
		gw = &row
	}
	return planSegment(seg, n.Pods, gw, block, obs)
}

// planSegment is makePlan for any segment: the cluster's switch or a VPC's subnet. gw is the
// row of the segment's one port that belongs to no pod and sits at the block's gateway
// address (the cluster gateway's port, a VPC router's port), nil for none; any other port of
// ours carrying OVNKeyRole is removed.
func planSegment(seg segment, pods []Pod, gw *nbdb.LogicalSwitchPort, block hostaddr.Block, obs observed) plan {
	p := plan{result: Result{Attached: map[PodKey]Attachment{}, Failed: map[PodKey]error{}}}
	used := map[netip.Addr]bool{}
	ours := map[PodKey]nbdb.LogicalSwitchPort{}
	var gateway *nbdb.LogicalSwitchPort // ours, as stored
	gatewayHolder := ""                 // a foreign port holding the gateway address
	for _, port := range obs.ports {
		for _, a := range portAddrs(port) {
			used[a] = true
			if a == block.Gateway() && !seg.owns(port.ExternalIDs) {
				gatewayHolder = port.Name
			}
		}
		if seg.owns(port.ExternalIDs) && port.ExternalIDs[owner.OVNKeyRole] != "" {
			if gateway != nil || gw == nil || port.Name != gw.Name || port.ExternalIDs[owner.OVNKeyRole] != gw.ExternalIDs[owner.OVNKeyRole] {
				p.remove = append(p.remove, port.UUID) // a second one, or misnamed
				continue
			}
			gateway = &port
			continue
		}
		if seg.owns(port.ExternalIDs) {
			k := PodKey{Namespace: port.ExternalIDs[owner.OVNKeyPodNamespace], Name: port.ExternalIDs[owner.OVNKeyPodName]}
			if _, dup := ours[k]; dup || port.Name != seg.portName(k) {
				// Not a row Apply would have written: remove it rather than guess.
				p.remove = append(p.remove, port.UUID)
				continue
			}
			ours[k] = port
		}
	}

	var cursor netip.Addr
	if obs.sw != nil {
		cursor, _ = netip.ParseAddr(obs.sw.ExternalIDs[owner.OVNKeyLastAllocated])
	}
	lastAllocated := cursor
	sorted := slices.SortedFunc(slices.Values(pods), func(a, b Pod) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	for _, pod := range sorted {
		k := pod.Key()
		if old, ok := ours[k]; ok {
			delete(ours, k)
			// block.Check without used: in the block and not reserved (a changed block may
			// make an old address its gateway's).
			if ip, ok := ourAddr(old); ok && block.Check(ip, nil) == nil && old.ExternalIDs[owner.OVNKeyPodUID] == pod.UID {
				want := seg.portRow(pod, ip)
				if !samePort(old, want) {
					want.UUID = old.UUID
					p.update = append(p.update, want)
				}
				p.result.Attached[k] = seg.attachment(block, k, ip)
				continue
			}
			p.remove = append(p.remove, old.UUID)
		}
		var ip netip.Addr
		var err error
		if pod.RequestedIP.IsValid() {
			ip, err = pod.RequestedIP, block.Check(pod.RequestedIP, used)
		} else {
			ip, err = block.Next(lastAllocated, used)
		}
		if err != nil {
			p.result.Failed[k] = err
			continue
		}
		used[ip] = true
		if !pod.RequestedIP.IsValid() {
			lastAllocated = ip
		}
		p.create = append(p.create, seg.portRow(pod, ip))
		p.result.Attached[k] = seg.attachment(block, k, ip)
	}
	for _, gone := range ours {
		p.remove = append(p.remove, gone.UUID)
	}
	p.planGateway(seg, gw, block, gateway, gatewayHolder)
	slices.Sort(p.remove)

	p.switchIDs = seg.ids()
	p.switchIDs[owner.OVNKeyCIDR] = block.Prefix().String()
	if lastAllocated.IsValid() {
		p.switchIDs[owner.OVNKeyLastAllocated] = lastAllocated.String()
	}
	p.createSwitch = obs.sw == nil
	p.switchIDsChanged = p.createSwitch || !maps.Equal(obs.sw.ExternalIDs, p.switchIDs)
	return p
}

// planGateway adds the gateway port's part of the plan: want is the desired row (nil for
// none), old is our gateway port as stored (nil if there is none), holder the name of a
// foreign port holding the gateway address.
func (p *plan) planGateway(seg segment, want *nbdb.LogicalSwitchPort, block hostaddr.Block, old *nbdb.LogicalSwitchPort, holder string) {
	ip := block.Gateway()
	switch {
	case want == nil:
		if old != nil {
			p.remove = append(p.remove, old.UUID)
		}
		return
	case old == nil && holder != "":
		// Ours was never made: the address was someone else's first. (Once ours exists, a
		// foreign port added with the same address is that writer's mistake, and ours stays.)
		p.result.GatewayFailed = fmt.Errorf("%w: the gateway address %s of %s is held by logical switch port %s, which Octopus did not make: remove it",
			hostaddr.ErrInUse, ip, seg, holder)
		return
	}
	switch {
	case old == nil:
		p.create = append(p.create, *want)
	case !samePort(*old, *want) || !maps.Equal(old.Options, want.Options) || old.Type != want.Type:
		u := *want
		u.UUID = old.UUID
		p.updateGateway = &u
	}
	p.result.Gateway = Attachment{
		Port: want.Name, MAC: MACFor(ip), IP: netip.PrefixFrom(ip, block.Prefix().Bits()), Gateway: ip,
	}
}

// gatewayRow is the row Octopus writes for the gateway's port, requested on chassis.
func gatewayRow(clusterID string, ip netip.Addr, chassis string) nbdb.LogicalSwitchPort {
	mac := MACFor(ip).String()
	return nbdb.LogicalSwitchPort{
		Name:      GatewayPortName(clusterID),
		Addresses: []string{mac + " " + ip.String()},
		// Port security on the MAC only: the gateway forwards other clusters' packets, whose
		// source addresses are theirs, and receives packets for them; an address in
		// port_security would drop both (OVN checks the IP on the way in and on the way
		// out). The MAC still keeps the gateway node from speaking as a pod.
		PortSecurity: []string{mac},
		// One chassis: OVN binds the port there and nowhere else, whichever chassis have an
		// interface with its iface-id. Moving it is the failover; the MAC and address stay,
		// so the pods' neighbour entries stay right and no gratuitous ARP is needed.
		Options: map[string]string{"requested-chassis": chassis},
		ExternalIDs: map[string]string{
			owner.OVNKeyOwner: owner.OVNOwnerSecondary, owner.OVNKeyCluster: clusterID, owner.OVNKeyRole: owner.OVNRoleGateway,
		},
	}
}

// portRow is the row Octopus writes for a pod's port on the cluster's switch with address ip.
func portRow(clusterID string, pod Pod, ip netip.Addr) nbdb.LogicalSwitchPort {
	return clusterSegment(clusterID).portRow(pod, ip)
}

// portRow is the row Octopus writes for a pod's port on the segment's switch with address ip.
func (seg segment) portRow(pod Pod, ip netip.Addr) nbdb.LogicalSwitchPort {
	addr := MACFor(ip).String() + " " + ip.String()
	ids := seg.ids()
	ids[owner.OVNKeyPodNamespace], ids[owner.OVNKeyPodName], ids[owner.OVNKeyPodUID] = pod.Namespace, pod.Name, pod.UID
	return nbdb.LogicalSwitchPort{
		Name:      seg.portName(pod.Key()),
		Addresses: []string{addr},
		// Port security: OVN drops what the pod sends from any other MAC or IP, so a pod cannot
		// take another's address on the shared switch.
		PortSecurity: []string{addr},
		ExternalIDs:  ids,
	}
}

func samePort(a, b nbdb.LogicalSwitchPort) bool {
	return a.Name == b.Name && slices.Equal(a.Addresses, b.Addresses) &&
		slices.Equal(a.PortSecurity, b.PortSecurity) && maps.Equal(a.ExternalIDs, b.ExternalIDs)
}

func (seg segment) attachment(block hostaddr.Block, k PodKey, ip netip.Addr) Attachment {
	return Attachment{
		Port:    seg.portName(k),
		MAC:     MACFor(ip),
		IP:      netip.PrefixFrom(ip, block.Prefix().Bits()),
		Gateway: block.Gateway(),
	}
}

func isOurs(ids map[string]string, clusterID string) bool {
	return ids[owner.OVNKeyOwner] == owner.OVNOwnerSecondary && ids[owner.OVNKeyCluster] == clusterID
}

// ourAddr is the IPv4 address of a port Octopus wrote: addresses ["MAC IP"].
func ourAddr(port nbdb.LogicalSwitchPort) (netip.Addr, bool) {
	if len(port.Addresses) != 1 {
		return netip.Addr{}, false
	}
	f := strings.Fields(port.Addresses[0])
	if len(f) != 2 {
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(f[1])
	return ip, err == nil && ip.Is4()
}

// portAddrs lists every IP address a port holds, in OVN's formats: "MAC IP..." entries of
// addresses (skipping the keywords "unknown", "router" and "dynamic") and the
// dynamic_addresses OVN's own IPAM may have assigned.
func portAddrs(port nbdb.LogicalSwitchPort) []netip.Addr {
	entries := slices.Clone(port.Addresses)
	if port.DynamicAddresses != nil {
		entries = append(entries, *port.DynamicAddresses)
	}
	var out []netip.Addr
	for _, e := range entries {
		f := strings.Fields(e)
		for _, s := range f[min(1, len(f)):] {
			if ip, err := netip.ParseAddr(s); err == nil {
				out = append(out, ip)
			} else if pfx, err := netip.ParsePrefix(s); err == nil {
				out = append(out, pfx.Addr())
			}
		}
	}
	return out
}
