package gateway

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
	"github.com/octopus-mcs/octopus/internal/ipam"
)

// Local is what the active gateway knows about its own cluster and node.
type Local struct {
	ClusterID string
	// Role is PeerRoleHub for the hub's gateway; "" means a member's.
	Role v1alpha1.PeerRole
	// Topology is the cluster's (Cluster.spec.topology); "" means mesh.
	Topology v1alpha1.Topology
	Backend  v1alpha1.Backend
	// Addressing is the cluster's (Cluster.spec.addressing); "" means direct.
	Addressing v1alpha1.Addressing
	// Subnets are the CIDRs this cluster advertises (Advertised; a globalnet cluster's
	// global CIDR, a secondary cluster's secondary CIDR).
	Subnets []netip.Prefix
	// Private are CIDRs of this cluster it does not advertise (a globalnet or secondary
	// cluster's own pod and service CIDRs) that no Peer's subnet may overlap still: routes to
	// them would shadow this cluster's own pods. Overlapping Peers are refused like
	// overlapping subnets.
	Private []netip.Prefix
	// PeerAddressing is every member cluster's addressing, by cluster ID, from the Clusters
	// on the hub (a Peer does not carry it). A Peer whose cluster is missing counts as
	// direct, the API's default.
	PeerAddressing map[string]v1alpha1.Addressing
	// Allocated is what the hub recorded for every member cluster, by cluster ID
	// (Allocation of its Cluster): the only prefixes a member's Peer may advertise. A Peer
	// writes its own subnets, so without this check any member credential could steer
	// another cluster's pod CIDR, a public prefix or a link-local address into its tunnel.
	// A member whose Cluster is missing (never joined, or revoked) is allocated nothing.
	Allocated map[string][]netip.Prefix
	// Silent are the clusters whose heartbeat stopped for longer than the gateway's
	// SilentClusterTTL (silence.go): their Peers get no tunnel until they heartbeat again.
	Silent     map[string]bool
	ListenPort uint16
	// LocalAddr is this gateway's underlay address.
	LocalAddr netip.Addr
	MTU       int
}

// Refusal is a remote Peer the gateway does not tunnel to, and why.
type Refusal struct {
	Cluster string
	// Reason is one of the Reason* constants.
	Reason  string
	Message string
}

// Desired is the data plane the gateway wants: the tunnel configuration, the clusters
// reached through another Peer's tunnel, the health-probe targets (cluster → its
// health-check address) and the Peers it refused.
type Desired struct {
	Tunnel tunnel.Config
	// Via maps each cluster without a tunnel of its own to the Peer (the hub's gateway)
	// whose tunnel carries its subnets.
	Via     map[string]string
	Targets map[string]netip.Addr
	Refused []Refusal
	// Withheld are single subnets of otherwise accepted Peers that were left out (not
	// allocated to the sender, or not routable through its tunnel), one Refusal per Peer
	// naming them; the rest of the Peer is used.
	Withheld []Refusal
	// Families are, per accepted member Peer (tunnel or via), the address families carried
	// between it and this cluster and why any other is not (familiesWith). The hub's gateway
	// has none, neither as local nor as Peer: it forwards whatever members send.
	Families map[string]Families
}

// Families is what one connection carries per address family.
type Families struct {
	// Carried are "IPv4" and "IPv6" in that order, those both clusters advertise subnets of.
	Carried []string
	// Message names each family one side advertises and the other does not; "" when none.
	Message string
}

// familyName is the API's name of p's address family (PeerConnection.ipFamilies, and
// Kubernetes' own IPFamily). An IPv4-mapped prefix is IPv6: it is routed as one.
func familyName(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// advertisedBy returns the subnets Peer p advertises that parse, accepted or not.
func advertisedBy(p v1alpha1.Peer) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range p.Spec.Subnets {
		if prefix, err := netip.ParsePrefix(s); err == nil {
			out = append(out, prefix.Masked())
		}
	}
	return out
}

