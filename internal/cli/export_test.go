package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// octopus runs the CLI with args and returns its standard output and error.
func octopus(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := NewRootCommand(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	return out.String(), err
}

// runAgent runs the agent controller of a member in this process until the test ends.
func runAgent(t *testing.T, name string, o agent.ControllerOptions) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := agent.RunController(ctx, o); err != nil {
			t.Errorf("agent of %s: %v", name, err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestExportUnexportShowServices runs `export service`, `unexport service` and `show services`
// against a hub and two joined clusters whose agents run for real.
func TestExportUnexportShowServices(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east", "west")
	info, err := hub.Deploy(t.Context(), env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		t.Fatalf("deploying the hub: %v", err)
	}
	kc := map[string]string{}
	members := map[string]client.Client{}
	for _, name := range []string{"east", "west"} {
		cp := env.Cluster(name)
		if _, err := cluster.Join(t.Context(), cp.RESTConfig(), cluster.JoinOptions{BrokerInfo: info, ClusterID: name, PodCIDRs: []string{cp.PodCIDR.String()}}); err != nil {
			t.Fatalf("joining %s: %v", name, err)
		}
		runAgent(t, name, agent.ControllerOptions{Member: cp.RESTConfig(), Identity: name, HealthProbeBindAddress: "0", MetricsBindAddress: "0", CredentialPollInterval: 100 * time.Millisecond})
		kc[name] = cp.Kubeconfig
		members[name] = testenv.Client(t, cp.RESTConfig())
		if err := members[name].Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}); err != nil {
			t.Fatal(err)
		}
	}
	service := func(member, name string, spec corev1.ServiceSpec) {
		t.Helper()
		if err := members[member].Create(t.Context(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Spec: spec}); err != nil {
			t.Fatal(err)
		}
	}
	service("east", "web", corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}})
	service("east", "ext", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.org"})
	// west's web has another port under the same name: a PortConflict for the younger export.
	service("west", "web", corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}})
	// One ready pod behind each web (selectorless, so written as the EndpointSlice controller
	// would): exports publish their ready endpoints.
	for _, member := range []string{"east", "west"} {
		pod := env.Cluster(member).PodCIDR.Addr().Next().Next()
		if err := members[member].Create(t.Context(), &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-pods", Labels: map[string]string{
				discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "test.octopus.io",
			}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{pod.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("export service: conditions printed; invalid or conflicting exports fail with the condition's message", func(t *testing.T) {
		tests := []struct {
			name    string
			args    []string
			wantOut []string
			wantErr string // "" for success
		}{{
			name:    "a valid export",
			args:    []string{"export", "service", "web", "-n", "shop", "--kubeconfig", kc["east"]},
			wantOut: []string{"Created ServiceExport shop/web", "CONDITION", "Valid", "Ready", "Exported", "Conflict", "NoConflicts"},
		}, {
			name:    "exporting again keeps the export",
			args:    []string{"export", "service", "web", "-n", "shop", "--kubeconfig", kc["east"], "-o", "json"},
			wantOut: []string{`"created": false`, `"reason": "Exported"`},
		}, {
			name:    "no such Service",
			args:    []string{"export", "service", "nosuch", "-n", "shop", "--kubeconfig", kc["east"]},
			wantOut: []string{"NoService"},
			wantErr: "is not valid (NoService)",
		}, {
			name:    "ExternalName",
			args:    []string{"export", "service", "ext", "-n", "shop", "--kubeconfig", kc["east"]},
			wantErr: "is not valid (InvalidServiceType)",
		}, {
			name:    "a conflicting port",
			args:    []string{"export", "service", "web", "-n", "shop", "--kubeconfig", kc["west"]},
			wantErr: "conflicts with other clusters' exports (PortConflict)",
		}, {
			name:    "bad output format",
			args:    []string{"export", "service", "web", "-n", "shop", "--kubeconfig", kc["east"], "-o", "yaml"},
			wantErr: `-o "yaml": want table or json`,
		}}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				out, err := octopus(t, tc.args...)
				if tc.wantErr == "" && err != nil {
					t.Fatalf("%v failed: %v\n%s", tc.args, err, out)
				}
				if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
					t.Fatalf("%v: error %v, want one containing %q\n%s", tc.args, err, tc.wantErr, out)
				}
				for _, w := range tc.wantOut {
					if !strings.Contains(out, w) {
						t.Errorf("%v: output lacks %q:\n%s", tc.args, w, out)
					}
				}
			})
		}
	})

	t.Run("show services: type, clusters, endpoints, conflicts", func(t *testing.T) {
		var last string
		err := wait.PollUntilContextTimeout(t.Context(), 300*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			out, err := octopus(t, "show", "services", "--kubeconfig", kc["west"], "-o", "json")
			if err != nil {
				return false, err
			}
			last = out
			var rows []serviceStatus
			if err := json.Unmarshal([]byte(out), &rows); err != nil {
				return false, err
			}
			for _, r := range rows {
				if r.Namespace == "shop" && r.Name == "web" {
					// west's http is 8080, east's older one 80: only east owns the imported
					// port, so only east's endpoint is imported (strict port ownership); west
					// stays among the clusters for the service itself.
					return r.Type == mcsv1beta1.ClusterSetIP && slices.Equal(r.Clusters, []string{"east", "west"}) &&
						r.ReadyEndpoints == 1 && r.Endpoints == 1 && r.Export != nil && r.Export.State == "Exported" &&
						r.Export.Conflict != nil && r.Export.Conflict.Reason == string(mcsv1beta1.ServiceExportReasonPortConflict), nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("show services -o json in west: %v; last output:\n%s", err, last)
		}
		table, err := octopus(t, "show", "services", "--kubeconfig", kc["west"])
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"NAMESPACE", "ENDPOINTS READY", "shop", "web", "ClusterSetIP", "east,west", "1/1", "Exported", "PortConflict", "1 service(s), 1 exported from here, 1 with conflicts."} {
			if !strings.Contains(table, w) {
				t.Errorf("show services table lacks %q:\n%s", w, table)
			}
		}
		// east sees its invalid exports too, without an import.
		table, err = octopus(t, "show", "services", "--kubeconfig", kc["east"], "-n", "shop")
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"nosuch", "NoService", "ext", "InvalidServiceType"} {
			if !strings.Contains(table, w) {
				t.Errorf("east's show services table lacks %q:\n%s", w, table)
			}
		}
	})

	t.Run("unexport service: deleted, and the endpoints go; a second time is an error", func(t *testing.T) {
		out, err := octopus(t, "unexport", "service", "web", "-n", "shop", "--kubeconfig", kc["west"])
		if err != nil || !strings.Contains(out, "Deleted ServiceExport shop/web") {
			t.Fatalf("unexport: %v\n%s", err, out)
		}
		_, err = octopus(t, "unexport", "service", "web", "-n", "shop", "--kubeconfig", kc["west"])
		if err == nil || !strings.Contains(err.Error(), "is not exported") {
			t.Fatalf("second unexport: %v, want an error saying it is not exported", err)
		}
		var last string
		err = wait.PollUntilContextTimeout(t.Context(), 300*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			out, err := octopus(t, "show", "services", "--kubeconfig", kc["west"], "-n", "shop", "-o", "json")
			if err != nil {
				return false, err
			}
			last = out
			var rows []serviceStatus
			if err := json.Unmarshal([]byte(out), &rows); err != nil {
				return false, err
			}
			for _, r := range rows {
				if r.Name == "web" {
					return slices.Equal(r.Clusters, []string{"east"}) && r.Endpoints == 1 && r.Export == nil, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("west's web after unexport: %v; last output:\n%s", err, last)
		}
	})
}
