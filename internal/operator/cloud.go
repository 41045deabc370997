package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// PreparedByAnnotation marks the nodes cloud preparation labelled as gateways, so that it
// unlabels only those: a label an administrator set stays.
const PreparedByAnnotation = "octopus.io/gateway-prepared-by"

const preparedBy = "octopus-operator"

// ErrProviderUnavailable is a provider this build cannot prepare nodes with.
var ErrProviderUnavailable = errors.New("provider unavailable")

// Provider prepares a cluster's gateway nodes: it chooses them, makes them gateway nodes
// (v1alpha1.GatewayNodeLabel) and reports each with the endpoint other clusters reach.
//
// eligible, when not empty, is joinConfig.gatewayNodeSelector: the gateway DaemonSet runs only
// on nodes it selects, so only those may be prepared. A node it no longer selects loses the
// preparation, which is how moving the gateway by joinConfig.gatewayNodeSelector alone moves
// the label and status.gatewayNodes with the pods.
type Provider interface {
	Prepare(ctx context.Context, cfg *v1alpha1.CloudPrepareConfig, eligible map[string]string) ([]v1alpha1.GatewayNode, error)
	// Unprepare undoes Prepare when the Fabric is deleted.
	Unprepare(ctx context.Context) error
}

// Providers are the providers of this build: generic (nodes prepared through the Kubernetes
// API). aws, gcp and azure need their cloud APIs (security groups, dedicated instances), which
// this build does not implement: they report ProviderUnavailable instead of pretending.
func Providers(c ctrl.Client) map[v1alpha1.CloudProvider]Provider {
	return map[v1alpha1.CloudProvider]Provider{
		v1alpha1.CloudProviderGeneric: &Generic{Client: c},
		v1alpha1.CloudProviderAWS:     unavailable(v1alpha1.CloudProviderAWS),
		v1alpha1.CloudProviderGCP:     unavailable(v1alpha1.CloudProviderGCP),
		v1alpha1.CloudProviderAzure:   unavailable(v1alpha1.CloudProviderAzure),
	}
}

type unavailable v1alpha1.CloudProvider

func (u unavailable) Prepare(context.Context, *v1alpha1.CloudPrepareConfig, map[string]string) ([]v1alpha1.GatewayNode, error) {
	return nil, fmt.Errorf("%w: preparing %s infrastructure (firewall rules for the tunnel port, gateway instances) needs the %s API, which this build of the operator does not implement; "+
		"prepare the gateway nodes yourself (label them %s=true, allow UDP 4500 to them) and remove cloudPrepareConfig, or use provider generic",
		ErrProviderUnavailable, string(u), strings.ToUpper(string(u)), v1alpha1.GatewayNodeLabel)
}

func (unavailable) Unprepare(context.Context) error { return nil }

// Generic prepares on-premises nodes: it labels the gateway nodes chosen by selector or by
// count. Opening the tunnel port in the node's host firewall is the gateway's own job when it
// starts on the node (a pod cannot program another node's nftables through the API): the
// provider asks for it through the gateway's configuration (gatewayConfig). Its RBAC on Nodes
// is among the member's (member.go).
type Generic struct {
	Client ctrl.Client
}

