// Package globalnet is the Kubernetes side of globalnet addressing: the allocator that records
// a global ingress address for every exported ClusterSetIP Service and every ready pod of an
// exported headless Service (GlobalIngressIP objects), and the translation of those records,
// the Services and their EndpointSlices into the desired state of the gateway's NAT
// (internal/datapath/nat). The address arithmetic is internal/globalnet/globalip's.
package globalnet

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
	"github.com/octopus-mcs/octopus/internal/ipam"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/servicediscovery"
)

// Target is an object that needs a global ingress address.
type Target struct {
	Namespace string
	Kind      v1alpha1.GlobalIngressTargetKind
	// Name is the Service's or the Pod's name.
	Name string
	// Service is the exported Service: Name itself for a Service target.
	Service string
	// UID is the Service's or the Pod's, for the owner reference that lets Kubernetes delete
	// the record with its target even while no agent runs.
	UID types.UID
}

// ObjectName is the name of the target's GlobalIngressIP: the kind's prefix and the target's
// name (a Service and a Pod may share a name), shortened with a hash where that would be too long.
func (t Target) ObjectName() string {
	prefix := "svc-"
	if t.Kind == v1alpha1.GlobalIngressTargetPod {
		prefix = "pod-"
	}
	name := prefix + t.Name
	if len(name) <= 253 {
		return name
	}
	sum := sha256.Sum256([]byte(t.Name))
	return name[:253-9] + "-" + hex.EncodeToString(sum[:4])
}

// key is the target's claim key and object key: namespace/object name.
func (t Target) key() string { return t.Namespace + "/" + t.ObjectName() }

func (t Target) spec() v1alpha1.GlobalIngressTarget {
	g := v1alpha1.GlobalIngressTarget{Kind: t.Kind, Name: t.Name}
	if t.Kind == v1alpha1.GlobalIngressTargetPod {
		g.ServiceName = t.Service
	}
	return g
}

// Export is an exported Service as the allocator sees it: the Service (nil if it does not
// exist) and its local EndpointSlices.
type Export struct {
	Namespace, Name string
	Service         *corev1.Service
	Slices          []discoveryv1.EndpointSlice
}

// Targets lists, sorted by key, what the exports need addresses for: each exported ClusterSetIP
// Service, and each ready pod of an exported headless Service (the pods other clusters can
// reach: the export side publishes only ready endpoints). An export without its Service, of a
// Service that cannot be exported, or of one without IPv4 (global addresses are IPv4 and lead
// to IPv4 endpoints only; the export is invalid, servicediscovery.GlobalAddresses) needs
// nothing.
func Targets(exports []Export) []Target {
	var out []Target
	for _, e := range exports {
		if e.Service == nil || !servicediscovery.HasIPv4(e.Service) {
			continue
		}
		typ, ok := servicediscovery.ImportType(e.Service)
		switch {
		case !ok:
			continue
		case typ == mcsv1beta1.ClusterSetIP:
			out = append(out, Target{Namespace: e.Namespace, Kind: v1alpha1.GlobalIngressTargetService, Name: e.Name, Service: e.Name, UID: e.Service.UID})
			continue
		}
		seen := map[string]bool{}
		for _, s := range e.Slices {
			for _, ep := range s.Endpoints {
				ref := ep.TargetRef
				if !servicediscovery.Ready(ep) || ref == nil || ref.Kind != "Pod" || seen[ref.Name] {
					continue
				}
				seen[ref.Name] = true
				out = append(out, Target{Namespace: e.Namespace, Kind: v1alpha1.GlobalIngressTargetPod, Name: ref.Name, Service: e.Name, UID: ref.UID})
			}
		}
	}
	slices.SortFunc(out, func(a, b Target) int { return cmp.Compare(a.key(), b.key()) })
	return out
}

// Plan is what turns the existing GlobalIngressIPs into the desired ones.
type Plan struct {
	// Create are new objects; their status follows in Status once they exist.
	Create []*v1alpha1.GlobalIngressIP
	// Delete are objects whose target no longer needs an address, or that cannot be kept for
	// it (another target under the name, a recreated Service or Pod).
	Delete []*v1alpha1.GlobalIngressIP
	// Status holds, by namespace/name, the status of every object to create or keep whose
	// recorded status differs.
	Status map[string]v1alpha1.GlobalIngressIPStatus
	// Exhausted is how many targets found no address.
	Exhausted int
	// EgressStatus holds, by namespace/name, the status of every GlobalEgressIP whose recorded
	// status differs.
	EgressStatus map[string]v1alpha1.GlobalEgressIPStatus
	// EgressExhausted is how many GlobalEgressIPs found no range.
	EgressExhausted int
}

