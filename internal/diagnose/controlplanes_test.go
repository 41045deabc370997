package diagnose_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/diagnose"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func init() {
	// The controller-runtime client logs through this; tests report through t instead.
	log.SetLogger(logr.Discard())
}

// TestAgainstControlPlanes runs diagnose against real API servers: a hub and two joined
// clusters without nodes, agents or gateways. It checks what the APIs alone prove (the
// credentials, the registration, the clock measured to a few milliseconds) and what a set
// with nothing running is told, then revokes one cluster's credential and stops the hub.
func TestAgainstControlPlanes(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east", "west")
	info, err := hub.Deploy(t.Context(), env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		t.Fatalf("deploying the hub: %v", err)
	}
	var targets []diagnose.Target
	for _, id := range []string{"east", "west"} {
		cp := env.Cluster(id)
		if _, err := cluster.Join(t.Context(), cp.RESTConfig(), cluster.JoinOptions{BrokerInfo: info, ClusterID: id, PodCIDRs: []string{cp.PodCIDR.String()}}); err != nil {
			t.Fatalf("joining %s: %v", id, err)
		}
		targets = append(targets, diagnose.Target{Config: cp.RESTConfig(), Source: cp.Kubeconfig})
	}
	run := func(t *testing.T, checks ...string) *diagnose.Report {
		t.Helper()
		r, err := diagnose.Run(t.Context(), diagnose.Options{Clusters: targets, Checks: checks})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		_ = diagnose.Render(&b, r)
		t.Logf("diagnose %v:\n%s", checks, b.String())
		return r
	}
	expect := func(t *testing.T, r *diagnose.Report, check, cluster string, severity diagnose.Severity, message, fix string) {
		t.Helper()
		if !slices.ContainsFunc(r.Findings, func(f diagnose.Finding) bool {
			return f.Check == check && f.Cluster == cluster && f.Severity == severity && strings.Contains(f.Message, message) && strings.Contains(f.Fix, fix)
		}) {
			t.Errorf("no %s finding of check %s for %q with %q and fix %q", severity, check, cluster, message, fix)
		}
	}

	t.Run("joined, nothing running", func(t *testing.T) {
		r := run(t)
		if r.Elapsed.Duration > 5*time.Second {
			t.Errorf("diagnose all took %s, want well under 10 s", r.Elapsed)
		}
		for _, id := range []string{"east", "west"} {
			expect(t, r, "versions", id, diagnose.SeverityOK, "Kubernetes 1.37", "")
			expect(t, r, "hub-access", id, diagnose.SeverityOK, "accepts the cluster's credential", "")
			expect(t, r, "registration", id, diagnose.SeverityOK, "registered as "+id, "")
			expect(t, r, "registration", id, diagnose.SeverityOK, "registered service CIDRs "+env.Cluster(id).ServiceCIDR.String()+", as the cluster has them", "")
			// No pod records the cluster-wide pod CIDR here, and there are no nodes.
			expect(t, r, "registration", id, diagnose.SeverityInfo, "registered pod CIDRs "+env.Cluster(id).PodCIDR.String()+"; the cluster does not record", "")
			// Every API server of this test runs on this machine's clock.
			expect(t, r, "clock-skew", id, diagnose.SeverityOK, "the hub's (±", "")
			expect(t, r, "heartbeat", id, diagnose.SeverityError, "the hub has no heartbeat from "+id, "octopus-agent controller")
			expect(t, r, "gateway", id, diagnose.SeverityError, "no gateway was ever elected", "octopus-agent gateway")
			expect(t, r, "dns", id, diagnose.SeverityInfo, "has no ConfigMap kube-system/coredns", "")
			expect(t, r, "dns", id, diagnose.SeverityError, "octopus-dns has no ready endpoint", "describe deployment octopus-dns")
			expect(t, r, "kube-proxy", id, diagnose.SeverityInfo, "does not record kube-proxy's mode", "")
		}
		expect(t, r, "versions", diagnose.HubName, diagnose.SeverityOK, "Kubernetes 1.37", "")
		expect(t, r, "cidr-overlap", "", diagnose.SeverityOK, "the 2 clusters with direct addressing share no pod or service addresses", "")
		if !r.Failed() {
			t.Error("a set without agents and gateways passes")
		}
	})

	t.Run("credential revoked", func(t *testing.T) {
		hubc, err := client.New(env.Cluster("hub").RESTConfig(), client.Options{Scheme: kube.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: info.Namespace, Name: v1alpha1.ClusterServiceAccount("west")}}
		if err := hubc.Delete(t.Context(), sa); err != nil {
			t.Fatal(err)
		}
		// The garbage collector deletes the RoleBinding the ServiceAccount owns at once (a 403
		// meanwhile); the API server refuses the token once its cache lost the ServiceAccount.
		deadline := time.Now().Add(30 * time.Second)
		for {
			r := run(t, "hub-access")
			if slices.ContainsFunc(r.Findings, func(f diagnose.Finding) bool {
				return f.Cluster == "west" && strings.Contains(f.Message, "401 Unauthorized")
			}) {
				expect(t, r, "hub-access", "west", diagnose.SeverityError, "rejects the credential (401 Unauthorized): it was revoked",
					"re-run `octopus join BROKER-INFO --cluster-id west --kubeconfig "+env.Cluster("west").Kubeconfig+"`")
				expect(t, r, "hub-access", "east", diagnose.SeverityOK, "accepts", "")
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("west's revoked credential is still accepted after 30s")
			}
			time.Sleep(time.Second)
		}
	})

	t.Run("hub stopped", func(t *testing.T) {
		hubCP := env.Cluster("hub")
		if err := hubCP.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := hubCP.StartAPIServer(ctx); err != nil {
				t.Errorf("starting the hub's API server again: %v", err)
			}
		}()
		r := run(t)
		if r.Elapsed.Duration > 5*time.Second {
			t.Errorf("diagnose all with the hub down took %s", r.Elapsed)
		}
		expect(t, r, "hub-access", "east", diagnose.SeverityError, "does not answer from this machine", "start the hub's API server")
		expect(t, r, "heartbeat", "east", diagnose.SeverityError, "not checked", "octopus diagnose hub-access")
		expect(t, r, "versions", "east", diagnose.SeverityOK, "Kubernetes", "")
	})
}