// Prepare labels the chosen nodes and unlabels the nodes it labelled before that are no longer
// chosen. By count, nodes that are gateways already come first, then by name, so that a
// reconcile does not move the gateway.
func (g *Generic) Prepare(ctx context.Context, cfg *v1alpha1.CloudPrepareConfig, eligible map[string]string) ([]v1alpha1.GatewayNode, error) {
	nodes := &corev1.NodeList{}
	if err := g.Client.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	chosen, err := choose(nodes.Items, cfg, eligible)
	if err != nil {
		return nil, err
	}
	var out []v1alpha1.GatewayNode
	for i := range nodes.Items {
		n := &nodes.Items[i]
		want := slices.Contains(chosen, n.Name)
		if want {
			out = append(out, v1alpha1.GatewayNode{Name: n.Name, Endpoint: endpoint(n)})
		}
		if err := g.label(ctx, n, want); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Unprepare removes the label from every node Prepare labelled.
func (g *Generic) Unprepare(ctx context.Context) error {
	nodes := &corev1.NodeList{}
	if err := g.Client.List(ctx, nodes); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	for i := range nodes.Items {
		if err := g.label(ctx, &nodes.Items[i], false); err != nil {
			return err
		}
	}
	return nil
}

// label makes n a gateway node or, if Prepare made it one, not; it writes only on a change.
func (g *Generic) label(ctx context.Context, n *corev1.Node, gateway bool) error {
	isGateway := n.Labels[v1alpha1.GatewayNodeLabel] == "true"
	ours := n.Annotations[PreparedByAnnotation] == preparedBy
	if gateway == isGateway && (gateway || !ours) {
		return nil // a gateway already, or neither a gateway nor ours
	}
	if !gateway && !ours {
		return nil // an administrator's gateway: not ours to unlabel
	}
	patch := ctrl.MergeFrom(n.DeepCopy())
	if gateway {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		if !isGateway {
			// Only a label this operator set is its to remove later.
			n.Annotations[PreparedByAnnotation] = preparedBy
		}
		n.Labels[v1alpha1.GatewayNodeLabel] = "true"
	} else {
		delete(n.Labels, v1alpha1.GatewayNodeLabel)
		delete(n.Annotations, PreparedByAnnotation)
	}
	if err := g.Client.Patch(ctx, n, patch); err != nil {
		return fmt.Errorf("labelling node %s: %w", n.Name, err)
	}
	return nil
}

// choose picks the gateway nodes among those eligible selects (all when empty): the ones
// cfg's selector selects, else cfg's count of them.
func choose(nodes []corev1.Node, cfg *v1alpha1.CloudPrepareConfig, eligible map[string]string) ([]string, error) {
	var within string
	if len(eligible) > 0 {
		sel := labels.SelectorFromSet(eligible)
		within = " of the nodes joinConfig.gatewayNodeSelector " + sel.String() + " selects"
		nodes = slices.DeleteFunc(slices.Clone(nodes), func(n corev1.Node) bool { return !sel.Matches(labels.Set(n.Labels)) })
	}
	if len(cfg.GatewayNodeSelector) > 0 {
		sel := labels.SelectorFromSet(cfg.GatewayNodeSelector)
		var out []string
		for _, n := range nodes {
			if sel.Matches(labels.Set(n.Labels)) {
				out = append(out, n.Name)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("cloudPrepareConfig.gatewayNodeSelector %s selects no node%s", sel, within)
		}
		return out, nil
	}
	count := 1
	if cfg.Gateways != nil {
		count = int(*cfg.Gateways)
	}
	candidates := slices.DeleteFunc(slices.Clone(nodes), func(n corev1.Node) bool { return n.Spec.Unschedulable })
	slices.SortFunc(candidates, func(a, b corev1.Node) int {
		ga, gb := a.Labels[v1alpha1.GatewayNodeLabel] == "true", b.Labels[v1alpha1.GatewayNodeLabel] == "true"
		if ga != gb {
			if ga {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(candidates) < count {
		return nil, fmt.Errorf("cloudPrepareConfig.gateways is %d, but only %d schedulable node(s) exist%s", count, len(candidates), within)
	}
	out := make([]string, count)
	for i := range out {
		out[i] = candidates[i].Name
	}
	return out, nil
}

// endpoint is the address other gateways tunnel to, as the gateway picks it without its
// --endpoint-ip flag (kube.NodeEndpoint), or nothing when the Node has none.
func endpoint(n *corev1.Node) string {
	ip, err := kube.NodeEndpoint(n)
	if err != nil {
		return ""
	}
	return ip.String()
}

// reconcileCloud prepares the gateway nodes and reports it.
func (r *Reconciler) reconcileCloud(ctx context.Context, f *v1alpha1.Fabric, st *v1alpha1.FabricStatus) bool {
	cfg := f.Spec.CloudPrepareConfig
	p, ok := r.providers()[cfg.Provider]
	if !ok {
		set(f, st, v1alpha1.FabricCloudPrepared, false, ReasonProviderUnavailable, "cloudPrepareConfig.provider %q is unknown", cfg.Provider)
		return false
	}
	var eligible map[string]string
	if jc := f.Spec.JoinConfig; jc != nil {
		eligible = jc.GatewayNodeSelector
	}
	nodes, err := p.Prepare(ctx, cfg, eligible)
	switch {
	case errors.Is(err, ErrProviderUnavailable):
		set(f, st, v1alpha1.FabricCloudPrepared, false, ReasonProviderUnavailable, "%v", err)
		return false
	case err != nil:
		set(f, st, v1alpha1.FabricCloudPrepared, false, "PrepareFailed", "%v", err)
		return false
	}
	st.GatewayNodes = nodes
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name + " (" + n.Endpoint + ")"
	}
	set(f, st, v1alpha1.FabricCloudPrepared, true, "Prepared", "gateway node(s): %s", strings.Join(names, ", "))
	return true
}

func (r *Reconciler) unprepare(ctx context.Context) error {
	for _, p := range r.providers() {
		if err := p.Unprepare(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reconciler) providers() map[v1alpha1.CloudProvider]Provider {
	if r.Providers != nil {
		return r.Providers
	}
	return Providers(r.Client)
}

// gatewayConfig is what cp's provider asks of the gateways, as member chart config keys
// (OCTOPUS_<FLAG>, cmd/octopus-agent/env.go). generic has each gateway accept its tunnel port in
// its node's nftables input hook (internal/datapath/hostfirewall, which says what that cannot
// override); the cloud providers would open it in the cloud's security groups instead.
func gatewayConfig(cp *v1alpha1.CloudPrepareConfig) map[string]any {
	if cp == nil || cp.Provider != v1alpha1.CloudProviderGeneric {
		return nil
	}
	return map[string]any{"OCTOPUS_OPEN_HOST_FIREWALL": "true"}
}