// familiesWith compares the families this cluster advertises (ours) with those of Peer id's
// accepted subnets (theirs; advertised is all it advertises). A family only one side has is
// not offered: the other side has no address of it to send from or to (a cluster without an
// IPv6 CIDR, or under globalnet, whose global CIDR is IPv4), or its subnets of that family were
// withheld (vxlan carries only its underlay's family). It says which, so that a mixed cluster
// set reads as such rather than as a broken tunnel.
func familiesWith(local Local, id string, ours, theirs, advertised []netip.Prefix) Families {
	has := func(ps []netip.Prefix, fam string) []string {
		var out []string
		for _, p := range ps {
			if familyName(p) == fam {
				out = append(out, p.String())
			}
		}
		return out
	}
	var f Families
	var msgs []string
	for _, fam := range []string{"IPv4", "IPv6"} {
		mine, yours := has(ours, fam), has(theirs, fam)
		switch {
		case len(mine) > 0 && len(yours) > 0:
			f.Carried = append(f.Carried, fam)
		case len(mine) > 0 && len(has(advertised, fam)) > 0:
			msgs = append(msgs, fmt.Sprintf("%s is not offered between %s and %s: cluster %s's %s subnets (%s) are withheld (condition %s says why)",
				fam, local.ClusterID, id, id, fam, strings.Join(has(advertised, fam), ", "), ConditionSubnetsAccepted))
		case len(mine) > 0:
			msgs = append(msgs, fmt.Sprintf("%s is not offered between %s and %s: cluster %s advertises no %s subnet (it registered no %s pod or service CIDR, or its addressing translates another family), this cluster does (%s)",
				fam, local.ClusterID, id, id, fam, fam, strings.Join(mine, ", ")))
		case len(yours) > 0:
			msgs = append(msgs, fmt.Sprintf("%s is not offered between %s and %s: this cluster advertises no %s subnet (it registered no %s pod or service CIDR, or its addressing translates another family), cluster %s does (%s)",
				fam, local.ClusterID, id, fam, fam, id, strings.Join(yours, ", ")))
		}
	}
	f.Message = strings.Join(msgs, "; ")
	return f
}

// RemoteSubnets lists every accepted peer's subnets, sorted: what the route agents route
// to the gateway.
func (d Desired) RemoteSubnets() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range d.Tunnel.Peers {
		out = append(out, p.Subnets...)
	}
	return ipam.SortPrefixes(out)
}

