package verify_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
	"github.com/octopus-mcs/octopus/internal/testenv"
	"github.com/octopus-mcs/octopus/internal/verify"
)

func init() { log.SetLogger(logr.Discard()) }

// TestVerifyAddressing runs verify against real API servers without nodes, the test playing
// the kubelet (probe pods reported ready) and the ovnmaster (east's probe server gets a net1
// address, west's the reason it has none), with no agents: what it proves is what verify
// decides before any packet flows. east and west joined with secondary addressing, north
// with direct; west's and north's hub credentials are deleted, so verify learns east's
// addressing from the hub, west's from its probe server's annotations and assumes north's.
// Then: every check between north and the others fails at once with AddressingMismatch;
// every check towards west fails at once saying its probe server has no net1 address and
// why; west's client requests east's server at its net1 address and looks for east's probe
// service on the secondary network's way (the import, then DNS), which, with no agents,
// fails after trying. The real network is the lab's (docs/architecture.md §6f).
func TestVerifyAddressing(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east", "west", "north")
	info, err := hub.Deploy(t.Context(), env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		t.Fatalf("deploying the hub: %v", err)
	}
	addressing := map[string]v1alpha1.Addressing{"east": v1alpha1.AddressingSecondary, "west": v1alpha1.AddressingSecondary, "north": v1alpha1.AddressingDirect}
	clients := map[string]client.Client{}
	var clusters []verify.Cluster
	for _, name := range []string{"east", "west", "north"} {
		cp := env.Cluster(name)
		if _, err := cluster.Join(t.Context(), cp.RESTConfig(), cluster.JoinOptions{
			BrokerInfo: info, ClusterID: name, PodCIDRs: []string{cp.PodCIDR.String()}, Addressing: addressing[name],
		}); err != nil {
			t.Fatalf("joining %s: %v", name, err)
		}
		clients[name] = testenv.Client(t, cp.RESTConfig())
		clusters = append(clusters, verify.Cluster{Config: cp.RESTConfig(), Source: name})
	}
	for _, name := range []string{"west", "north"} {
		cred := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.CredentialSecretName}}
		if err := clients[name].Delete(t.Context(), cred); err != nil {
			t.Fatalf("deleting %s's hub credential: %v", name, err)
		}
	}

	const ns = "verify-addressing"
	const westReason = "the secondary block 10.113.0.0/16 is exhausted"
	eastNet1 := netip.MustParseAddr("10.112.0.5")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	kubelet := make(chan error, 1)
	go func() {
		kubelet <- playKubelet(ctx, clients, ns, map[string]map[string]string{
			"east": {podnet.NetworkStatusAnnotation: mustSet(t, eastNet1)},
			"west": {podnet.ErrorAnnotation: westReason},
		})
	}()

	var progress strings.Builder
	report, err := verify.Run(ctx, verify.Options{
		Clusters: clusters, Namespace: ns, CheckTimeout: 2 * time.Second, ReadyTimeout: 20 * time.Second, Progress: &progress,
	})
	cancel()
	if kerr := <-kubelet; kerr != nil {
		t.Fatalf("playing the kubelet: %v", kerr)
	}
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatalf("verify.Run: %v", err)
	}

	wantAddressing := []verify.ClusterAddressing{
		{Cluster: "east", Addressing: v1alpha1.AddressingSecondary, Source: verify.SourceHub},
		{Cluster: "west", Addressing: v1alpha1.AddressingSecondary, Source: verify.SourceProbe},
		{Cluster: "north", Addressing: v1alpha1.AddressingDirect, Source: verify.SourceAssumed},
	}
	if fmt.Sprint(report.Addressing) != fmt.Sprint(wantAddressing) {
		t.Errorf("addressing = %v, want %v", report.Addressing, wantAddressing)
	}
	if want := 6 * len(verify.Checks); len(report.Results) != want {
		t.Fatalf("%d results, want %d", len(report.Results), want)
	}
	if report.Passed {
		t.Error("the report passed")
	}
	type expect struct {
		checks       []verify.Check
		detail       string
		notAttempted bool
	}
	noNet1 := "pod " + ns + "/probe-server has no address on the secondary network: " + westReason
	want := map[string][]expect{
		"east->west":  {{verify.SecondaryChecks, noNet1, true}},
		"east->north": {{verify.SecondaryChecks, "AddressingMismatch: east uses secondary addressing and north direct addressing", true}},
		"north->east": {{verify.Checks, "AddressingMismatch: north uses direct addressing and east secondary addressing", true}},
		"north->west": {{verify.Checks, "AddressingMismatch: north uses direct addressing and west secondary addressing", true}},
		"west->north": {{verify.SecondaryChecks, "AddressingMismatch: west uses secondary addressing and north direct", true}},
		"west->east": {
			{[]verify.Check{verify.CheckPodToPod}, "requesting " + eastNet1.String() + ":8080: ", false},
			{[]verify.Check{verify.CheckSecondaryService}, "not imported: west has no ServiceImport " + ns + "/probe-east", false},
			{[]verify.Check{verify.CheckDNS}, "resolving probe-east." + ns + ".svc.clusterset.local: ", false},
		},
	}
	got := map[string][]verify.Result{}
	for _, r := range report.Results {
		got[r.From+"->"+r.To] = append(got[r.From+"->"+r.To], r)
	}
	for pair, exps := range want {
		var checks []verify.Check
		for _, e := range exps {
			checks = append(checks, e.checks...)
		}
		res := got[pair]
		if len(res) != len(checks) {
			t.Errorf("%s: %d results, want %d", pair, len(res), len(checks))
			continue
		}
		i := 0
		for _, e := range exps {
			for _, c := range e.checks {
				r := res[i]
				i++
				if r.Check != c || r.Passed || !strings.Contains(r.Detail, e.detail) || (r.Attempts == 0) != e.notAttempted {
					t.Errorf("%s: %s passed=%v attempts=%d %q; want %s failed, attempted=%v, with %q", pair, r.Check, r.Passed, r.Attempts, r.Detail, c, !e.notAttempted, e.detail)
				}
			}
		}
	}
	// A mismatch says when an addressing was only assumed.
	for _, pair := range []string{"north->east", "east->north", "north->west", "west->north"} {
		for _, r := range got[pair] {
			if !strings.Contains(r.Detail, "(north's addressing is assumed: the hub could not be read, and its probe server is not on the secondary network)") {
				t.Errorf("%s: %q does not say north's addressing is assumed", r.Name(), r.Detail)
			}
		}
	}
	// The mismatch and the missing address fail at once, not after a timeout.
	for _, r := range report.Results {
		if r.Attempts == 0 && r.Elapsed.Duration != 0 {
			t.Errorf("%s: not attempted but took %s", r.Name(), r.Elapsed.Duration)
		}
	}
	for name, c := range clients {
		n := &corev1.Namespace{}
		err := c.Get(t.Context(), client.ObjectKey{Name: ns}, n)
		if client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		if err == nil && n.DeletionTimestamp == nil {
			t.Errorf("%s: namespace %s was not deleted", name, ns)
		}
	}
}

