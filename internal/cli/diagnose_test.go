package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/diagnose"
)

func TestDiagnoseValidate(t *testing.T) {
	valid := func() diagnoseOptions {
		return diagnoseOptions{kubeconfigs: []string{"a"}, output: outputTable, checkTimeout: time.Second, requestTimeout: time.Second}
	}
	testValidate(t, valid, []validateCase[diagnoseOptions]{
		{"valid", func(*diagnoseOptions) {}, ""},
		{"hub only", func(o *diagnoseOptions) { o.kubeconfigs, o.hubKubeconfig = nil, "hub" }, ""},
		{"nothing", func(o *diagnoseOptions) { o.kubeconfigs = nil }, "nothing to diagnose"},
		{"twice", func(o *diagnoseOptions) { o.kubeconfigs = []string{"a", "a"} }, "--kubeconfig a is given twice"},
		{"bad output", func(o *diagnoseOptions) { o.output = "yaml" }, `-o "yaml": want table or json`},
		{"zero timeout", func(o *diagnoseOptions) { o.checkTimeout = 0 }, "want positive durations"},
	})
}

// TestDiagnoseCommands: `diagnose` has `all` and one subcommand per check, in the checks'
// each with the same flags.
func TestDiagnoseCommands(t *testing.T) {
	cmd := newDiagnoseCommand(IOStreams{Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}})
	var got []string
	for _, c := range cmd.Commands() {
		got = append(got, c.Name())
		for _, flag := range []string{"kubeconfig", "hub-kubeconfig", "check-timeout", "output"} {
			if c.Flags().Lookup(flag) == nil {
				t.Errorf("diagnose %s has no --%s", c.Name(), flag)
			}
		}
	}
	want := []string{"all"}
	for _, c := range diagnose.Checks() {
		want = append(want, c.Name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("subcommands %v, want %v", got, want)
	}
}

func TestGatherValidate(t *testing.T) {
	o := gatherOptions{kubeconfigs: []string{"a"}, outputDir: t.TempDir()}
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	o.outputDir = "/nonexistent/dir"
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--output-dir /nonexistent/dir: not a directory") {
		t.Fatalf("Validate: %v", err)
	}
}
