package operator

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// TestRolloutVerdict: a rollout is finished only when the controller saw the latest spec,
// every pod is updated and available and no old pod is left; the message names the workload
// and the count that is short.
func TestRolloutVerdict(t *testing.T) {
	gw := func(change func(*rollout)) rollout {
		r := rollout{kind: "daemonset", name: "octopus-gateway", generation: 3, observed: 3, desired: 2, updated: 2, available: 2, pods: 2}
		change(&r)
		return r
	}
	for _, tc := range []struct {
		name    string
		r       rollout
		done    bool
		message string
	}{
		{"finished", gw(func(*rollout) {}), true, ""},
		{"controller behind the spec", gw(func(r *rollout) { r.observed = 2 }), false, "daemonset octopus-gateway: its controller has not seen generation 3 yet (observed 2)"},
		{"one of two updated", gw(func(r *rollout) { r.updated = 1 }), false, "daemonset octopus-gateway 1/2 updated"},
		{"updated, not available yet", gw(func(r *rollout) { r.available = 1 }), false, "daemonset octopus-gateway 1/2 available"},
		{"the old node still runs one (gateway moved)", gw(func(r *rollout) { r.misscheduled = 1 }), false, "1 pod(s) on nodes no longer selected"},
		{"an old pod terminating", gw(func(r *rollout) { r.terminating = 1 }), false, "daemonset octopus-gateway: 1 old pod(s) terminating"},
		{"an old pod still running beside the new ones", gw(func(r *rollout) { r.pods = 3 }), false, "3 pod(s) for 2 desired"},
		{"nothing to run (no node selected)", rollout{kind: "daemonset", name: "octopus-gateway", generation: 1, observed: 1}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, msg := tc.r.verdict()
			if done != tc.done || !strings.Contains(msg, tc.message) || (tc.done && msg != "") {
				t.Errorf("verdict = %v, %q; want %v, containing %q", done, msg, tc.done, tc.message)
			}
		})
	}
}

// TestChooseWithinJoinSelector: with joinConfig.gatewayNodeSelector, only the nodes it selects
// may be gateway nodes, so changing it alone moves the gateway (issue 29's half-moved gateway).
func TestChooseWithinJoinSelector(t *testing.T) {
	node := func(name string, gateway bool) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
		if gateway {
			n.Labels[v1alpha1.GatewayNodeLabel] = "true"
		}
		return n
	}
	one := int32(1)
	byCount := &v1alpha1.CloudPrepareConfig{Provider: v1alpha1.CloudProviderGeneric, Gateways: &one}
	nodes := []corev1.Node{node("a", true), node("b", false), node("c", false)}
	for _, tc := range []struct {
		name     string
		cfg      *v1alpha1.CloudPrepareConfig
		eligible map[string]string
		want     []string
		err      string
	}{
		{"no join selector: the gateway stays where it is", byCount, nil, []string{"a"}, ""},
		{"join selector names another node: the gateway moves there", byCount, map[string]string{"kubernetes.io/hostname": "c"}, []string{"c"}, ""},
		{"join selector names the current node", byCount, map[string]string{"kubernetes.io/hostname": "a"}, []string{"a"}, ""},
		{"join selector selects nothing", byCount, map[string]string{"kubernetes.io/hostname": "z"}, nil, "only 0 schedulable node(s) exist of the nodes joinConfig.gatewayNodeSelector kubernetes.io/hostname=z selects"},
		{"cloud selector within the join selector", &v1alpha1.CloudPrepareConfig{Provider: v1alpha1.CloudProviderGeneric, GatewayNodeSelector: map[string]string{"kubernetes.io/hostname": "b"}},
			map[string]string{"kubernetes.io/hostname": "c"}, nil, "selects no node of the nodes joinConfig.gatewayNodeSelector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := choose(nodes, tc.cfg, tc.eligible)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("choose = %v, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("choose = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
