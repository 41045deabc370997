package chartgen

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/rbac"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
)

// InstalledComponents are the components whose generated roles the operator installs: the
// member chart's and the hub's (the ic-signer with hubConfig.interconnect).
var InstalledComponents = []string{
	rbac.Controller, rbac.Gateway, rbac.RouteAgent, rbac.DNS,
	rbac.OVNMaster, rbac.OVNNRI, rbac.ICMaster, rbac.ICSigner,
}

// OperatorRoles are the operator's roles: what its own code needs (config/rbac's operator
// roles, from internal/operator's markers) and every rule of every role it installs, the
// member chart's and the hub's: a component's ClusterRole's rules in the operator's
// ClusterRole, a component's Role's rules in the operator's Role of the same namespace
// (v1alpha1.DefaultHubNamespace stands for the hub's, which the operator chart's
// hub.namespace replaces).
//
// Why the union rather than "escalate" and "bind": the API server lets a user write a role or
// a binding only with the permissions it grants, unless the user may escalate or bind. With
// either, a compromised operator could grant itself anything (neither can be narrowed to a
// namespace, and escalate not even to a name on create: the API server checks it with the
// request's name). With the union, the most it can grant is what it holds, which is what the
// components run with, where they run.
func OperatorRoles() (*rbac.Roles, error) {
	own, err := rbac.Load(rbac.Operator)
	if err != nil {
		return nil, err
	}
	if own.ClusterRole == nil {
		return nil, fmt.Errorf("config/rbac/%s: no ClusterRole", rbac.Operator)
	}
	cluster := slices.Clone(own.ClusterRole.Rules)
	byNamespace := map[string][]rbacv1.PolicyRule{}
	for _, r := range own.Roles {
		byNamespace[r.Namespace] = slices.Clone(r.Rules)
	}
	installed := func(obj client.Object) error {
		switch r := obj.(type) {
		case *rbacv1.ClusterRole:
			cluster = append(cluster, r.Rules...)
		case *rbacv1.Role:
			ns := r.Namespace
			if ns == releaseNamespace {
				ns = v1alpha1.DefaultHubNamespace
			}
			if _, ok := byNamespace[ns]; !ok {
				return fmt.Errorf("role %s/%s: the operator installs it but has no Role in namespace %s; add a namespaced marker to internal/operator", r.Namespace, r.Name, ns)
			}
			byNamespace[ns] = append(byNamespace[ns], r.Rules...)
		}
		return nil
	}
	for _, c := range InstalledComponents {
		roles, err := rbac.Load(c)
		if err != nil {
			return nil, err
		}
		if roles.ClusterRole != nil {
			if err := installed(roles.ClusterRole); err != nil {
				return nil, err
			}
		}
		for _, r := range roles.Roles {
			if err := installed(r); err != nil {
				return nil, err
			}
		}
	}
	hub, err := render.Hub(render.HubOptions{Namespace: releaseNamespace})
	if err != nil {
		return nil, err
	}
	gateway, err := hubGatewayRoles()
	if err != nil {
		return nil, err
	}
	for _, obj := range slices.Concat(hub.Objects, gateway) {
		if err := installed(obj); err != nil {
			return nil, err
		}
	}

	out := &rbac.Roles{ClusterRole: own.ClusterRole.DeepCopy()}
	if out.ClusterRole.Rules, err = MergeRules(cluster); err != nil {
		return nil, err
	}
	for _, r := range own.Roles {
		role := r.DeepCopy()
		if role.Rules, err = MergeRules(byNamespace[r.Namespace]); err != nil {
			return nil, err
		}
		out.Roles = append(out.Roles, role)
	}
	return out, nil
}

// MergeRules returns rules as few rules granting exactly the same: the verbs of each API
// group, resource and list of names united, then the resources with the same verbs and names
// in one rule; sorted, so that the output is stable. A wildcard is refused: the union is
// meant to stay reviewable, and a "*" in a component's role is a mistake to fix there.
func MergeRules(rules []rbacv1.PolicyRule) ([]rbacv1.PolicyRule, error) {
	type target struct{ group, resource, names string }
	verbs := map[target]map[string]bool{}
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			return nil, fmt.Errorf("rule %v: non-resource URLs are not expected in a component's role", r)
		}
		for _, v := range slices.Concat(r.Verbs, r.APIGroups, r.Resources, r.ResourceNames) {
			if v == "*" {
				return nil, fmt.Errorf("rule %v: a wildcard would make the operator's role unbounded; name the groups, resources and verbs", r)
			}
		}
		names := strings.Join(slices.Sorted(slices.Values(r.ResourceNames)), ",")
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				t := target{g, res, names}
				if verbs[t] == nil {
					verbs[t] = map[string]bool{}
				}
				for _, v := range r.Verbs {
					verbs[t][v] = true
				}
			}
		}
	}
	// Regroup: one rule per API group, names and verb set, with its resources.
	type group struct{ group, names, verbs string }
	resources := map[group][]string{}
	for t, vs := range verbs {
		g := group{t.group, t.names, strings.Join(slices.Sorted(maps.Keys(vs)), ",")}
		resources[g] = append(resources[g], t.resource)
	}
	keys := slices.Collect(maps.Keys(resources))
	slices.SortFunc(keys, func(a, b group) int {
		return strings.Compare(a.group+"\x00"+a.names+"\x00"+a.verbs, b.group+"\x00"+b.names+"\x00"+b.verbs)
	})
	out := make([]rbacv1.PolicyRule, 0, len(keys))
	for _, k := range keys {
		r := rbacv1.PolicyRule{APIGroups: []string{k.group}, Resources: slices.Sorted(slices.Values(resources[k])), Verbs: strings.Split(k.verbs, ",")}
		if k.names != "" {
			r.ResourceNames = strings.Split(k.names, ",")
		}
		out = append(out, r)
	}
	return out, nil
}

// hubGatewayRoles are the roles of render.HubGateway, which the hub Fabric installs with the
// gateway; the options only fill what rendering requires.
func hubGatewayRoles() ([]client.Object, error) {
	return render.HubGateway(render.HubGatewayOptions{
		Namespace: releaseNamespace, Image: "octopus", Backend: "wireguard", ListenPort: 1, MetricsPort: 2,
		HealthCheckIP: "192.0.2.1",
	})
}
