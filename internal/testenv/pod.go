package testenv

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReportPod plays the kubelet for a pod that no kubelet runs (test control planes have no
// nodes of their own): it reports namespace/name running at ip, ready or not, so that
// kube-controller-manager's EndpointSlice controller lists it (the pod's Node must exist).
func ReportPod(t testing.TB, c client.Client, namespace, name string, ip netip.Addr, ready bool) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}}, HostIP: "192.0.2.1",
		HostIPs: []corev1.HostIP{{IP: "192.0.2.1"}}, StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: now}},
	}
	if err := c.Status().Update(t.Context(), pod); err != nil {
		t.Fatalf("reporting pod %s/%s ready=%v: %v", namespace, name, ready, err)
	}
}