// Compute turns the hub's Peers into the desired data plane. It is pure, so every rule is
// unit-tested:
//   - our own Peer and Peers being deleted are skipped;
//   - Peers are taken oldest first (then by cluster ID), so that of two Peers that overlap
//     each other the same one wins on every gateway, and a newcomer cannot displace a
//     cluster that is already connected;
//   - a Peer is refused (and reported) when its backend differs from ours, one of the two
//     clusters uses secondary addressing and the other does not (sameNetwork), it has no
//     usable endpoint, a wireguard Peer has no public key, a subnet does not parse, or a subnet
//     overlaps ours or an accepted Peer's (direct addressing needs distinct CIDRs);
//   - one bad Peer never fails the tunnel configuration as a whole: a second Peer of an
//     accepted cluster ID, public key or (vxlan) endpoint address, a key that is not a
//     WireGuard key, or (vxlan) an endpoint of the other family or port is refused alone,
//     so that what reaches the driver always passes its validation;
//   - advertised = allocated: a member Peer's subnet outside its cluster's allocation
//     (Local.Allocated) and a hub gateway's subnet other than its health-check address are
//     withheld (Desired.Withheld), the rest of the Peer is used; a member Peer without a
//     Cluster on the hub (not joined, or revoked) is refused; a health-check address
//     outside the Peer's accepted subnets is not probed (the probe would leave outside the
//     tunnel);
//   - topology: a member tunnels to the hub's gateway whenever it has published a Peer, and
//     directly to another member only when both use the mesh topology; any other member's
//     subnets are added to the hub tunnel (the hub forwards), or, with no hub gateway, the
//     member is refused. The hub's gateway tunnels to every member.
func Compute(local Local, peers []v1alpha1.Peer) Desired {
	d := Desired{
		Tunnel:   tunnel.Config{ListenPort: local.ListenPort, LocalAddr: local.LocalAddr, MTU: local.MTU},
		Via:      map[string]string{},
		Targets:  map[string]netip.Addr{},
		Families: map[string]Families{},
	}
	sorted := slices.Clone(peers)
	slices.SortFunc(sorted, func(a, b v1alpha1.Peer) int {
		// The hub's gateway first: whether a member can be reached through it depends on it.
		if ah, bh := a.Spec.Role == v1alpha1.PeerRoleHub, b.Spec.Role == v1alpha1.PeerRoleHub; ah != bh {
			if ah {
				return -1
			}
			return 1
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Spec.ClusterID, b.Spec.ClusterID)
	})
	taken := map[netip.Prefix]string{} // subnet → cluster that has it
	for _, s := range slices.Concat(local.Subnets, local.Private) {
		taken[s] = local.ClusterID
	}
	seen := seenPeers{clusters: map[string]bool{}, keys: map[string]string{}, addrs: map[netip.Addr]string{}}
	hubAt := -1 // index of the hub gateway's tunnel in d.Tunnel.Peers
	for _, p := range sorted {
		id := p.Spec.ClusterID
		if id == "" || id == local.ClusterID || p.DeletionTimestamp != nil {
			continue
		}
		isHub := p.Spec.Role == v1alpha1.PeerRoleHub
		if isHub && hubAt >= 0 {
			d.Refused = append(d.Refused, Refusal{Cluster: id, Reason: ReasonInvalidPeer,
				Message: fmt.Sprintf("cluster %s: a second hub gateway Peer; only %s's is used", id, d.Tunnel.Peers[hubAt].Cluster)})
			continue
		}
		if isHub && id != v1alpha1.HubPeerName {
			// Only the hub gateway's identity may write a hub-role Peer (admission), and it
			// writes it as HubPeerName; any other is not the hub's gateway.
			d.Refused = append(d.Refused, Refusal{Cluster: id, Reason: ReasonInvalidPeer,
				Message: fmt.Sprintf("cluster %s: a hub-role Peer must be the hub gateway's, %s", id, v1alpha1.HubPeerName)})
			continue
		}
		if local.Silent[id] && !isHub {
			d.Refused = append(d.Refused, Refusal{Cluster: id, Reason: ReasonSilent,
				Message: fmt.Sprintf("cluster %s is not connected: its heartbeat Lease on the hub has not been renewed for longer than the silent-cluster TTL; its tunnel comes back when it heartbeats again", id)})
			continue
		}
		if seen.clusters[id] {
			// The driver takes one tunnel per cluster; the older Peer keeps it.
			d.Refused = append(d.Refused, Refusal{Cluster: id, Reason: ReasonDuplicatePeer,
				Message: fmt.Sprintf("cluster %s: Peer %s is a second Peer of this cluster ID; the older one is used (a Peer's name must equal its clusterID)", id, p.Name)})
			continue
		}
		tp, withheld, ref := acceptPeer(local, p, taken, seen)
		if withheld != nil {
			d.Withheld = append(d.Withheld, *withheld)
		}
		if ref == nil && !isHub && !direct(local, p) && hubAt < 0 {
			ref = &Refusal{Cluster: id, Reason: ReasonNoHubGateway, Message: fmt.Sprintf(
				"cluster %s is not connected: %s uses the hub topology, so traffic goes through the hub's gateway, and the hub runs none; "+
					"run `octopus-agent gateway --hub` on the hub, or join both clusters with --topology mesh", id, hubSide(local, p))}
		}
		if ref != nil {
			d.Refused = append(d.Refused, *ref)
			continue
		}
		seen.add(local, tp)
		for _, s := range tp.Subnets {
			taken[s] = id
		}
		if !isHub && local.Role != v1alpha1.PeerRoleHub {
			d.Families[id] = familiesWith(local, id, local.Subnets, tp.Subnets, advertisedBy(p))
		}
		if hc, err := netip.ParseAddr(p.Spec.HealthCheckIP); err == nil && containsAddr(tp.Subnets, hc) {
			d.Targets[id] = hc
		}
		if !isHub && !direct(local, p) {
			hub := &d.Tunnel.Peers[hubAt]
			hub.Subnets = ipam.SortPrefixes(slices.Concat(hub.Subnets, tp.Subnets))
			d.Via[id] = hub.Cluster
			continue
		}
		if isHub {
			hubAt = len(d.Tunnel.Peers)
		}
		d.Tunnel.Peers = append(d.Tunnel.Peers, tp)
	}
	slices.SortFunc(d.Tunnel.Peers, func(a, b tunnel.Peer) int { return strings.Compare(a.Cluster, b.Cluster) })
	return d
}

