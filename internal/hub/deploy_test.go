package hub

import (
	"reflect"
	"strconv"
	"testing"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func init() { log.SetLogger(logr.Discard()) }

// managedVersions maps every object Deploy manages to its generation, or, for kinds without
// one, its resourceVersion. Generation moves only with the spec: the API server writes the
// admission policies' status (type checking) on its own schedule, which must not count as a
// change by deploy.
func managedVersions(t *testing.T, c client.Client) map[string]string {
	t.Helper()
	out := map[string]string{}
	sel := client.MatchingLabels(kube.ManagedLabels())
	for _, list := range []client.ObjectList{
		&corev1.NamespaceList{}, &apiextensionsv1.CustomResourceDefinitionList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{},
		&corev1.ServiceAccountList{}, &corev1.SecretList{},
		&admissionregistrationv1.ValidatingAdmissionPolicyList{}, &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{},
	} {
		if err := c.List(t.Context(), list, sel); err != nil {
			t.Fatal(err)
		}
		items, _ := meta.ExtractList(list)
		for _, item := range items {
			o := item.(client.Object)
			version := "rv " + o.GetResourceVersion()
			if g := o.GetGeneration(); g > 0 {
				version = "generation " + strconv.FormatInt(g, 10)
			}
			out[reflect.TypeOf(o).Elem().Name()+"/"+o.GetNamespace()+"/"+o.GetName()] = version
		}
	}
	return out
}

func TestDeployTwiceChangesNothing(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub")
	cfg := env.Cluster("hub").RESTConfig()
	first, err := Deploy(t.Context(), cfg, DeployOptions{})
	if err != nil {
		t.Fatalf("first deploy: %v", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	before := managedVersions(t, c)
	// Namespace, 4 CRDs (clusters, peers, gatewayexips, MCS serviceimports), 3 Roles (cluster,
	// join, hub gateway), 2 RoleBindings and 2 ServiceAccounts (join, hub gateway), 1 Secret,
	// 2 policies, 2 bindings.
	if len(before) != 17 {
		t.Fatalf("deploy manages %d objects, want 17: %v", len(before), before)
	}
	second, err := Deploy(t.Context(), cfg, DeployOptions{})
	if err != nil {
		t.Fatalf("second deploy: %v", err)
	}
	if after := managedVersions(t, c); !reflect.DeepEqual(before, after) {
		t.Errorf("second deploy changed objects:\nbefore %v\nafter  %v", before, after)
	}
	if !reflect.DeepEqual(first, second) {
		t.Errorf("second deploy returned different broker-info")
	}
	if first.JoinToken == "" || first.HubURL != env.Cluster("hub").URL {
		t.Errorf("broker-info hub URL %q (want %q), token set: %v", first.HubURL, env.Cluster("hub").URL, first.JoinToken != "")
	}
}

func TestDeployRejectsBadPools(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub")
	_, err := Deploy(t.Context(), env.Cluster("hub").RESTConfig(), DeployOptions{Globalnet: PoolConfig{CIDR: "242.0.0.0/8", ClusterPrefixLength: 4}})
	if err == nil {
		t.Fatal("deploy accepted a /4 block out of a /8 pool")
	}
	c, _ := client.New(env.Cluster("hub").RESTConfig(), client.Options{Scheme: kube.Scheme})
	if got := managedVersions(t, c); len(got) != 0 {
		t.Errorf("a refused deploy wrote %v", got)
	}
}