// NewPlan computes the Plan for targets (as Targets returns them) given the existing
// GlobalIngressIPs of the cluster, its GlobalEgressIPs, whose addresses all come from
// layout's pool, and its Vpcs, whose gateways' external addresses come from it too (the
// ovnmaster allocates those: VpcExternalIPs; here they are only counted as taken). Existing
// records and ranges keep their addresses; of two holding one address the older keeps it. now
// stamps the conditions that change.
func NewPlan(layout globalip.Layout, targets []Target, existing []v1alpha1.GlobalIngressIP, egress []v1alpha1.GlobalEgressIP, vpcs []v1alpha1.Vpc, now metav1.Time) Plan {
	p := Plan{Status: map[string]v1alpha1.GlobalIngressIPStatus{}, EgressStatus: map[string]v1alpha1.GlobalEgressIPStatus{}}
	want := map[string]Target{}
	for _, t := range targets {
		want[t.key()] = t
	}
	kept := map[string]*v1alpha1.GlobalIngressIP{}
	var keptOrder []*v1alpha1.GlobalIngressIP
	for i := range existing {
		g := &existing[i]
		key := g.Namespace + "/" + g.Name
		t, ok := want[key]
		if !ok || g.Spec.Target != t.spec() || !ownedBy(g, t.UID) || !g.DeletionTimestamp.IsZero() {
			p.Delete = append(p.Delete, g)
			continue
		}
		kept[key] = g
		keptOrder = append(keptOrder, g)
	}
	// Whatever holds addresses comes first, oldest first, ingress records, egress ranges and
	// VPC gateways alike, so that the older of two holding one address keeps it; new claims
	// follow. A kept record without an address is a claim here too (a new one, in effect).
	var holders []heldClaim
	for _, g := range keptOrder {
		c := globalip.Claim{Key: g.Namespace + "/" + g.Name, Size: 1}
		if ip, err := netip.ParseAddr(g.Status.IP); err == nil {
			c.Held = ipam.Range{First: ip, Last: ip}
		}
		holders = append(holders, heldClaim{c, g.CreationTimestamp})
	}
	var newEgress []globalip.Claim
	for i := range egress {
		g := &egress[i]
		if _, err := metav1.LabelSelectorAsSelector(g.Spec.PodSelector); err != nil {
			continue // no range: planEgress says why
		}
		c := globalip.Claim{Key: egressKey(g), Size: egressSize(g)}
		if r, ok := egressRange(g.Status.AllocatedIPs); ok {
			c.Held = r
			holders = append(holders, heldClaim{c, g.CreationTimestamp})
		} else {
			newEgress = append(newEgress, c)
		}
	}
	holders = append(holders, vpcHolders(vpcs)...)
	sortHolders(holders)
	claims := make([]globalip.Claim, 0, len(targets)+len(egress)+len(vpcs))
	for _, h := range holders {
		claims = append(claims, h.claim)
	}
	for _, t := range targets {
		if kept[t.key()] == nil {
			claims = append(claims, globalip.Claim{Key: t.key(), Size: 1})
		}
	}
	claims = append(claims, newEgress...)
	assigned, _ := globalip.Assign(layout.Pool, claims)
	p.planEgress(layout, egress, assigned, now)

	for _, t := range targets {
		key := t.key()
		var old v1alpha1.GlobalIngressIPStatus
		if g := kept[key]; g != nil {
			old = g.Status
		} else {
			p.Create = append(p.Create, newObject(t))
		}
		status := *old.DeepCopy()
		cond := metav1.Condition{Type: v1alpha1.GlobalIngressIPConditionAllocated, LastTransitionTime: now}
		if r, ok := assigned[key]; ok {
			status.IP = r.First.String()
			cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonAllocated
			cond.Message = fmt.Sprintf("%s is %s %s's address in the ingress pool %s of global CIDR %s", status.IP, t.Kind, t.Name, layout.Pool, layout.CIDR)
		} else {
			p.Exhausted++
			status.IP = ""
			cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonPoolExhausted
			cond.Message = fmt.Sprintf("No free address in the ingress pool %s of global CIDR %s (all %d are in use): unexport services, or deploy the hub with a larger --globalnet-prefix-length block",
				layout.Pool, layout.CIDR, layout.Pool.Len())
		}
		meta.SetStatusCondition(&status.Conditions, cond)
		if kept[key] == nil || !statusEqual(old, status) {
			p.Status[key] = status
		}
	}
	return p
}

func newObject(t Target) *v1alpha1.GlobalIngressIP {
	labels := kube.ManagedLabels()
	labels[mcsv1beta1.LabelServiceName] = t.Service
	kind := "Service"
	if t.Kind == v1alpha1.GlobalIngressTargetPod {
		kind = "Pod"
	}
	return &v1alpha1.GlobalIngressIP{
		ObjectMeta: metav1.ObjectMeta{
			Name: t.ObjectName(), Namespace: t.Namespace, Labels: labels,
			// The target owns its record: deleting the Service or the Pod deletes it, also
			// while no agent runs.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: kind, Name: t.Name, UID: t.UID, Controller: ptr.To(true)}},
		},
		Spec: v1alpha1.GlobalIngressIPSpec{Target: t.spec()},
	}
}

func ownedBy(g *v1alpha1.GlobalIngressIP, uid types.UID) bool {
	return slices.ContainsFunc(g.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == uid })
}

// statusEqual compares what a reader of the status sees: the address and each condition's
// status, reason and message (the transition time moves only with the status).
func statusEqual(a, b v1alpha1.GlobalIngressIPStatus) bool {
	return a.IP == b.IP && conditionsEqual(a.Conditions, b.Conditions)
}

// conditionsEqual compares conditions without their transition times.
func conditionsEqual(a, b []metav1.Condition) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.Condition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message
	})
}