// direct tells whether local tunnels straight to the member Peer p: the hub's gateway
// tunnels to every member, members only to each other when both use the mesh topology.
func direct(local Local, p v1alpha1.Peer) bool {
	return local.Role == v1alpha1.PeerRoleHub || (isMesh(local.Topology) && isMesh(p.Spec.Topology))
}

func isMesh(t v1alpha1.Topology) bool { return t == "" || t == v1alpha1.TopologyMesh }

// hubSide names the side whose hub topology keeps two members from tunnelling directly.
func hubSide(local Local, p v1alpha1.Peer) string {
	if !isMesh(local.Topology) {
		return "this cluster (" + local.ClusterID + ")"
	}
	return "cluster " + p.Spec.ClusterID
}

// seenPeers is what the Peers accepted so far hold that the driver needs unique.
type seenPeers struct {
	clusters map[string]bool
	// keys and addrs map a WireGuard public key and a vxlan endpoint address to the cluster
	// that has it.
	keys  map[string]string
	addrs map[netip.Addr]string
}

func (s seenPeers) add(local Local, tp tunnel.Peer) {
	s.clusters[tp.Cluster] = true
	if local.Backend == v1alpha1.BackendVXLAN {
		s.addrs[tp.Endpoint.Addr().Unmap()] = tp.Cluster
	} else {
		s.keys[tp.PublicKey] = tp.Cluster
	}
}

