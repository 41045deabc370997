package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentDoesNotLinkLibovsdb keeps the OVN client out of octopus-agent, the reason this
// binary exists: the agent runs on every cluster, secondary addressing or not.
func TestAgentDoesNotLinkLibovsdb(t *testing.T) {
	deps := func(pkg string) string {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		return string(out)
	}
	const libovsdb = "github.com/ovn-kubernetes/libovsdb"
	if !strings.Contains(deps("github.com/octopus-mcs/octopus/cmd/octopus-ovn"), libovsdb) {
		t.Fatalf("octopus-ovn does not depend on %s: the check below would prove nothing", libovsdb)
	}
	for _, line := range strings.Split(deps("github.com/octopus-mcs/octopus/cmd/octopus-agent"), "\n") {
		if strings.HasPrefix(line, libovsdb) {
			t.Errorf("octopus-agent links %s", line)
		}
	}
}
