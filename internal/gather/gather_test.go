package gather_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/gather"
	"github.com/octopus-mcs/octopus/internal/gather/gathertest"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func init() {
	// The controller-runtime client logs through this; tests report through t instead.
	log.SetLogger(logr.Discard())
}

// TestGatherFromControlPlanes gathers from a real hub and a joined cluster in which a
// kubeconfig with the cluster's real hub token, a pod with it in its environment and an
// exported service were planted: the archive holds the expected files, the planted objects
// and the export, and neither the cluster's token nor the join token appears anywhere in it.
func TestGatherFromControlPlanes(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east")
	info, err := hub.Deploy(t.Context(), env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		t.Fatalf("deploying the hub: %v", err)
	}
	east := env.Cluster("east")
	joined, err := cluster.Join(t.Context(), east.RESTConfig(), cluster.JoinOptions{BrokerInfo: info, ClusterID: "east", PodCIDRs: []string{east.PodCIDR.String()}})
	if err != nil {
		t.Fatalf("joining: %v", err)
	}
	token := joined.Credential.Token
	mc, err := client.New(east.RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	sys := v1alpha1.SystemNamespace
	planted := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "planted", Annotations: map[string]string{"note": "join token " + info.JoinToken}},
			Data: map[string]string{"kubeconfig": "apiVersion: v1\nkind: Config\nusers:\n- name: hub\n  user:\n    token: " + token + "\n"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "planted"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "busybox", Env: []corev1.EnvVar{{Name: "HUB_TOKEN", Value: token}, {Name: "CLUSTER_ID", Value: "east"}}}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": "web"}}},
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.100.1.7"}}}},
	}
	for _, o := range planted {
		if err := mc.Create(t.Context(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}

	dir := t.TempDir()
	res, err := gather.Run(t.Context(), gather.Options{
		Clusters: []gather.Target{{Config: east.RESTConfig(), Source: east.Kubeconfig}},
		Hub:      &gather.Target{Config: env.Cluster("hub").RESTConfig(), Source: env.Cluster("hub").Kubeconfig},
		Dir:      dir,
		Now:      func() time.Time { return time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "octopus-gather-20260501T120000Z.tar.gz"); res.Path != want {
		t.Errorf("archive %s, want %s", res.Path, want)
	}
	files, err := gathertest.ReadArchive(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	t.Logf("archive %s: %s", res.Path, strings.Join(names, " "))

	contains := map[string][]string{
		"hub/clusters.yaml":                               {"clusterID: east"},
		"hub/leases.yaml":                                 {"kind: List"},
		"hub/configmaps.yaml":                             {"cidr-secondary-"},
		"hub/peers.yaml":                                  {"kind: List"},
		"hub/serviceimports.yaml":                         {"kind: List"},
		"hub/endpointslices.yaml":                         {"kind: List"},
		"hub/pods.yaml":                                   {"kind: List"},
		"hub/events.yaml":                                 {"kind: List"},
		"clusters/east/clusterproperties.yaml":            {"value: east"},
		"clusters/east/nodes.yaml":                        {"kind: List"},
		"clusters/east/octopus-system/configmaps.yaml":    {"name: planted", "token: <redacted>"},
		"clusters/east/octopus-system/pods.yaml":          {"name: HUB_TOKEN", "value: east"},
		"clusters/east/octopus-system/services.yaml":      {"name: octopus-dns"},
		"clusters/east/octopus-system/deployments.yaml":   {"name: octopus-dns"},
		"clusters/east/mcs/serviceexports.yaml":           {"name: web"},
		"clusters/east/mcs/services-exported.yaml":        {"name: web"},
		"clusters/east/mcs/endpointslices-exported.yaml":  {"10.100.1.7"},
		"clusters/east/logs/octopus-system/planted/c.log": nil, // a pod without a node: the API server answers with no lines
		"index.json":                                      {`"octopusVersion"`},
	}
	for name, wants := range contains {
		if _, ok := files[name]; !ok {
			t.Errorf("the archive has no %s", name)
		}
		for _, w := range wants {
			if !strings.Contains(files[name], w) {
				t.Errorf("%s does not contain %q:\n%.2000s", name, w, files[name])
			}
		}
	}
	for name := range files {
		if strings.Contains(files[name], "managedFields") {
			t.Errorf("%s holds managed fields", name)
		}
	}
	if leaks := gathertest.Leaks(files, []string{token, info.JoinToken}); len(leaks) > 0 {
		t.Errorf("the archive leaks credentials:\n%s", strings.Join(leaks, "\n"))
	}

	var index gather.Index
	if err := json.Unmarshal([]byte(files["index.json"]), &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Files) != len(files)-1 || len(index.Clusters) != 1 || index.Clusters[0].Name != "east" || !strings.Contains(index.Hub, "kubeconfig") {
		t.Errorf("index: %d files (archive %d), clusters %+v, hub %q", len(index.Files), len(files), index.Clusters, index.Hub)
	}
	skipped := fmt.Sprint(index.Skipped)
	for _, want := range []string{"node kernel state", "--lab-dir", "east: ConfigMap kube-system/coredns"} {
		if !strings.Contains(skipped, want) {
			t.Errorf("the index does not say it skipped %q: %s", want, skipped)
		}
	}
}