// acceptPeer turns one Peer into its tunnel, or refuses it. withheld names the subnets left
// out of an accepted Peer.
func acceptPeer(local Local, p v1alpha1.Peer, taken map[netip.Prefix]string, seen seenPeers) (tp tunnel.Peer, withheld, refusal *Refusal) {
	id := p.Spec.ClusterID
	refuse := func(reason, format string, args ...any) (tunnel.Peer, *Refusal, *Refusal) {
		return tunnel.Peer{}, nil, &Refusal{Cluster: id, Reason: reason, Message: fmt.Sprintf(format, args...)}
	}
	backend := p.Spec.Backend
	if backend == "" {
		backend = v1alpha1.BackendWireGuard
	}
	if backend != local.Backend {
		return refuse(ReasonBackendMismatch, "cluster %s uses the %s backend and this cluster %s; run every gateway with the same --backend", id, backend, local.Backend)
	}
	if theirs := local.PeerAddressing[id]; !sameNetwork(local, p.Spec.Role, theirs) {
		return refuse(ReasonAddressingMismatch, "cluster %s is not connected: it uses %s addressing and this cluster (%s) %s; "+
			"a pod on the secondary network reaches other clusters only over net1, where the other's pods have no address, "+
			"so no pod of one can talk to a pod of the other; put both on the same network "+
			"(`octopus leave`, then `octopus join --addressing secondary` on the one that is not, or another addressing on the one that is)",
			id, addressingName(theirs), local.ClusterID, addressingName(local.Addressing))
	}
	ep, err := endpoint(p.Spec.Endpoint)
	if err != nil {
		return refuse(ReasonInvalidPeer, "cluster %s: %v", id, err)
	}
	if backend == v1alpha1.BackendWireGuard {
		if p.Spec.PublicKey == "" {
			return refuse(ReasonInvalidPeer, "cluster %s publishes no WireGuard public key; its gateway may still be starting", id)
		}
		if raw, err := base64.StdEncoding.DecodeString(p.Spec.PublicKey); err != nil || len(raw) != 32 {
			return refuse(ReasonInvalidPeer, "cluster %s: public key %q is not a base64 WireGuard key (32 bytes)", id, p.Spec.PublicKey)
		}
		if o, ok := seen.keys[p.Spec.PublicKey]; ok {
			// WireGuard tells peers apart by key: two peers with one key are one peer.
			return refuse(ReasonDuplicatePeer, "cluster %s publishes the public key of cluster %s; the older Peer keeps it", id, o)
		}
	} else {
		// One vxlan device has one destination port and tells peers apart by address.
		switch la := local.LocalAddr.Unmap(); {
		case la.IsValid() && ep.Addr().Unmap().Is4() != la.Is4():
			return refuse(ReasonInvalidPeer, "cluster %s: endpoint %s and this gateway's address %s are of different IP families", id, ep.Addr(), la)
		case ep.Port() != local.ListenPort:
			return refuse(ReasonInvalidPeer, "cluster %s listens on port %d, this gateway on %d: vxlan needs the same tunnel port on every cluster", id, ep.Port(), local.ListenPort)
		}
		if o, ok := seen.addrs[ep.Addr().Unmap()]; ok {
			return refuse(ReasonDuplicatePeer, "cluster %s publishes the endpoint address %s of cluster %s; the older Peer keeps it", id, ep.Addr(), o)
		}
	}
	tp = tunnel.Peer{Cluster: id, PublicKey: p.Spec.PublicKey, Endpoint: ep}
	subnets := make([]netip.Prefix, 0, len(p.Spec.Subnets))
	for _, s := range p.Spec.Subnets {
		prefix, err := netip.ParsePrefix(s)
		if err != nil {
			return refuse(ReasonInvalidPeer, "cluster %s: subnet %q is not a CIDR", id, s)
		}
		subnets = append(subnets, prefix.Masked())
	}
	allowed, allocation := allowedSubnets(local, p)
	if allowed == nil && p.Spec.Role != v1alpha1.PeerRoleHub {
		// No Cluster: the cluster never joined, or was revoked. Its gateway gets no tunnel,
		// not only no routes.
		return refuse(ReasonNotRegistered, "cluster %s is not connected: the hub has no Cluster %s (not joined, or revoked); its Peer is ignored", id, id)
	}
	var out []string
	for _, prefix := range subnets {
		switch {
		case !within(prefix, allowed):
			out = append(out, prefix.String())
		case backend == v1alpha1.BackendVXLAN && prefix.Addr().Is4() != ep.Addr().Unmap().Is4():
			// vxlan routes a subnet via the endpoint address, which must be of its family.
			out = append(out, prefix.String()+" (not of its endpoint's IP family)")
		case !slices.Contains(tp.Subnets, prefix):
			tp.Subnets = append(tp.Subnets, prefix)
		}
	}
	tp.Subnets = ipam.SortPrefixes(tp.Subnets)
	if len(out) > 0 {
		withheld = &Refusal{Cluster: id, Reason: ReasonSubnetsNotAllocated, Message: fmt.Sprintf(
			"cluster %s advertises %s outside %s; not routed (fix the subnets its gateway publishes, or its Cluster on the hub)",
			id, strings.Join(out, ", "), allocation)}
	}
	var conflicts []string
	for _, s := range tp.Subnets {
		for t, owner := range taken {
			if s.Overlaps(t) {
				conflicts = append(conflicts, fmt.Sprintf("%s overlaps %s of cluster %s", s, t, owner))
			}
		}
	}
	if len(conflicts) > 0 {
		slices.Sort(conflicts)
		return refuse(ReasonOverlappingSubnets, "cluster %s is not connected: %s; direct addressing needs distinct CIDRs (globalnet or secondary addressing handle overlaps), or opt the subnet out with --exclude-subnet on one side",
			id, strings.Join(conflicts, "; "))
	}
	return tp, withheld, nil
}

// allowedSubnets is what Peer p may advertise and how to name it in a refusal: the hub
// gateway only its health-check address (it has no cluster behind it; it forwards between
// members), a member its cluster's allocation.
func allowedSubnets(local Local, p v1alpha1.Peer) ([]netip.Prefix, string) {
	if p.Spec.Role == v1alpha1.PeerRoleHub {
		hc, err := netip.ParseAddr(p.Spec.HealthCheckIP)
		if err != nil {
			return nil, "the hub gateway's health-check address (it publishes none)"
		}
		return []netip.Prefix{netip.PrefixFrom(hc, hc.BitLen())}, "the hub gateway's health-check address " + hc.String()
	}
	alloc := local.Allocated[p.Spec.ClusterID]
	if len(alloc) == 0 {
		return nil, "any allocation: the hub has no Cluster " + p.Spec.ClusterID + " (not joined, or revoked)"
	}
	names := make([]string, len(alloc))
	for i, a := range alloc {
		names[i] = a.String()
	}
	return alloc, "what the hub allocated to it (" + strings.Join(names, ", ") + ")"
}

