package globalnet

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/nat"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
	"github.com/octopus-mcs/octopus/internal/ipam"
)

// egressKey is a GlobalEgressIP's claim key. The prefix keeps it apart from the keys of
// ingress records ("namespace/name"): a namespace name has no colon.
func egressKey(g *v1alpha1.GlobalEgressIP) string { return "egress:" + g.Namespace + "/" + g.Name }

// egressSize is how many addresses g asks for (1 when unset: the API server defaults it, a
// client that skips defaulting does not).
func egressSize(g *v1alpha1.GlobalEgressIP) int {
	return int(cmp.Or(g.Spec.NumberOfIPs, 1))
}

// egressRange is the range a status's allocatedIPs list, if they are consecutive addresses.
func egressRange(ips []string) (ipam.Range, bool) {
	var r ipam.Range
	for i, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil || (i > 0 && a != r.Last.Next()) {
			return ipam.Range{}, false
		}
		if i == 0 {
			r.First = a
		}
		r.Last = a
	}
	return r, len(ips) > 0
}

// addresses lists r's addresses, in order.
func addresses(r ipam.Range) []string {
	var out []string
	for a := r.First; a.IsValid() && a.Compare(r.Last) <= 0; a = a.Next() {
		out = append(out, a.String())
	}
	return out
}

// planEgress records in p the status of every GlobalEgressIP given the ranges Assign gave.
func (p *Plan) planEgress(layout globalip.Layout, egress []v1alpha1.GlobalEgressIP, assigned map[string]ipam.Range, now metav1.Time) {
	for i := range egress {
		g := &egress[i]
		status := *g.Status.DeepCopy()
		cond := metav1.Condition{Type: v1alpha1.GlobalEgressIPConditionAllocated, LastTransitionTime: now}
		r, ok := assigned[egressKey(g)]
		if _, err := metav1.LabelSelectorAsSelector(g.Spec.PodSelector); err != nil {
			status.AllocatedIPs = nil
			cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonInvalidPodSelector
			cond.Message = fmt.Sprintf("podSelector: %v; it selects no pod and holds no range", err)
		} else if ok {
			status.AllocatedIPs = addresses(r)
			cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonAllocated
			cond.Message = fmt.Sprintf("%s is the egress range of %s in the pool %s of global CIDR %s", r, podsOf(g), layout.Pool, layout.CIDR)
		} else {
			p.EgressExhausted++
			status.AllocatedIPs = nil
			cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonPoolExhausted
			cond.Message = fmt.Sprintf("No %d consecutive free addresses in the pool %s of global CIDR %s (%d addresses, shared with the ingress addresses of exported services): lower numberOfIPs, delete other GlobalEgressIPs or unexport services; meanwhile %s use the cluster's egress range %s",
				egressSize(g), layout.Pool, layout.CIDR, layout.Pool.Len(), podsOf(g), layout.ClusterEgress)
		}
		meta.SetStatusCondition(&status.Conditions, cond)
		if !slices.Equal(status.AllocatedIPs, g.Status.AllocatedIPs) || !conditionsEqual(status.Conditions, g.Status.Conditions) {
			p.EgressStatus[g.Namespace+"/"+g.Name] = status
		}
	}
}

// podsOf says whose range g is, for messages.
func podsOf(g *v1alpha1.GlobalEgressIP) string {
	if g.Spec.PodSelector == nil {
		return "the pods of namespace " + g.Namespace
	}
	return fmt.Sprintf("the pods of namespace %s selected by %s", g.Namespace, metav1.FormatLabelSelector(g.Spec.PodSelector))
}

// PodEgress gives each pod its egress range by precedence: the GlobalEgressIP of its namespace
// whose podSelector selects it, else the one of its namespace without a podSelector, else none
// (the cluster's egress range applies). Of several at one level the oldest wins (then the
// name), so that a new object never takes pods from an existing one. Only allocated ranges,
// and pods with an IPv4 address of their own (not host-network ones, not finished ones), count.
func PodEgress(egress []v1alpha1.GlobalEgressIP, pods []corev1.Pod) []nat.PodEgress {
	type candidate struct {
		g        *v1alpha1.GlobalEgressIP
		selector labels.Selector // nil: the whole namespace
		r        ipam.Range
	}
	byNamespace := map[string][]candidate{}
	for i := range egress {
		g := &egress[i]
		r, ok := egressRange(g.Status.AllocatedIPs)
		if !ok || !meta.IsStatusConditionTrue(g.Status.Conditions, v1alpha1.GlobalEgressIPConditionAllocated) || !r.First.Is4() {
			continue
		}
		c := candidate{g: g, r: r}
		if g.Spec.PodSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(g.Spec.PodSelector)
			if err != nil {
				continue // Allocated=False, InvalidPodSelector: it selects nobody
			}
			c.selector = sel
		}
		byNamespace[g.Namespace] = append(byNamespace[g.Namespace], c)
	}
	for _, cs := range byNamespace {
		// Selectors before the namespace-wide range, each oldest first.
		slices.SortFunc(cs, func(a, b candidate) int {
			return cmp.Or(cmp.Compare(boolRank(a.selector == nil), boolRank(b.selector == nil)),
				a.g.CreationTimestamp.Compare(b.g.CreationTimestamp.Time), cmp.Compare(a.g.Name, b.g.Name))
		})
	}
	var out []nat.PodEgress
	seen := map[netip.Addr]bool{}
	for i := range pods {
		pod := &pods[i]
		cs := byNamespace[pod.Namespace]
		if len(cs) == 0 || pod.Spec.HostNetwork || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		ip, ok := podIPv4(pod)
		if !ok || seen[ip] {
			continue
		}
		for _, c := range cs {
			if c.selector == nil || c.selector.Matches(labels.Set(pod.Labels)) {
				seen[ip] = true
				out = append(out, nat.PodEgress{Pod: ip, Range: c.r})
				break
			}
		}
	}
	return out
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// podIPv4 is the pod's IPv4 address, if it has one.
func podIPv4(pod *corev1.Pod) (netip.Addr, bool) {
	for _, p := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(p.IP); err == nil && a.Is4() {
			return a, true
		}
	}
	if a, err := netip.ParseAddr(pod.Status.PodIP); err == nil && a.Is4() {
		return a, true
	}
	return netip.Addr{}, false
}
