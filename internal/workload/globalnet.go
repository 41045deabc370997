package workload

import (
	"context"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/globalnet"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// PodGlobalIPName is the GlobalIngressIP that holds the global IP of pod, which a globalnet
// cluster allocates while the pod backs an exported headless Service: how a pod is reached
// from other clusters when pod CIDRs overlap (docs/architecture.md §6h).
func PodGlobalIPName(pod string) string {
	return globalnet.Target{Kind: v1alpha1.GlobalIngressTargetPod, Name: pod}.ObjectName()
}

// Addressing reads the cluster's addressing from its Cluster on the hub, with the cluster's
// own hub credential (the Secret join left in the member cluster): what join set, and what
// the cluster's agent acts on. An empty spec.addressing is direct, its default.
func Addressing(ctx context.Context, c client.Reader) (v1alpha1.Addressing, error) {
	cred, err := hubaccess.LoadCredential(ctx, c)
	if err != nil {
		return "", err
	}
	hc, err := client.New(cred.RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		return "", err
	}
	cl := &v1alpha1.Cluster{}
	if err := hc.Get(ctx, client.ObjectKey{Namespace: cred.Namespace, Name: cred.ClusterID}, cl); err != nil {
		return "", err
	}
	if cl.Spec.Addressing == "" {
		return v1alpha1.AddressingDirect, nil
	}
	return cl.Spec.Addressing, nil
}

// GlobalIP is the address of the GlobalIngressIP name in namespace, or why there is none yet.
func GlobalIP(ctx context.Context, c client.Reader, namespace, name string) (netip.Addr, string) {
	g := &v1alpha1.GlobalIngressIP{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, g); err != nil {
		return netip.Addr{}, err.Error()
	}
	if ip, err := netip.ParseAddr(g.Status.IP); err == nil {
		return ip, ""
	}
	if cond := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.GlobalIngressIPConditionAllocated); cond != nil {
		return netip.Addr{}, cond.Reason + ": " + cond.Message
	}
	return netip.Addr{}, "not allocated yet"
}

// HeadlessExport is a headless Service selecting the pods labelled selector, and its
// ServiceExport: in a globalnet cluster, exporting a headless Service is what gives each of its
// pods a global IP (PodGlobalIPName), the only address other clusters can reach a pod by.
func HeadlessExport(namespace, name string, labels, selector map[string]string, ports ...corev1.ServicePort) []client.Object {
	objMeta := metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}
	return []client.Object{
		&corev1.Service{
			ObjectMeta: objMeta,
			Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: selector, Ports: ports},
		},
		&mcsv1beta1.ServiceExport{ObjectMeta: *objMeta.DeepCopy()},
	}
}
