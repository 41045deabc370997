package lab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/verify"
)

// verifyHealthy runs the built `octopus verify` (binary octopus) against the lab's two
// clusters: every check passes, answered by the other cluster's probe server, and the probe
// namespaces are gone afterwards. TestDiagnose runs it on its lab. It returns the report.
func verifyHealthy(ctx context.Context, t *testing.T, l *lab.Lab, octopus string) *verify.Report {
	c1, c2 := l.Network.Clusters[0].Name, l.Network.Clusters[1].Name
	// The first checks also wait out the tunnels' handshake and CoreDNS picking up the
	// clusterset.local forward (its reload plugin polls every 30 s).
	report, err := runVerify(ctx, t, l, octopus, 3*time.Minute)
	if err != nil || !report.Passed || len(report.Results) != 6 {
		t.Fatalf("verify on a healthy lab: %v, passed %v, %d results; want 6 passing checks", err, report.Passed, len(report.Results))
	}
	if want := []string{c1, c2}; !slices.Equal(report.Clusters, want) {
		t.Fatalf("clusters %v, want %v (the IDs joining gave them)", report.Clusters, want)
	}
	for _, r := range report.Results {
		if !strings.Contains(r.Detail, "answered by "+r.To+"/probe-server") || r.Latency.Duration <= 0 {
			t.Errorf("%s: detail %q, latency %s: want an answer from %s's probe server with a latency", r.Name(), r.Detail, r.Latency.Duration, r.To)
		}
	}
	return report
}

// verifyGatewayDown runs `octopus verify` once cluster1's gateway is stopped for good (with
// the userspace WireGuard driver its tunnel device dies with it): verify exits non-zero,
// naming exactly the pod-to-pod, ClusterSet IP and DNS checks between the two clusters, in
// both directions, each with the client tool's own reason.
func verifyGatewayDown(ctx context.Context, t *testing.T, l *lab.Lab, octopus string) {
	c1, c2 := l.Network.Clusters[0].Name, l.Network.Clusters[1].Name
	report, err := runVerify(ctx, t, l, octopus, 20*time.Second)
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || report.Passed {
		t.Fatalf("verify with %s's gateway down: %v, passed %v; want a non-zero exit", c1, err, report.Passed)
	}
	var failed []string
	for _, r := range report.Failed() {
		failed = append(failed, r.Name())
	}
	want := []string{
		"pod-to-pod " + c1 + "->" + c2, "clusterset-ip " + c1 + "->" + c2, "dns " + c1 + "->" + c2,
		"pod-to-pod " + c2 + "->" + c1, "clusterset-ip " + c2 + "->" + c1, "dns " + c2 + "->" + c1,
	}
	if !slices.Equal(failed, want) {
		t.Fatalf("failed checks %v, want %v", failed, want)
	}
	// Each failure says what the client's tool saw, not that verify cancelled it.
	for _, r := range report.Failed() {
		if !strings.Contains(r.Detail, "curl") || strings.Contains(r.Detail, "context deadline exceeded") {
			t.Errorf("%s: detail %q, want curl's reason", r.Name(), r.Detail)
		}
	}
	t.Logf("summary: %s", report.Summary())
}

// liveNamespaces lists the namespaces a command (verify, bench) created that are not being
// deleted, by their app.kubernetes.io/managed-by label.
func liveNamespaces(ctx context.Context, t *testing.T, kubeconfig, managedBy string) []string {
	t.Helper()
	list, err := clientset(t, kubeconfig).CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=" + managedBy})
	if err != nil {
		t.Fatalf("listing namespaces: %v", err)
	}
	var live []string
	for _, ns := range list.Items {
		if ns.DeletionTimestamp == nil && ns.Status.Phase != corev1.NamespaceTerminating {
			live = append(live, ns.Name)
		}
	}
	return live
}

// runVerify runs the built `octopus verify` (binary octopus) against the lab's two member
// clusters with checkTimeout per check, logs its progress and results, checks that its probe
// namespaces are gone and that a failure's error carries the summary, and returns its report.
func runVerify(ctx context.Context, t *testing.T, l *lab.Lab, octopus string, checkTimeout time.Duration) (*verify.Report, error) {
	t.Helper()
	c1, c2 := l.Network.Clusters[0].Name, l.Network.Clusters[1].Name
	start := time.Now()
	cmd := exec.CommandContext(ctx, octopus, "verify",
		"--kubeconfig", l.Env.Cluster(c1).Kubeconfig, "--kubeconfig", l.Env.Cluster(c2).Kubeconfig,
		"--check-timeout", checkTimeout.String(), "--ready-timeout", "2m", "-o", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	t.Logf("octopus verify took %.1fs, exit %v; progress:\n%s", time.Since(start).Seconds(), runErr, stderr.String())
	report := &verify.Report{}
	if err := json.Unmarshal(stdout.Bytes(), report); err != nil {
		t.Fatalf("octopus verify -o json: %v: %q (stderr %s)", err, stdout.String(), stderr.String())
	}
	for _, r := range report.Results {
		t.Logf("%-14s %s -> %s passed=%v %s (latency %s, %d attempts)", r.Check, r.From, r.To, r.Passed, r.Detail, r.Latency.Duration, r.Attempts)
	}
	// The namespace goes in both clusters however the run ended.
	for _, c := range []string{c1, c2} {
		if ns := liveNamespaces(ctx, t, l.Env.Cluster(c).Kubeconfig, "octopus-verify"); len(ns) > 0 {
			t.Errorf("%s still has verify namespaces not being deleted: %v", c, ns)
		}
	}
	if runErr != nil && !strings.Contains(stderr.String(), report.Summary()) {
		t.Errorf("the error does not carry the summary %q: %s", report.Summary(), stderr.String())
	}
	return report, runErr
}
