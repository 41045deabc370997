package operator

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/progress"
)

// DeploymentName is the operator's Deployment (charts/octopus-operator): the CLI hands its work
// to the operator when this Deployment exists in OperatorNamespace.
const DeploymentName = "octopus-operator"

// Installed tells whether the operator runs in the cluster of c (its Deployment exists).
func Installed(ctx context.Context, c ctrl.Reader) (bool, error) {
	err := c.Get(ctx, ctrl.ObjectKey{Namespace: v1alpha1.OperatorNamespace, Name: DeploymentName}, &appsv1.Deployment{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		return false, nil
	}
	return false, fmt.Errorf("looking for the Octopus operator (Deployment %s/%s): %w", v1alpha1.OperatorNamespace, DeploymentName, err)
}

// ApplyFabric creates the cluster's Fabric with spec, or updates it to spec (server-side apply:
// the fields the CLI sets are its own, others stay).
func ApplyFabric(ctx context.Context, c ctrl.Client, spec v1alpha1.FabricSpec) error {
	f := &v1alpha1.Fabric{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Fabric"},
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.FabricName},
		Spec:       spec,
	}
	if err := kube.Apply(ctx, c, f); err != nil {
		return fmt.Errorf("applying Fabric %s: %w", v1alpha1.FabricName, err)
	}
	return nil
}

// PutBrokerInfo stores broker-info in the Secret a member Fabric refers to.
func PutBrokerInfo(ctx context.Context, c ctrl.Client, name string, data []byte) error {
	s := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1alpha1.OperatorNamespace, Labels: kube.ManagedLabels()},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{v1alpha1.BrokerInfoKey: data},
	}
	if err := kube.Apply(ctx, c, s); err != nil {
		return fmt.Errorf("storing broker-info in Secret %s/%s: %w", s.Namespace, name, err)
	}
	return nil
}

// WaitFabric waits until the operator has reconciled the Fabric's current generation and every
// condition of want is True, reporting each condition as it changes; it fails at once on a
// condition whose reason a retry cannot fix (ProviderUnavailable, BrokerInfoInvalid,
// ClusterIDTaken), and when timeout passes.
func WaitFabric(ctx context.Context, c ctrl.Reader, p *progress.Reporter, timeout time.Duration, want ...string) (*v1alpha1.Fabric, error) {
	start := time.Now()
	seen := map[string]string{}
	f := &v1alpha1.Fabric{}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, ctrl.ObjectKey{Name: v1alpha1.FabricName}, f); err != nil {
			return false, ctrl.IgnoreNotFound(err)
		}
		if f.Status.ObservedGeneration != f.Generation {
			return false, nil
		}
		done := true
		for _, typ := range want {
			cond := meta.FindStatusCondition(f.Status.Conditions, typ)
			if cond == nil {
				done = false
				continue
			}
			if line := string(cond.Status) + " " + cond.Reason + " " + cond.Message; seen[typ] != line {
				seen[typ] = line
				p.Done(start, "%s=%s (%s): %s", typ, cond.Status, cond.Reason, cond.Message)
			}
			if cond.Status != metav1.ConditionTrue {
				done = false
				switch cond.Reason {
				case ReasonBrokerInfoInvalid, ReasonClusterIDTaken, ReasonProviderUnavailable, ReasonHubNamespaceNotGranted:
					return false, fmt.Errorf("the operator reports %s=False: %s", typ, cond.Message)
				}
			}
		}
		return done, nil
	})
	if err != nil {
		return f, fmt.Errorf("waiting for the operator to reconcile Fabric %s (kubectl describe fabric %s): %w", v1alpha1.FabricName, v1alpha1.FabricName, err)
	}
	return f, nil
}