// within tells whether p lies inside one of the prefixes of in.
func within(p netip.Prefix, in []netip.Prefix) bool {
	for _, a := range in {
		if a.Bits() <= p.Bits() && a.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// containsAddr tells whether a lies in one of the prefixes.
func containsAddr(in []netip.Prefix, a netip.Addr) bool {
	return slices.ContainsFunc(in, func(p netip.Prefix) bool { return p.Contains(a) })
}

// Allocation is what a member cluster may advertise, from its Cluster on the hub: its pod and
// service CIDRs as registered, and the global and secondary blocks the hub allocated to it.
// Unparsable entries (which the CRD's validation refuses) are skipped: they allow nothing.
func Allocation(c v1alpha1.ClusterSpec) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range slices.Concat(c.PodCIDRs, c.ServiceCIDRs, []string{c.GlobalCIDR, c.SecondaryCIDR}) {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return ipam.SortPrefixes(out)
}

// sameNetwork tells whether local and a Peer of the given role and addressing carry their
// pods' traffic on the same network: both on the secondary network (secondary addressing),
// or both on the primary one (direct or globalnet, which mix). A pod on the secondary network
// reaches other clusters only over net1, whose routes cover only the secondary blocks: its
// reply to a primary (or global) address would leave through its primary interface with its
// net1 address as source, outside the tunnel, and its own primary address is private. So no
// pod of one cluster could talk to a pod of the other, whichever side starts. The hub's
// gateway forwards for everyone and has no network of its own.
func sameNetwork(local Local, role v1alpha1.PeerRole, theirs v1alpha1.Addressing) bool {
	if local.Role == v1alpha1.PeerRoleHub || role == v1alpha1.PeerRoleHub {
		return true
	}
	return (local.Addressing == v1alpha1.AddressingSecondary) == (theirs == v1alpha1.AddressingSecondary)
}

// addressingName is the addressing as the user names it; "" is the API's default, direct.
func addressingName(a v1alpha1.Addressing) v1alpha1.Addressing {
	if a == "" {
		return v1alpha1.AddressingDirect
	}
	return a
}

// endpoint picks the address to tunnel to: the public IP when the Peer has one (it is behind
// NAT or on another network), else its private IP.
func endpoint(e v1alpha1.PeerEndpoint) (netip.AddrPort, error) {
	ip := e.PublicIP
	if ip == "" {
		ip = e.PrivateIP
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("endpoint address %q: %w", ip, err)
	}
	if e.Port < 1 || e.Port > 65535 {
		return netip.AddrPort{}, fmt.Errorf("endpoint port %d out of range", e.Port)
	}
	return netip.AddrPortFrom(addr, uint16(e.Port)), nil
}

// Advertised computes the CIDRs a cluster offers: its pod and service CIDRs minus the
// opted-out ones. Opting out part of a CIDR splits it into the prefixes that remain.
func Advertised(c v1alpha1.ClusterSpec, optOut []netip.Prefix) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range slices.Concat(c.PodCIDRs, c.ServiceCIDRs) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: CIDR %q: %w; fix the Cluster object on the hub (re-run `octopus join`)", c.ClusterID, s, err)
		}
		out = append(out, subtract(p.Masked(), optOut)...)
	}
	return ipam.SortPrefixes(out), nil
}

// subtract returns p minus every prefix of cut, as a minimal list of prefixes.
func subtract(p netip.Prefix, cut []netip.Prefix) []netip.Prefix {
	for _, c := range cut {
		c = c.Masked()
		if !p.Overlaps(c) {
			continue
		}
		if c.Bits() <= p.Bits() {
			return nil // p lies inside c
		}
		// c lies inside p: split p in halves and recurse into each.
		lo, hi := halves(p)
		return slices.Concat(subtract(lo, cut), subtract(hi, cut))
	}
	return []netip.Prefix{p}
}

// halves splits p into its two prefixes one bit longer.
func halves(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := p.Bits() + 1
	lo := netip.PrefixFrom(p.Addr(), bits)
	b := p.Addr().AsSlice()
	i := p.Bits() / 8
	b[i] |= 0x80 >> (p.Bits() % 8)
	hiAddr, _ := netip.AddrFromSlice(b)
	return lo, netip.PrefixFrom(hiAddr, bits)
}
