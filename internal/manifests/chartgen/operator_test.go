package chartgen

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/rbac"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
)

func TestMergeRules(t *testing.T) {
	rule := func(groups, resources, verbs, names string) rbacv1.PolicyRule {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		return rbacv1.PolicyRule{APIGroups: strings.Split(groups, ","), Resources: split(resources), Verbs: split(verbs), ResourceNames: split(names)}
	}
	tests := []struct {
		name    string
		in      []rbacv1.PolicyRule
		want    []rbacv1.PolicyRule
		wantErr string
	}{
		{
			name: "verbs of one resource united, resources with the same verbs grouped",
			in: []rbacv1.PolicyRule{
				rule("", "configmaps,services", "get", ""),
				rule("", "configmaps", "list,get", ""),
				rule("", "services", "list", ""),
				rule("apps", "deployments", "list", ""),
				rule("apps", "deployments", "get", ""),
			},
			want: []rbacv1.PolicyRule{
				rule("", "configmaps,services", "get,list", ""),
				rule("apps", "deployments", "get,list", ""),
			},
		},
		{
			name: "a rule for named objects stays apart from the resource's other rules",
			in: []rbacv1.PolicyRule{
				rule("", "secrets", "get", "octopus-hub"),
				rule("", "secrets", "list", ""),
				rule("", "secrets", "update", "octopus-hub"),
			},
			want: []rbacv1.PolicyRule{
				rule("", "secrets", "list", ""),
				rule("", "secrets", "get,update", "octopus-hub"),
			},
		},
		{
			name:    "a wildcard verb is refused",
			in:      []rbacv1.PolicyRule{rule("", "pods", "*", "")},
			wantErr: "wildcard",
		},
		{
			name:    "a wildcard resource is refused",
			in:      []rbacv1.PolicyRule{rule("apps", "*", "get", "")},
			wantErr: "wildcard",
		},
		{
			name:    "non-resource URLs are refused",
			in:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
			wantErr: "non-resource",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MergeRules(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("MergeRules error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("MergeRules (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOperatorRolesHoldWhatTheyInstall: the operator's roles grant, verb by verb, every rule
// of every component role it installs (a ClusterRole's cluster-wide, a Role's in its
// namespace) and of its own markers' roles, and neither escalate nor bind on unnamed roles.
func TestOperatorRolesHoldWhatTheyInstall(t *testing.T) {
	roles, err := OperatorRoles()
	if err != nil {
		t.Fatal(err)
	}
	granted := map[string][]rbacv1.PolicyRule{"": roles.ClusterRole.Rules}
	for _, r := range roles.Roles {
		granted[r.Namespace] = r.Rules
	}
	covers := func(ns, group, resource, verb, name string) bool {
		for _, scope := range []string{"", ns} {
			if slices.ContainsFunc(granted[scope], func(r rbacv1.PolicyRule) bool {
				return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) &&
					(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name))
			}) {
				return true
			}
		}
		return false
	}
	type scoped struct {
		ns    string
		rules []rbacv1.PolicyRule
	}
	var want []scoped
	for _, c := range append([]string{rbac.Operator}, InstalledComponents...) {
		roles, err := rbac.Load(c)
		if err != nil {
			t.Fatal(err)
		}
		if roles.ClusterRole != nil {
			want = append(want, scoped{"", roles.ClusterRole.Rules})
		}
		for _, r := range roles.Roles {
			want = append(want, scoped{r.Namespace, r.Rules})
		}
	}
	hub, err := render.Hub(render.HubOptions{Namespace: v1alpha1.DefaultHubNamespace})
	if err != nil {
		t.Fatal(err)
	}
	gateway, err := render.HubGateway(render.HubGatewayOptions{Namespace: v1alpha1.DefaultHubNamespace, Image: "octopus",
		Backend: "wireguard", ListenPort: 1, MetricsPort: 2, HealthCheckIP: "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range slices.Concat(hub.Objects, gateway) {
		switch r := obj.(type) {
		case *rbacv1.ClusterRole:
			want = append(want, scoped{"", r.Rules})
		case *rbacv1.Role:
			want = append(want, scoped{r.Namespace, r.Rules})
		}
	}
	if len(want) < 15 {
		t.Fatalf("only %d roles gathered: the installed roles were not all read", len(want))
	}
	for _, w := range want {
		for _, r := range w.rules {
			names := r.ResourceNames
			if len(names) == 0 {
				names = []string{""}
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						for _, n := range names {
							if !covers(w.ns, g, res, v, n) {
								t.Errorf("the operator's roles do not grant %s %s.%s %q in namespace %q, which it installs", v, res, g, n, w.ns)
							}
						}
					}
				}
			}
		}
	}
	for scope, rules := range granted {
		for _, r := range rules {
			if (slices.Contains(r.Verbs, "escalate") || slices.Contains(r.Verbs, "bind")) && len(r.ResourceNames) == 0 {
				t.Errorf("the operator's role in %q may %v any %v: it could grant itself anything", scope, r.Verbs, r.Resources)
			}
		}
	}
	// Secrets never cluster-wide.
	for _, r := range roles.ClusterRole.Rules {
		if slices.Contains(r.Resources, "secrets") && len(r.ResourceNames) == 0 {
			t.Errorf("the operator's ClusterRole grants %v on every Secret", r.Verbs)
		}
	}
}
