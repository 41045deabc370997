package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
)

// TestLeaveInterconnect: leave turns enable-ic off and returns once the icmaster says the AZ
// left, deleting the ovn-ic-config join wrote (a user's own stays, disabled); without the
// icmaster's word it fails, naming where to look; no ovn-ic-config, nothing to do. (On real
// daemons: internal/secondarynet/icmaster's TestInterconnectFromConfigMap, "octopus leave".)
func TestLeaveInterconnect(t *testing.T) {
	cfg := icconfig.Config{Enabled: true, DBHosts: []string{"192.0.2.1"}, NBPort: 6645, SBPort: 6646}
	cm := func(labels map[string]string, status string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: icconfig.ConfigMapName, Namespace: icconfig.ConfigMapNamespace, Labels: labels,
				Annotations: map[string]string{icconfig.StatusAnnotation: status}},
			Data: cfg.Data(),
		}
	}
	key := client.ObjectKey{Namespace: icconfig.ConfigMapNamespace, Name: icconfig.ConfigMapName}
	ctx := context.Background()

	// The icmaster's word (as it writes it once ovnic.Leave returned): the managed one goes.
	left := "Not interconnected: enable-ic is not \"true\"; " + icconfig.LeftStatus("east")
	c := fake.NewClientBuilder().WithObjects(cm(kube.ManagedLabels(), left)).Build()
	if err := LeaveInterconnect(ctx, c, "east", time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("join's ovn-ic-config after leave: %v, want it deleted", err)
	}

	// A user's own: kept, disabled.
	c = fake.NewClientBuilder().WithObjects(cm(nil, left)).Build()
	if err := LeaveInterconnect(ctx, c, "east", time.Second, nil); err != nil {
		t.Fatal(err)
	}
	got := &corev1.ConfigMap{}
	if err := c.Get(ctx, key, got); err != nil || got.Data[icconfig.KeyEnable] != "false" {
		t.Errorf("the user's ovn-ic-config after leave: enable-ic %q, %v; want kept with \"false\"", got.Data[icconfig.KeyEnable], err)
	}

	// No icmaster answering: an error naming it, the ConfigMap kept (leave can run again).
	c = fake.NewClientBuilder().WithObjects(cm(kube.ManagedLabels(), "Applied: AZ east")).Build()
	err := LeaveInterconnect(ctx, c, "east", 300*time.Millisecond, nil)
	if err == nil || !strings.Contains(err.Error(), "icmaster") || !strings.Contains(err.Error(), "run leave again") {
		t.Errorf("without the icmaster: %v; want an error naming the icmaster and the retry", err)
	}
	if err := c.Get(ctx, key, &corev1.ConfigMap{}); err != nil {
		t.Errorf("ovn-ic-config after a failed leave: %v; want it kept", err)
	}

	// Nothing interconnected.
	if err := LeaveInterconnect(ctx, fake.NewClientBuilder().Build(), "east", time.Second, nil); err != nil {
		t.Errorf("no ovn-ic-config: %v", err)
	}
}
