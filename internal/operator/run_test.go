package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/operator"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestRun runs the operator as its binary does (manager, watch, leader election) and drives a
// hub Fabric through creation and deletion by its watch alone.
func TestRun(t *testing.T) {
	env := testenv.ControlPlanes(t, "a")
	s := start(t, env.Cluster("a").RESTConfig(), true)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- operator.Run(ctx, operator.RunOptions{Config: s.cfg, LeaderElection: true, HubNamespace: s.hubNamespace, MetricsBindAddress: "0", HealthProbeBindAddress: "0", Log: testr.New(t)})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	})

	if err := s.admin.Create(ctx, &v1alpha1.Fabric{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.FabricName},
		Spec: v1alpha1.FabricSpec{HubConfig: &v1alpha1.HubConfig{}}}); err != nil {
		t.Fatal(err)
	}
	poll := func(what string, cond func(context.Context) (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, cond); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	poll("BrokerReady", func(ctx context.Context) (bool, error) {
		f := &v1alpha1.Fabric{}
		if err := s.admin.Get(ctx, fabricKey, f); err != nil {
			return false, nil //nolint:nilerr // not there yet: poll on
		}
		return isTrue(v1alpha1.FabricBrokerReady)(f), nil
	})
	lease := &coordinationv1.Lease{}
	if err := s.admin.Get(ctx, client.ObjectKey{Namespace: v1alpha1.OperatorNamespace, Name: operator.LeaseName}, lease); err != nil {
		t.Fatalf("leader-election Lease: %v", err)
	}
	if err := s.admin.Delete(ctx, &v1alpha1.Fabric{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.FabricName}}); err != nil {
		t.Fatal(err)
	}
	poll("Fabric deleted", func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(s.admin.Get(ctx, fabricKey, &v1alpha1.Fabric{})), nil
	})
}
