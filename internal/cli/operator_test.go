package cli

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/manifests/release"
	"github.com/octopus-mcs/octopus/internal/operator"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestHubDeployAndJoinThroughTheOperator: where the operator chart is installed, `hub deploy`
// and `join` hand their work to the operator through the Fabric and report its conditions.
// The operators run in this process (the control planes run no pods).
func TestHubDeployAndJoinThroughTheOperator(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east")
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, name := range []string{"hub", "east"} {
		cfg := env.Cluster(name).RESTConfig()
		if _, err := release.Install(t.Context(), cfg, release.Options{Chart: charts.Operator, Namespace: v1alpha1.OperatorNamespace, AppVersion: "v0.0.0-test"}); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := operator.Run(ctx, operator.RunOptions{Config: cfg, MetricsBindAddress: "0", HealthProbeBindAddress: "0", SeveralInProcess: true, Log: logr.Discard()}); err != nil {
				t.Errorf("operator of %s: %v", name, err)
			}
		})
	}
	brokerInfo := filepath.Join(t.TempDir(), "broker-info")
	out, err := octopus(t, "hub", "deploy", "--kubeconfig", env.Cluster("hub").Kubeconfig, "--broker-info", brokerInfo)
	if err != nil {
		t.Fatalf("hub deploy: %v\n%s", err, out)
	}
	if !strings.Contains(out, "by the operator") {
		t.Fatalf("hub deploy did not go through the operator:\n%s", out)
	}
	info, err := hub.ReadBrokerInfo(brokerInfo)
	if err != nil {
		t.Fatal(err)
	}
	if info.HubURL != env.Cluster("hub").RESTConfig().Host {
		t.Fatalf("broker-info hub URL %s, want the kubeconfig's %s", info.HubURL, env.Cluster("hub").RESTConfig().Host)
	}

	// join waits for the operator's ComponentsReady, which waits for the member chart's
	// rollouts: this control plane runs no pods, so its Deployments are scaled to 0 as they
	// appear, and then count as rolled out.
	joined := make(chan struct{})
	wg.Go(func() {
		ec := testenv.Client(t, env.Cluster("east").RESTConfig())
		for {
			select {
			case <-joined:
				return
			case <-time.After(500 * time.Millisecond):
				_, _ = testenv.ScaleToZero(ctx, ec, v1alpha1.SystemNamespace)
			}
		}
	})
	out, err = octopus(t, "join", brokerInfo, "--cluster-id", "east", "--pod-cidr", env.Cluster("east").PodCIDR.String(), "--kubeconfig", env.Cluster("east").Kubeconfig)
	close(joined)
	if err != nil {
		t.Fatalf("join: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Cluster east joined the hub") || !strings.Contains(out, "through the operator") {
		t.Fatalf("join output:\n%s", out)
	}
	hc := testenv.Client(t, env.Cluster("hub").RESTConfig())
	if err := hc.Get(t.Context(), client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: "east"}, &v1alpha1.Cluster{}); err != nil {
		t.Fatalf("east's Cluster on the hub: %v", err)
	}
	f := &v1alpha1.Fabric{}
	if err := testenv.Client(t, env.Cluster("east").RESTConfig()).Get(t.Context(), client.ObjectKey{Name: v1alpha1.FabricName}, f); err != nil {
		t.Fatal(err)
	}
	if f.Spec.JoinConfig == nil || f.Spec.JoinConfig.ClusterID != "east" || f.CreationTimestamp.IsZero() || f.Status.ComponentsRevision != 1 {
		t.Fatalf("east's Fabric: %+v", f)
	}
}
