package testenv

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ScaleToZero scales the Deployments in namespace to 0 replicas and returns how many it
// scaled. Control planes of ControlPlanes run no pods, so a Deployment never becomes
// available there; at 0 replicas the Deployment controller reports it rolled out, which is what
// a test of something that waits for a rollout (the operator's ComponentsReady) needs.
func ScaleToZero(ctx context.Context, c client.Client, namespace string) (int, error) {
	ds := &appsv1.DeploymentList{}
	if err := c.List(ctx, ds, client.InNamespace(namespace)); err != nil {
		return 0, err
	}
	n := 0
	for i := range ds.Items {
		d := &ds.Items[i]
		if d.Spec.Replicas != nil && *d.Spec.Replicas == 0 {
			continue
		}
		if err := c.Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// AddNode registers a Node the way a kubelet would for what Octopus reads of it: its pod CIDR
// and its InternalIP (control planes of ControlPlanes run no kubelet).
func AddNode(t testing.TB, c client.Client, name, internalIP, podCIDR string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: podCIDR}}
	if err := c.Create(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	// The node controller updates new Nodes too: retry on conflicts.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(n), n); err != nil {
			return err
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: internalIP}}
		return c.Status().Update(t.Context(), n)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Logs keeps every line logged through its Logger, for tests that assert on what a component
// logs (testr would fail a test that logs after it ended).
type Logs struct {
	mu    sync.Mutex
	lines []string
}

// Logger returns a logger that records into l.
func (l *Logs) Logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, strings.TrimSpace(prefix+" "+args))
	}, funcr.Options{})
}

// Matching returns the lines that contain substr, in any case.
func (l *Logs) Matching(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(strings.ToLower(line), strings.ToLower(substr)) {
			out = append(out, line)
		}
	}
	return out
}
