package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func TestVerifyValidate(t *testing.T) {
	valid := func() verifyOptions {
		return verifyOptions{checkTimeout: time.Second, workloadFlags: workloadFlags{kubeconfigs: []string{"a", "b"}, output: outputTable, timeout: time.Minute, readyTimeout: time.Second}}
	}
	testValidate(t, valid, []validateCase[verifyOptions]{
		{"valid", func(*verifyOptions) {}, ""},
		{"json", func(o *verifyOptions) { o.output = outputJSON }, ""},
		{"one cluster", func(o *verifyOptions) { o.kubeconfigs = o.kubeconfigs[:1] }, "pass --kubeconfig at least twice (got 1)"},
		{"same kubeconfig twice", func(o *verifyOptions) { o.kubeconfigs = []string{"a", "a"} }, "--kubeconfig a is given twice"},
		{"bad output", func(o *verifyOptions) { o.output = "yaml" }, `-o "yaml": want table or json`},
		{"bad namespace", func(o *verifyOptions) { o.namespace = "Not_A_Label" }, `--namespace "Not_A_Label"`},
		{"zero check timeout", func(o *verifyOptions) { o.checkTimeout = 0 }, "--check-timeout 0s: want a positive duration"},
	})
}

// TestVerifyWithoutProbes runs `octopus verify` and `octopus bench` against real API servers
// that have no nodes: a cluster that has not joined is refused before anything is created,
// and when the pods cannot become ready, or the run is interrupted, the namespace is deleted
// in every cluster. (The checks and measurements themselves are proven in the lab: TestDiagnose
// and TestDiagnose/cross-cluster/bench in internal/lab.)
func TestVerifyWithoutProbes(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east", "west", "lone")
	info, err := hub.Deploy(t.Context(), env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		t.Fatalf("deploying the hub: %v", err)
	}
	for _, name := range []string{"east", "west"} {
		cp := env.Cluster(name)
		if _, err := cluster.Join(t.Context(), cp.RESTConfig(), cluster.JoinOptions{BrokerInfo: info, ClusterID: name, PodCIDRs: []string{cp.PodCIDR.String()}}); err != nil {
			t.Fatalf("joining %s: %v", name, err)
		}
	}
	kc := func(name string) string { return env.Cluster(name).Kubeconfig }

	for _, command := range [][]string{{"verify"}, {"bench", "throughput"}} {
		t.Run(command[0]+": a cluster that has not joined is refused", func(t *testing.T) {
			var out, errOut bytes.Buffer
			cmd := NewRootCommand(IOStreams{Out: &out, ErrOut: &errOut})
			cmd.SetArgs(append(command, "--kubeconfig", kc("east"), "--kubeconfig", kc("lone"), "--namespace", "refused"))
			err := cmd.ExecuteContext(t.Context())
			if err == nil || !strings.Contains(err.Error(), kc("lone")) || !strings.Contains(err.Error(), "run `octopus join` there first") {
				t.Fatalf("%s with an unjoined cluster: %v, want an error naming it and `octopus join`", command[0], err)
			}
			ns := &corev1.Namespace{}
			if err := testenv.Client(t, env.Cluster("east").RESTConfig()).Get(t.Context(), client.ObjectKey{Name: "refused"}, ns); err == nil {
				t.Fatalf("east got namespace refused although %s refused to run", command[0])
			}
		})
	}

	tests := []struct {
		name      string
		command   []string
		namespace string
		args      []string
		cancel    time.Duration
		wantErr   string
	}{
		{"probes never ready", []string{"verify"}, "verify-notready", []string{"--ready-timeout", "4s"}, 0, "still not ready: pods east/probe-server (Pending)"},
		{"interrupted while waiting", []string{"verify"}, "verify-interrupted", nil, 3 * time.Second, "context canceled"},
		{"bench pods never ready", []string{"bench", "latency"}, "bench-notready", []string{"--ready-timeout", "4s"}, 0, "still not ready: pods east/bench-server (Pending)"},
		{"bench interrupted while waiting", []string{"bench", "throughput"}, "bench-interrupted", nil, 3 * time.Second, "context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name+": the namespace is deleted", func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tt.cancel > 0 {
				time.AfterFunc(tt.cancel, cancel)
			}
			var out, errOut bytes.Buffer
			cmd := NewRootCommand(IOStreams{Out: &out, ErrOut: &errOut})
			cmd.SetArgs(append(append(tt.command, "--kubeconfig", kc("east"), "--kubeconfig", kc("west"), "--namespace", tt.namespace), tt.args...))
			err := cmd.ExecuteContext(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("%s: %v, want an error containing %q; progress:\n%s", tt.command[0], err, tt.wantErr, errOut.String())
			}
			if !strings.Contains(errOut.String(), "Deleted namespace "+tt.namespace+" in east, west") {
				t.Errorf("progress does not report the namespace deleted:\n%s", errOut.String())
			}
			for _, name := range []string{"east", "west"} {
				ns := &corev1.Namespace{}
				err := testenv.Client(t, env.Cluster(name).RESTConfig()).Get(t.Context(), client.ObjectKey{Name: tt.namespace}, ns)
				if client.IgnoreNotFound(err) != nil {
					t.Fatal(err)
				}
				// Without a namespace controller the namespace stays Terminating; what matters
				// is that the command asked for its deletion.
				if err == nil && ns.DeletionTimestamp == nil {
					t.Errorf("%s: namespace %s was not deleted", name, tt.namespace)
				}
			}
		})
	}
}
