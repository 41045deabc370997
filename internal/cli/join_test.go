package cli

import (
	"io"
	"strings"
	"testing"
)

// TestJoinAgentDefault: `octopus join` installs the member chart unless told otherwise, and the
// help says the process mode is for development (issue 16: running the agent as a local
// process stays only as an explicit development flag).
func TestJoinAgentDefault(t *testing.T) {
	cmd := newJoinCommand(IOStreams{Out: io.Discard, ErrOut: io.Discard})
	f := cmd.Flags().Lookup("agent")
	if f == nil {
		t.Fatal("join has no --agent flag")
	}
	if f.DefValue != agentCharts {
		t.Errorf("join --agent defaults to %q, want %q", f.DefValue, agentCharts)
	}
	if err := cmd.ParseFlags([]string{"--cluster-id", "east"}); err != nil {
		t.Fatal(err)
	}
	if got := f.Value.String(); got != agentCharts {
		t.Errorf("join without --agent runs the agent as %q, want %q", got, agentCharts)
	}
	if !strings.Contains(f.Usage, "process (development only") || !strings.Contains(cmd.Long, "--agent process is for development only") {
		t.Errorf("join's help does not mark --agent process as development only:\n%s\n%s", f.Usage, cmd.Long)
	}
}
