package rbac_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/config/rbac"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestOVNMasterChangesOnlyItsAnnotations installs what the member chart renders for the
// ovnmaster (its RBAC and the admission policy ovn-policy.yaml) on a real API server and acts
// as the ovnmaster: RBAC lets it patch every pod, the policy lets it change only the three
// annotations it owns. Each refusal is a change a compromised ovnmaster would want: a label
// (moving the pod into another Service or NetworkPolicy), another annotation (an address
// request), removing one, the spec. An administrator's changes are not its business.
func TestOVNMasterChangesOnlyItsAnnotations(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	env := testenv.ControlPlanes(t, "a")
	adminCfg := env.Cluster("a").RESTConfig()
	admin := testenv.Client(t, adminCfg)
	ctx := t.Context()
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: memberNS}}); err != nil {
		t.Fatal(err)
	}
	c, err := charts.Load(charts.Member, "v0.0.0-test")
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := charts.Render(c, memberNS, map[string]any{"secondaryNetwork": map[string]any{"enabled": true, "clusterID": "east", "cidr": "10.112.0.0/16"}})
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, k := range slices.Sorted(maps.Keys(rendered)) {
		for _, u := range testenv.Decode(t, rendered[k]) {
			switch u.GetKind() {
			case "ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
				objs = append(objs, u)
			}
		}
	}
	applyRBAC(t, admin, objs...)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: otherNS, Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{podnet.RequestedIPAnnotation: "10.112.0.9", "team": "a"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	// Once kube-controller-manager has made the namespace's default ServiceAccount.
	testenv.Eventually(t, time.Minute, "a pod created", func() error { return admin.Create(ctx, pod.DeepCopy()) })
	var id identity
	for _, i := range identities {
		if i.name == rbac.OVNMaster {
			id = i
		}
	}
	cs, err := kubernetes.NewForConfig(tokenFor(t, admin, adminCfg, id))
	if err != nil {
		t.Fatal(err)
	}
	patch := func(cs kubernetes.Interface, body string) error {
		_, err := cs.CoreV1().Pods(otherNS).Patch(ctx, pod.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	refused := []struct{ what, patch string }{
		{"relabelling the pod", `{"metadata":{"labels":{"app":"db"}}}`},
		{"adding a label", `{"metadata":{"labels":{"role":"admin"}}}`},
		{"rewriting its address request", `{"metadata":{"annotations":{"` + podnet.RequestedIPAnnotation + `":"10.112.0.1"}}}`},
		{"adding another annotation", `{"metadata":{"annotations":{"other":"x"}}}`},
		{"removing another annotation", `{"metadata":{"annotations":{"team":null}}}`},
		{"changing the spec", `{"spec":{"activeDeadlineSeconds":5}}`},
	}
	// The policy takes effect once the API server has loaded it.
	testenv.Eventually(t, time.Minute, "the ovnmaster's relabelling refused", func() error {
		if err := patch(cs, refused[0].patch); err == nil || !strings.Contains(err.Error(), "octopus-ovnmaster-pod-annotations") {
			_ = patch(kubernetes.NewForConfigOrDie(adminCfg), `{"metadata":{"labels":{"app":"web"}}}`)
			return fmt.Errorf("relabelling: %w", err)
		}
		return nil
	})
	for _, r := range refused {
		if err := patch(cs, r.patch); err == nil || !strings.Contains(err.Error(), "octopus-ovnmaster-pod-annotations") {
			t.Errorf("the ovnmaster %s: %v, want the policy's refusal", r.what, err)
		}
	}
	status := `[{"name":"` + podnet.NetworkName + `","interface":"net1","ips":["10.112.0.9"]}]`
	allowed := []struct{ what, patch string }{
		{"writing the network status", `{"metadata":{"annotations":{"` + podnet.NetworkStatusAnnotation + `":` + strconv.Quote(status) + `}}}`},
		{"writing why there is no address", `{"metadata":{"annotations":{"` + podnet.ErrorAnnotation + `":"exhausted"}}}`},
		{"removing that reason", `{"metadata":{"annotations":{"` + podnet.ErrorAnnotation + `":null}}}`},
		{"recording the pod's VPC", `{"metadata":{"annotations":{"` + podnet.VpcAnnotation + `":"vpc-a"}}}`},
		{"clearing the pod's VPC", `{"metadata":{"annotations":{"` + podnet.VpcAnnotation + `":null}}}`},
	}
	for _, a := range allowed {
		if err := patch(cs, a.patch); err != nil {
			t.Errorf("the ovnmaster %s: %v", a.what, err)
		}
	}
	if err := patch(kubernetes.NewForConfigOrDie(adminCfg), `{"metadata":{"labels":{"app":"db"}}}`); err != nil {
		t.Errorf("an administrator relabelling the pod: %v", err)
	}
}
