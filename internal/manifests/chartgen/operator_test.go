package chartgen

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"

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

// TestOperatorClusterRoleHoldsWhatItInstalls: the operator's role grants, verb by verb, every
// rule of every component role it installs and of its own markers' role, and neither
// escalate nor bind except where a component's role names the object (the hub's join
// identity binds octopus-cluster, so the operator must be able to install that rule).
func TestOperatorClusterRoleHoldsWhatItInstalls(t *testing.T) {
	role, err := OperatorClusterRole()
	if err != nil {
		t.Fatal(err)
	}
	covers := func(group, resource, verb, name string) bool {
		return slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) &&
				(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name))
		})
	}
	var want []rbacv1.PolicyRule
	for _, c := range append([]string{rbac.Operator}, InstalledComponents...) {
		roles, err := rbac.Load(c)
		if err != nil {
			t.Fatal(err)
		}
		if roles.ClusterRole != nil {
			want = append(want, roles.ClusterRole.Rules...)
		}
		for _, r := range roles.Roles {
			want = append(want, r.Rules...)
		}
	}
	hub, err := render.Hub(render.HubOptions{Namespace: "octopus-hub"})
	if err != nil {
		t.Fatal(err)
	}
	gateway, err := hubGatewayRoles()
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range slices.Concat(hub.Objects, gateway) {
		want = append(want, rulesOf(obj)...)
	}
	if len(want) < 50 {
		t.Fatalf("only %d rules gathered: the installed roles were not all read", len(want))
	}
	for _, r := range want {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					for _, n := range names {
						if !covers(g, res, v, n) {
							t.Errorf("the operator's role does not grant %s %s.%s %q, which it installs", v, res, g, n)
						}
					}
				}
			}
		}
	}
	for _, r := range role.Rules {
		if (slices.Contains(r.Verbs, "escalate") || slices.Contains(r.Verbs, "bind")) && len(r.ResourceNames) == 0 {
			t.Errorf("the operator's role may %v any %v: it could grant itself anything", r.Verbs, r.Resources)
		}
	}
}
