package globalnet

import (
	"cmp"
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
	"github.com/octopus-mcs/octopus/internal/ipam"
)

// A VPC gateway's external address (v1alpha1.VpcGatewayStatus.ExternalIP) comes from the same
// pool as the global ingress addresses and the GlobalEgressIP ranges: the pool is the part of
// the global CIDR that is neither the cluster's egress range nor the health-check address, and
// carving another range out of it would move the pool under addresses already handed out in
// joined clusters. Two allocators share it, the agent's (ingress and egress, Allocator) and the
// ovnmaster's (VPC gateways, VpcExternalIPs), in two processes; each counts what the other
// holds, and both settle a clash by one rule, the one NewPlan always had: of two objects
// holding one address the older keeps it (creationTimestamp, then claim key), and the younger
// gets another at its next pass. A clash needs both to hand out the same free address in the
// same instant, from different starting points (each claim starts at its key's hash).

// vpcKey is a Vpc's claim key; the prefix keeps it apart from the ingress keys
// ("namespace/name", and a Vpc's name has no "/") and the egress keys ("egress:…").
func vpcKey(name string) string { return "vpc:" + name }

// heldClaim is a claim on addresses an object holds already, with the object's age.
type heldClaim struct {
	claim   globalip.Claim
	created metav1.Time
}

// vpcHolders are the claims of the Vpcs that hold an external address, whether or not they
// are being deleted: a Vpc's gateway keeps its address until the Vpc is gone.
func vpcHolders(vpcs []v1alpha1.Vpc) []heldClaim {
	var out []heldClaim
	for i := range vpcs {
		v := &vpcs[i]
		if v.Status.Gateway == nil {
			continue
		}
		ip, err := netip.ParseAddr(v.Status.Gateway.ExternalIP)
		if err != nil {
			continue
		}
		out = append(out, heldClaim{globalip.Claim{Key: vpcKey(v.Name), Size: 1, Held: ipam.Range{First: ip, Last: ip}}, v.CreationTimestamp})
	}
	return out
}

// sortHolders orders holders oldest first (then by key): Assign keeps, of two holding one
// address, the first.
func sortHolders(holders []heldClaim) {
	slices.SortStableFunc(holders, func(a, b heldClaim) int {
		return cmp.Or(a.created.Compare(b.created.Time), cmp.Compare(a.claim.Key, b.claim.Key))
	})
}

// ingressHolders are the claims of the GlobalIngressIPs that hold an address.
func ingressHolders(ingress []v1alpha1.GlobalIngressIP) []heldClaim {
	var out []heldClaim
	for i := range ingress {
		g := &ingress[i]
		ip, err := netip.ParseAddr(g.Status.IP)
		if err != nil {
			continue
		}
		out = append(out, heldClaim{globalip.Claim{Key: g.Namespace + "/" + g.Name, Size: 1, Held: ipam.Range{First: ip, Last: ip}}, g.CreationTimestamp})
	}
	return out
}

// egressHolders are the claims of the GlobalEgressIPs that hold a range.
func egressHolders(egress []v1alpha1.GlobalEgressIP) []heldClaim {
	var out []heldClaim
	for i := range egress {
		g := &egress[i]
		if r, ok := egressRange(g.Status.AllocatedIPs); ok {
			out = append(out, heldClaim{globalip.Claim{Key: egressKey(g), Size: egressSize(g), Held: r}, g.CreationTimestamp})
		}
	}
	return out
}

// VpcExternalIPs gives every Vpc that wants one (wants(vpc): the caller's rule, e.g. not
// being deleted and able to have a gateway) an external address of layout's pool, counting
// the addresses the cluster's GlobalIngressIPs and GlobalEgressIPs hold and those every Vpc's
// status holds (a Vpc that wants none frees its address only once its status no longer holds
// it). A Vpc keeps the address it holds unless an older holder has it; the others get free addresses, Vpcs in name
// order, so that every pass over the same objects gives the same answer (the Vpc controller's
// workers each compute it for their own Vpc). A Vpc that wants one and is not in the result
// found the pool full.
func VpcExternalIPs(layout globalip.Layout, vpcs []v1alpha1.Vpc, wants func(*v1alpha1.Vpc) bool,
	ingress []v1alpha1.GlobalIngressIP, egress []v1alpha1.GlobalEgressIP) map[string]netip.Addr {
	wanted := map[string]bool{}
	for i := range vpcs {
		if wants(&vpcs[i]) {
			wanted[vpcs[i].Name] = true
		}
	}
	// Every Vpc whose status holds an address holds it, wanted or not, until its status lets it
	// go: the agent's allocator (NewPlan) counts it so, and its gateway may still use it (a Vpc
	// whose spec turned invalid keeps its OVN rows and status). Freed here alone, it could go
	// to another Vpc while the first still SNATs to it.
	holders := vpcHolders(vpcs)
	holders = append(holders, ingressHolders(ingress)...)
	holders = append(holders, egressHolders(egress)...)
	sortHolders(holders)
	claims := make([]globalip.Claim, 0, len(holders)+len(wanted))
	for _, h := range holders {
		claims = append(claims, h.claim)
	}
	names := make([]string, 0, len(wanted))
	for name := range wanted {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		// A holder's claim came first; Assign counts only the first claim of a key.
		claims = append(claims, globalip.Claim{Key: vpcKey(name), Size: 1})
	}
	assigned, _ := globalip.Assign(layout.Pool, claims)
	out := map[string]netip.Addr{}
	for _, name := range names {
		if r, ok := assigned[vpcKey(name)]; ok {
			out[name] = r.First
		}
	}
	return out
}
