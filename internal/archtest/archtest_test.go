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
// modules): each rule must report exactly the imports planted there, and nothing of the
// packages that keep the rules (internal/datapath/route, internal/routeagent, internal/cli).
func TestRulesCatchViolations(t *testing.T) {
	module, pkgs, err := Load("testdata/violations")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range Check(module, pkgs, Rules) {
		got = append(got, v.String())
	}
	const mod = "github.com/octopus-mcs/octopus/"
	const operator = "the operator links neither the CLI nor the lab nor the CLI's tools: it runs in a cluster: "
	want := []string{
		"the API links no package of this repository: api/v1alpha1 imports " + mod + "internal/kube",
		"the data plane links no Kubernetes library: internal/datapath/tunnel imports k8s.io/client-go/rest",
		"the data plane links no Kubernetes library: internal/datapath/nat links sigs.k8s.io/controller-runtime/pkg/client",
		"the data plane links nothing of this repository but the data plane and pure address logic: internal/datapath/nat imports " + mod + "internal/kube",
		"pkg/crossdns links nothing internal, so that other CoreDNS builds can compile it in: pkg/crossdns imports " + mod + "internal/kube",
		"only the CLI, tests and hack/ import the lab: internal/gateway imports " + mod + "internal/lab",
		"daemons link no provisioning code: cmd/octopus-agent links " + mod + "internal/cluster",
		"daemons link no provisioning code: cmd/octopus-dns imports " + mod + "config/crd",
		"daemons link no provisioning code: cmd/octopus-ovn links " + mod + "internal/manifests/render",
		operator + "cmd/octopus-operator links " + mod + "internal/cli",
		operator + "cmd/octopus-operator links " + mod + "internal/diagnose",
		operator + "cmd/octopus-operator links " + mod + "internal/lab",
		operator + "internal/operator imports " + mod + "internal/cli",
		operator + "internal/operator imports " + mod + "internal/diagnose",
		operator + "internal/operator links " + mod + "internal/lab",
	}
	slices.Sort(want)
	wantFindings(t, "violations in the fixture", got, nil, want)
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
		{"...", mod + "/api/v1alpha1", true},
		{"...", mod, true},
		{"...", "k8s.io/api/core/v1", false},
		{"k8s.io/client-go/...", "k8s.io/client-go/rest", true},
		{"k8s.io/api/...", "k8s.io/apimachinery/pkg/types", false},
	} {
		if got := match(mod, tc.pattern, tc.path); got != tc.want {
			t.Errorf("match(%q, %q) = %t, want %t", tc.pattern, tc.path, got, tc.want)
		}
	}
}

// TestStaleRuleFails: a rule whose packages all moved away must fail rather than pass on
// nothing.
func TestStaleRuleFails(t *testing.T) {
	got := Check("example.com/m", []Package{{ImportPath: "example.com/m/internal/datapath/route"}},
		[]Rule{{Name: "r", Packages: []string{"internal/route"}, Forbidden: []string{"k8s.io/api/..."}}})
	if len(got) != 1 || !strings.Contains(got[0].String(), "no package matches internal/route") {
		t.Errorf("Check = %v, want the rule reported as matching nothing", got)
	}
}

// TestCommentsCiteRepositoryFiles: comments cite only files of the repository, files that
// exist, and sections docs/architecture.md has.
func TestCommentsCiteRepositoryFiles(t *testing.T) {
	bad, err := CheckCitations("../..")
	reportEach(t, bad, err)
}

func TestCheckCitationsCatchesBadOnes(t *testing.T) {
	got, err := CheckCitations("testdata/citations")
	wantFindings(t, "CheckCitations", got, err, []string{
		"internal/x/x.go:5 cites DESIGN, a document outside the repository",
		"internal/x/x.go:5 cites STYLE.md, a document outside the repository",
		"internal/x/x.go:5 cites docs/architecture.md §9, which has no such section",
		"internal/x/x.go:6 cites internal/x/gone.go, which does not exist",
	})
}

// TestCommandsOnlyWire: every cmd/* only parses flags and wires (cmds.go).
func TestCommandsOnlyWire(t *testing.T) {
	bad, err := CheckCommands("../..")
	reportEach(t, bad, err)
}

// TestCheckCommandsCatchesWork: testdata/commands/cmd/worker does what a command must not, each
// mark once; its _test.go file, which may, is left out.
func TestCheckCommandsCatchesWork(t *testing.T) {
	got, err := CheckCommands("testdata/commands")
	wantFindings(t, "CheckCommands", got, err, []string{
		"cmd/worker/main.go:16: sends on a channel",
		"cmd/worker/main.go:16: starts a goroutine",
		"cmd/worker/main.go:16: uses h.ListenAndServe (net/http serves or runs processes: call a package that does)",
		"cmd/worker/main.go:17: selects on channels",
		"cmd/worker/main.go:18: receives from a channel",
		"cmd/worker/main.go:20: sends on a channel",
		"cmd/worker/main.go:23: long has 42 statements besides flag definitions, more than 40: move its logic into a package",
	})
}

// reportEach fails the test once per finding of a check run on this repository, or at once
// when the check could not run.
func reportEach(t *testing.T, findings []string, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		t.Error(f)
	}
}

// wantFindings compares what a check found in a fixture with what was planted there, all of
// it and in order (the checks sort their findings).
func wantFindings(t *testing.T, check string, got []string, err error, want []string) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n%s\nwant:\n%s", check, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
