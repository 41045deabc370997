package archtest

import (
	"slices"
	"strings"
	"testing"
)

// TestRepositoryFollowsTheRules checks this module against Rules.
func TestRepositoryFollowsTheRules(t *testing.T) {
	module, pkgs, err := Load("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range Check(module, pkgs, Rules) {
		t.Error(v)
	}
}

// TestRulesCatchViolations checks Rules against testdata/violations, a module with the same
// path as this one whose packages break every rule (with stand-ins for the Kubernetes
// modules): each rule must report exactly the imports planted there.
func TestRulesCatchViolations(t *testing.T) {
	module, pkgs, err := Load("testdata/violations")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range Check(module, pkgs, Rules) {
		got = append(got, v.String())
	}
	want := []string{
		"daemons link no provisioning code: cmd/octopus-agent links github.com/octopus-mcs/octopus/internal/cluster",
		"daemons link no provisioning code: cmd/octopus-dns imports github.com/octopus-mcs/octopus/config/crd",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("violations in the fixture:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestMatch(t *testing.T) {
	const mod = "example.com/m"
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"internal/lab", mod + "/internal/lab", true},
		{"internal/lab", mod + "/internal/lab/labnet", false},
		{"internal/lab/...", mod + "/internal/lab/labnet", true},
		{"internal/lab/...", mod + "/internal/lab", true},
		{"internal/lab/...", mod + "/internal/labx", false},
		{"internal/...", "internal/abi", false}, // the standard library's internal packages
		{"k8s.io/client-go/...", "k8s.io/client-go/rest", true},
		{"k8s.io/api/...", "k8s.io/apimachinery/pkg/types", false},
	} {
		if got := match(mod, tc.pattern, tc.path); got != tc.want {
			t.Errorf("match(%q, %q) = %t, want %t", tc.pattern, tc.path, got, tc.want)
		}
	}
}
