package cluster

import (
	"errors"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/dnsconfig"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
)

// TestJoinAndLeaveWireClusterDNS: join deploys octopus-dns behind its Service and makes the
// cluster's CoreDNS forward clusterset.local to that Service, leave restores the Corefile byte for byte, and a Corefile that
// cannot be parsed stops join before the hub learns of the cluster.
func TestJoinAndLeaveWireClusterDNS(t *testing.T) {
	f := newFabric(t, "east", "west")
	kubeadm, err := os.ReadFile("../dnsconfig/testdata/kubeadm.Corefile")
	if err != nil {
		t.Fatal(err)
	}
	east := newClient(t, f.env.Cluster("east").RESTConfig())
	putCorefile(t, east, string(kubeadm))

	f.join(t, "east")
	svc := &corev1.Service{}
	if err := east.Get(t.Context(), client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: dnsconfig.ServiceName}, svc); err != nil {
		t.Fatalf("join made no octopus-dns Service: %v", err)
	}
	if got := corefile(t, east); !strings.Contains(got, "clusterset.local:53 {") || !strings.Contains(got, "forward . "+svc.Spec.ClusterIP+":53") {
		t.Errorf("after join the Corefile does not forward clusterset.local to %s:\n%s", svc.Spec.ClusterIP, got)
	}
	dep := &appsv1.Deployment{}
	if err := east.Get(t.Context(), client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: dnsconfig.ServiceName}, dep); err != nil {
		t.Fatalf("join deployed no octopus-dns: %v", err)
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; !strings.HasPrefix(img, render.DNSImage+":") {
		t.Errorf("octopus-dns image = %q, want %s:<version>", img, render.DNSImage)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("the octopus-dns Service (selector %v) does not select its pods (labels %v)", svc.Spec.Selector, dep.Spec.Template.Labels)
	}
	if err := Leave(t.Context(), f.env.Cluster("east").RESTConfig(), LeaveOptions{}); err != nil {
		t.Fatalf("leave: %v", err)
	}
	if err := east.Get(t.Context(), client.ObjectKey{Name: "octopus-dns"}, &rbacv1.ClusterRole{}); !apierrors.IsNotFound(err) {
		t.Errorf("leave left octopus-dns's ClusterRole behind (get: %v)", err)
	}
	if got := corefile(t, east); got != string(kubeadm) {
		t.Errorf("after leave the Corefile is\n%q\nwant the original\n%q", got, kubeadm)
	}

	west := newClient(t, f.env.Cluster("west").RESTConfig())
	putCorefile(t, west, ".:53 {\n    errors\n    forward . /etc/resolv.conf\n")
	_, err = Join(t.Context(), f.env.Cluster("west").RESTConfig(), f.joinOptions("west"))
	if !errors.Is(err, dnsconfig.ErrUnparsable) || !strings.Contains(err.Error(), "missing its closing }") {
		t.Fatalf("join with a broken Corefile = %v, want it refused naming the problem", err)
	}
	err = f.hub.Get(t.Context(), client.ObjectKey{Namespace: f.info.Namespace, Name: "west"}, &v1alpha1.Cluster{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a refused join registered west on the hub anyway (get: %v)", err)
	}
}

func putCorefile(t *testing.T, c client.Client, text string) {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns"},
		Data:       map[string]string{"Corefile": text},
	}
	if err := c.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
}

func corefile(t *testing.T, c client.Client) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data["Corefile"]
}
