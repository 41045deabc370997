package rbac

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestLoad decodes every component's generated RBAC: each grants something, only under its own
// name, and no component may touch Secrets beyond the credential's.
func TestLoad(t *testing.T) {
	for _, c := range append(slices.Clone(Components), OVNMaster) {
		t.Run(c, func(t *testing.T) {
			r, err := Load(c)
			if err != nil {
				t.Fatal(err)
			}
			var rules []rbacv1.PolicyRule
			if r.ClusterRole != nil {
				if r.ClusterRole.Name != "octopus-"+c {
					t.Errorf("ClusterRole %q, want octopus-%s", r.ClusterRole.Name, c)
				}
				rules = append(rules, r.ClusterRole.Rules...)
			}
			for _, role := range r.Roles {
				if role.Name != "octopus-"+c || role.Namespace == "" {
					t.Errorf("Role %s/%s, want octopus-%s in a namespace", role.Namespace, role.Name, c)
				}
				rules = append(rules, role.Rules...)
			}
			if len(rules) == 0 {
				t.Fatal("no rules")
			}
			for _, rule := range rules {
				for _, res := range rule.Resources {
					if res == "secrets" && len(rule.ResourceNames) == 0 {
						t.Errorf("rule %+v grants every Secret", rule)
					}
				}
			}
		})
	}
	if _, err := Load("nonexistent"); err == nil {
		t.Error("Load of an unknown component: no error")
	}
}
