package lab_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// netshootPod is a toolbox whose tools are the host's (nicolaka/netshoot in the image table).
const netshootPod = "netshoot"

// testClusterDNS checks the cluster DNS the lab deploys (real CoreDNS with kubeadm's
// Corefile behind the kube-dns Service) from a pod, through kubectl exec and busybox
// nslookup: the kubernetes Service and the echo Service resolve to their ClusterIPs by
// short, namespaced and fully qualified names (the pod's resolv.conf search path), and a
// name that does not exist does not.
func testClusterDNS(ctx context.Context, t *testing.T, c labCluster, pod string) {
	create(ctx, t, c.cs, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: netshootPod},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "netshoot", Image: "nicolaka/netshoot"}}},
	})
	waitPodReady(ctx, t, c.cs, netshootPod)
	dns, err := c.cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("kube-dns Service: %v", err)
	}
	net := c.net
	if want := clusterDNS(t, net.ServiceCIDR).String(); dns.Spec.ClusterIP != want {
		t.Errorf("kube-dns ClusterIP %s, want %s (10th address of %s)", dns.Spec.ClusterIP, want, net.ServiceCIDR)
	}
	var pods *corev1.PodList
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err = c.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling
		}
		return len(pods.Items) == 1 && podReady(&pods.Items[0]), nil
	})
	if err != nil {
		t.Fatalf("CoreDNS pod never became Ready: %v; pods: %+v", err, pods)
	}
	ip := func(ns, name string) string {
		svc, err := c.cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return svc.Spec.ClusterIP
	}
	kube, echo := ip("default", "kubernetes"), ip("default", "echo")
	// busybox's nslookup tries the search path only for names without a dot (and exits 1
	// when one of the search names is NXDOMAIN), so `kubernetes.default` is asked of the
	// netshoot pod, whose nslookup (BIND's, from the host) honours ndots:5 as libc does.
	for _, tc := range []struct{ pod, name, want string }{
		{netshootPod, "kubernetes.default", kube},
		{netshootPod, "echo", echo},
		{pod, "echo", echo},
		{pod, "kubernetes.default.svc.cluster.local", kube},
		{pod, "echo.default.svc.cluster.local", echo},
	} {
		var last kubectlResult
		// CoreDNS answers once its informers have synced; poll briefly.
		err := wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(context.Context) (bool, error) {
			last = c.run(ctx, t, nil, "", "exec", tc.pod, "--", "nslookup", tc.name)
			return strings.Contains(last.stdout, "Address: "+tc.want+"\n"), nil
		})
		if err != nil {
			t.Errorf("nslookup %s in pod %s: exit %d, stdout %q, stderr %q; want address %s", tc.name, tc.pod, last.code, last.stdout, last.stderr, tc.want)
		} else {
			t.Logf("nslookup %s in pod %s: %s", tc.name, tc.pod, tc.want)
		}
	}
	miss := c.run(ctx, t, nil, "", "exec", netshootPod, "--", "nslookup", "no-such-service.default.svc.cluster.local")
	if miss.code == 0 || !strings.Contains(miss.stdout+miss.stderr, "NXDOMAIN") {
		t.Errorf("nslookup of a missing Service: exit %d, %q, %q; want NXDOMAIN", miss.code, miss.stdout, miss.stderr)
	}
}