func mustSet(t *testing.T, ip netip.Addr) string {
	t.Helper()
	e := podnet.Entry(ip, "0a:58:0a:70:00:05")
	v, err := podnet.Set("", &e)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// playKubelet reports the probe pods of namespace ns ready in every cluster as they appear,
// the server with the annotations of its cluster (what the ovnmaster would have written
// before the pod started), until ctx ends.
func playKubelet(ctx context.Context, clients map[string]client.Client, ns string, annotations map[string]map[string]string) error {
	done := map[string]bool{}
	for {
		for name, c := range clients {
			for podIndex, pod := range []string{"probe-server", "probe-client"} {
				key := name + "/" + pod
				if done[key] {
					continue
				}
				p := &corev1.Pod{}
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod}, p); err != nil {
					if apierrors.IsNotFound(err) || ctx.Err() != nil {
						continue
					}
					return err
				}
				if a := annotations[name]; pod == "probe-server" && a != nil {
					patch := client.MergeFrom(p.DeepCopy())
					if p.Annotations == nil {
						p.Annotations = map[string]string{}
					}
					for k, v := range a {
						p.Annotations[k] = v
					}
					if err := c.Patch(ctx, p, patch); err != nil {
						return fmt.Errorf("annotating %s: %w", key, err)
					}
				}
				now := metav1.Now()
				ip := fmt.Sprintf("10.99.0.%d", 10+podIndex)
				p.Status = corev1.PodStatus{
					Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &now,
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
				}
				if err := c.Status().Update(ctx, p); err != nil {
					return fmt.Errorf("reporting %s ready: %w", key, err)
				}
				done[key] = true
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}
