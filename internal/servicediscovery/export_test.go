package servicediscovery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func TestMain(m *testing.M) {
	// The agents log through controller-runtime; with -v their lines go to stderr.
	logger := logr.Discard()
	if slices.Contains(os.Args, "-test.v=true") || slices.Contains(os.Args, "-test.v") {
		logger = funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
	}
	logf.SetLogger(logger)
	os.Exit(m.Run())
}

// fabric is a deployed hub with joined members, each running the real agent controller.
type fabric struct {
	env     *controlplane.Environment
	hub     client.Client // admin
	ns      string        // hub namespace
	joined  map[string]*cluster.Joined
	members map[string]client.Client // admin
	stop    map[string]func()        // stops a member's agent
	opts    agent.ControllerOptions  // the agents' options
}

func newFabric(t *testing.T, members ...string) *fabric {
	t.Helper()
	return newFabricWith(t, agent.ControllerOptions{}, members...)
}

// newFabricWith is newFabric with the agents' options (member, identity and the settings every
// test agent needs are filled in).
func newFabricWith(t *testing.T, agentOpts agent.ControllerOptions, members ...string) *fabric {
	t.Helper()
	return newFabricAddressed(t, agentOpts, nil, members...)
}

// newFabricAddressed is newFabricWith, joining each member with its addressing in addressing
// (direct when absent).
func newFabricAddressed(t *testing.T, agentOpts agent.ControllerOptions, addressing map[string]v1alpha1.Addressing, members ...string) *fabric {
	t.Helper()
	env := testenv.ControlPlanes(t, append([]string{"hub"}, members...)...)
	return newFabricOn(t, env, agentOpts, addressing, nil, members...)
}

// newFabricOn deploys the hub on env's cluster "hub" and joins members, each with its
// addressing (direct when absent) and the pod CIDRs of podCIDRs (the control plane's when
// absent).
func newFabricOn(t *testing.T, env *controlplane.Environment, agentOpts agent.ControllerOptions, addressing map[string]v1alpha1.Addressing, podCIDRs map[string][]string, members ...string) *fabric {
	t.Helper()
	info, err := hub.Deploy(t.Context(), env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		t.Fatalf("deploying the hub: %v", err)
	}
	f := &fabric{env: env, hub: testenv.Client(t, env.Cluster("hub").RESTConfig()), ns: info.Namespace, joined: map[string]*cluster.Joined{}, members: map[string]client.Client{}, stop: map[string]func(){}, opts: agentOpts}
	for _, name := range members {
		cfg := env.Cluster(name).RESTConfig()
		pods := podCIDRs[name]
		if pods == nil {
			pods = []string{env.Cluster(name).PodCIDR.String()}
		}
		j, err := cluster.Join(t.Context(), cfg, cluster.JoinOptions{BrokerInfo: info, ClusterID: name, PodCIDRs: pods, Addressing: addressing[name]})
		if err != nil {
			t.Fatalf("joining %s: %v", name, err)
		}
		f.joined[name] = j
		f.members[name] = testenv.Client(t, cfg)
		f.stop[name] = startAgent(t, name, cfg, agentOpts)
	}
	return f
}

// startAgent runs what `octopus-agent controller` runs, until the test ends or the returned
// function is called.
func startAgent(t *testing.T, name string, cfg *rest.Config, o agent.ControllerOptions) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	o.Member, o.Identity = cfg, name
	o.HealthProbeBindAddress, o.MetricsBindAddress = "0", "0"
	o.CredentialPollInterval = 100 * time.Millisecond
	go func() {
		done <- agent.RunController(ctx, o)
	}()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent of %s: %v", name, err)
		}
	})
	t.Cleanup(stop)
	return stop
}

// eventually polls check until it returns "" (success) or a minute passes, then fails with
// the last thing check reported.
func eventually(t *testing.T, what string, check func(ctx context.Context) string) {
	t.Helper()
	testenv.EventuallyCheck(t, time.Minute, what, check)
}

// published returns what cluster published on the hub for namespace/name.
func (f *fabric) published(ctx context.Context, clusterID, namespace, name string) ([]mcsv1beta1.ServiceImport, []discoveryv1.EndpointSlice, error) {
	sel := client.MatchingLabels{v1alpha1.ClusterLabel: clusterID, v1alpha1.ServiceNamespaceLabel: namespace, mcsv1beta1.LabelServiceName: name}
	records := &mcsv1beta1.ServiceImportList{}
	if err := f.hub.List(ctx, records, client.InNamespace(f.ns), sel); err != nil {
		return nil, nil, err
	}
	slices := &discoveryv1.EndpointSliceList{}
	if err := f.hub.List(ctx, slices, client.InNamespace(f.ns), sel); err != nil {
		return nil, nil, err
	}
	return records.Items, slices.Items, nil
}

func (f *fabric) waitWithdrawn(t *testing.T, clusterID, namespace, name string) {
	t.Helper()
	eventually(t, "withdrawal of "+namespace+"/"+name, func(ctx context.Context) string {
		r, s, err := f.published(ctx, clusterID, namespace, name)
		if err != nil {
			return err.Error()
		}
		if len(r)+len(s) > 0 {
			return fmt.Sprintf("%d records and %d slices still on the hub", len(r), len(s))
		}
		return ""
	})
}

// waitConditions waits until the export has the Valid and Ready reasons given.
func waitConditions(t *testing.T, c client.Client, namespace, name string, valid, ready mcsv1beta1.ServiceExportConditionReason) *mcsv1beta1.ServiceExport {
	t.Helper()
	export := &mcsv1beta1.ServiceExport{}
	eventually(t, fmt.Sprintf("ServiceExport %s/%s Valid=%s Ready=%s", namespace, name, valid, ready), func(ctx context.Context) string {
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, export); err != nil {
			return err.Error()
		}
		v := meta.FindStatusCondition(export.Status.Conditions, string(mcsv1beta1.ServiceExportConditionValid))
		r := meta.FindStatusCondition(export.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady))
		if v == nil || r == nil || v.Reason != string(valid) || r.Reason != string(ready) {
			return fmt.Sprintf("conditions %+v", export.Status.Conditions)
		}
		wantValid := metav1.ConditionFalse
		if valid == mcsv1beta1.ServiceExportReasonValid {
			wantValid = metav1.ConditionTrue
		}
		wantReady := metav1.ConditionFalse
		if ready == mcsv1beta1.ServiceExportReasonExported {
			wantReady = metav1.ConditionTrue
		}
		if v.Status != wantValid || r.Status != wantReady || v.ObservedGeneration != export.Generation {
			return fmt.Sprintf("conditions %+v", export.Status.Conditions)
		}
		return ""
	})
	return export
}

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func export(namespace, name string) *mcsv1beta1.ServiceExport {
	return &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
}

func TestExport(t *testing.T) {
	f := newFabric(t, "east", "west")
	east, west := f.members["east"], f.members["west"]
	create(t, east, namespace("shop"), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	create(t, west, namespace("shop"))

	t.Run("ClusterSetIP: NoService until the Service exists, then the record and a slice of its ready pods", func(t *testing.T) {
		ex := export("shop", "web")
		ex.Spec.ExportedLabels = map[string]string{"tier": "front"}
		ex.Spec.ExportedAnnotations = map[string]string{"owner": "team-a"}
		create(t, east, ex)
		waitConditions(t, east, "shop", "web", mcsv1beta1.ServiceExportReasonNoService, mcsv1beta1.ServiceExportReasonPending)
		if r, s, err := f.published(t.Context(), "east", "shop", "web"); err != nil || len(r)+len(s) > 0 {
			t.Fatalf("an export without its Service is on the hub: %d records, %d slices, %v", len(r), len(s), err)
		}

		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
				Ports:           []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
				SessionAffinity: corev1.ServiceAffinityClientIP,
			},
		}
		create(t, east, svc)
		podIP := f.env.Cluster("east").PodCIDR.Addr().Next().Next().Next().Next()
		runAppPod(t, east, "web", "web-0", "web-0", podIP)
		ex = waitConditions(t, east, "shop", "web", mcsv1beta1.ServiceExportReasonValid, mcsv1beta1.ServiceExportReasonExported)

		var records []mcsv1beta1.ServiceImport
		var pubSlices []discoveryv1.EndpointSlice
		eventually(t, "the record and slice of shop/web", func(ctx context.Context) string {
			var err error
			if records, pubSlices, err = f.published(ctx, "east", "shop", "web"); err != nil {
				return err.Error()
			}
			if len(records) != 1 || len(pubSlices) != 1 {
				return fmt.Sprintf("%d records, %d slices", len(records), len(pubSlices))
			}
			return ""
		})
		rec := records[0]
		if rec.Spec.Type != mcsv1beta1.ClusterSetIP || len(rec.Spec.Ports) != 1 || rec.Spec.Ports[0].Port != 80 || rec.Spec.Ports[0].Name != "http" ||
			rec.Spec.SessionAffinity != corev1.ServiceAffinityClientIP || rec.Spec.SessionAffinityConfig == nil || len(rec.Spec.IPs) != 0 {
			t.Errorf("record spec = %+v", rec.Spec)
		}
		if rec.Labels[mcsv1beta1.LabelSourceCluster] != "east" {
			t.Errorf("record labels = %v", rec.Labels)
		}
		for k, want := range map[string]string{
			v1alpha1.ExportCreatedAnnotation:       ex.CreationTimestamp.UTC().Format(time.RFC3339),
			v1alpha1.ExportedLabelsAnnotation:      `{"tier":"front"}`,
			v1alpha1.ExportedAnnotationsAnnotation: `{"owner":"team-a"}`,
		} {
			if got := rec.Annotations[k]; got != want {
				t.Errorf("record annotation %s = %q, want %q", k, got, want)
			}
		}
		if err := east.Get(t.Context(), client.ObjectKeyFromObject(svc), svc); err != nil {
			t.Fatal(err)
		}
		s := pubSlices[0]
		// The pod, not the ClusterIP: an importer's kube-proxy balances over the pods of every
		// exporter, and the exporter's own kube-proxy would refuse its ClusterIP as an endpoint.
		// No hostname: DNS names pods of headless services only.
		if s.AddressType != discoveryv1.AddressTypeIPv4 || len(s.Endpoints) != 1 || !slices.Equal(s.Endpoints[0].Addresses, []string{podIP.String()}) ||
			s.Endpoints[0].Hostname != nil || len(s.Ports) != 1 || ptr.Deref(s.Ports[0].Port, 0) != 80 || ptr.Deref(s.Ports[0].Name, "") != "http" {
			t.Errorf("slice = %+v, want pod %s on port http:80, not the ClusterIP %s", s, podIP, svc.Spec.ClusterIP)
		}
		for k, want := range map[string]string{mcsv1beta1.LabelServiceName: "web", mcsv1beta1.LabelSourceCluster: "east", v1alpha1.ClusterLabel: "east"} {
			if s.Labels[k] != want {
				t.Errorf("slice label %s = %q, want %q", k, s.Labels[k], want)
			}
		}

		// Unexporting withdraws.
		if err := east.Delete(t.Context(), ex); err != nil {
			t.Fatal(err)
		}
		f.waitWithdrawn(t, "east", "shop", "web")
	})

	t.Run("ExternalName is refused with InvalidServiceType", func(t *testing.T) {
		create(t, east,
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "shop"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}},
			export("shop", "ext"))
		waitConditions(t, east, "shop", "ext", mcsv1beta1.ServiceExportReasonInvalidServiceType, mcsv1beta1.ServiceExportReasonFailed)
		if r, s, err := f.published(t.Context(), "east", "shop", "ext"); err != nil || len(r)+len(s) > 0 {
			t.Errorf("an ExternalName export is on the hub: %d records, %d slices, %v", len(r), len(s), err)
		}
	})

	t.Run("headless: ready pods with hostnames; an unready pod drops out; deleting the Service withdraws", func(t *testing.T) {
		create(t, east,
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}, Spec: corev1.ServiceSpec{
				ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"},
				Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}},
			}},
			export("shop", "db"))
		podNet := f.env.Cluster("east").PodCIDR.Addr()
		ip0, ip1 := podNet.Next().Next(), podNet.Next().Next().Next()
		runPod(t, east, "db-0", "db-0", ip0)
		runPod(t, east, "db-1", "", ip1)
		waitConditions(t, east, "shop", "db", mcsv1beta1.ServiceExportReasonValid, mcsv1beta1.ServiceExportReasonExported)
		// db-1 has no hostname and is published without one: DNS names it by its dashed address.
		want := map[string]string{ip0.String(): "db-0", ip1.String(): ""}
		eventually(t, "both pods published", func(ctx context.Context) string { return f.checkEndpoints(ctx, "east", "shop", "db", want) })
		records, _, _ := f.published(t.Context(), "east", "shop", "db")
		if len(records) != 1 || records[0].Spec.Type != mcsv1beta1.Headless {
			t.Errorf("records = %+v, want one Headless", records)
		}

		setReady(t, east, "db-1", ip1, false)
		delete(want, ip1.String())
		eventually(t, "the unready pod withdrawn", func(ctx context.Context) string { return f.checkEndpoints(ctx, "east", "shop", "db", want) })

		if err := east.Delete(t.Context(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}}); err != nil {
			t.Fatal(err)
		}
		waitConditions(t, east, "shop", "db", mcsv1beta1.ServiceExportReasonNoService, mcsv1beta1.ServiceExportReasonPending)
		f.waitWithdrawn(t, "east", "shop", "db")
	})

	t.Run("deleting the namespace withdraws", func(t *testing.T) {
		create(t, west, namespace("tmp"),
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "tmp", Namespace: "tmp"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}},
			export("tmp", "tmp"))
		waitConditions(t, west, "tmp", "tmp", mcsv1beta1.ServiceExportReasonValid, mcsv1beta1.ServiceExportReasonExported)
		if err := west.Delete(t.Context(), namespace("tmp")); err != nil {
			t.Fatal(err)
		}
		f.waitWithdrawn(t, "west", "tmp", "tmp")
	})

	t.Run("a cluster cannot alter another's published slices", func(t *testing.T) {
		create(t, west,
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "shop"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}}},
			export("shop", "api"))
		f.serve(t, "west", types.NamespacedName{Namespace: "shop", Name: "api"})
		waitConditions(t, west, "shop", "api", mcsv1beta1.ServiceExportReasonValid, mcsv1beta1.ServiceExportReasonExported)
		var target discoveryv1.EndpointSlice
		eventually(t, "west's slice of shop/api", func(ctx context.Context) string {
			_, s, err := f.published(ctx, "west", "shop", "api")
			if err != nil || len(s) != 1 {
				return fmt.Sprintf("%d slices, %v", len(s), err)
			}
			target = s[0]
			return ""
		})
		asEast := testenv.Client(t, f.joined["east"].Credential.RESTConfig())
		evil := netip.MustParseAddr("10.101.0.66").String()

		hijack := target.DeepCopy()
		hijack.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{evil}}}
		relabel := hijack.DeepCopy()
		relabel.Labels[v1alpha1.ClusterLabel] = "east"
		forged := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "forged", Namespace: f.ns, Labels: target.Labels},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: hijack.Endpoints,
		}
		for what, do := range map[string]func() error{
			"overwrite":             func() error { return asEast.Update(t.Context(), hijack) },
			"relabel and overwrite": func() error { return asEast.Update(t.Context(), relabel) },
			"delete":                func() error { return asEast.Delete(t.Context(), target.DeepCopy()) },
			"create as west":        func() error { return asEast.Create(t.Context(), forged) },
		} {
			err := do()
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may only") {
				t.Errorf("%s west's slice with east's credential: got %v, want the ownership policy's refusal", what, err)
			}
		}
		got := &discoveryv1.EndpointSlice{}
		if err := f.hub.Get(t.Context(), client.ObjectKeyFromObject(&target), got); err != nil || slices.ContainsFunc(got.Endpoints, func(e discoveryv1.Endpoint) bool { return slices.Contains(e.Addresses, evil) }) {
			t.Errorf("west's slice after the attempts: %+v, %v", got.Endpoints, err)
		}
	})

	t.Run("leaving withdraws everything the cluster published", func(t *testing.T) {
		if r, _, err := f.published(t.Context(), "west", "shop", "api"); err != nil || len(r) != 1 {
			t.Fatalf("west's record of shop/api before leaving: %d, %v", len(r), err)
		}
		f.stop["west"]() // as `octopus leave` does, so that the agent cannot publish again
		if err := cluster.Leave(t.Context(), f.env.Cluster("west").RESTConfig(), cluster.LeaveOptions{}); err != nil {
			t.Fatalf("leave: %v", err)
		}
		f.waitWithdrawn(t, "west", "shop", "api")
	})
}

// checkEndpoints compares the addresses and hostnames of what cluster published for
// namespace/name with want (address → hostname).
func (f *fabric) checkEndpoints(ctx context.Context, clusterID, namespace, name string, want map[string]string) string {
	_, slices, err := f.published(ctx, clusterID, namespace, name)
	if err != nil {
		return err.Error()
	}
	got := map[string]string{}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if !ptr.Deref(ep.Conditions.Ready, true) || len(s.Ports) != 1 || ptr.Deref(s.Ports[0].Port, 0) != 5432 {
				return fmt.Sprintf("slice %s: endpoint %+v, ports %+v", s.Name, ep, s.Ports)
			}
			got[ep.Addresses[0]] = ptr.Deref(ep.Hostname, "")
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		local := &discoveryv1.EndpointSliceList{}
		_ = f.members[clusterID].List(ctx, local, client.InNamespace(namespace), client.MatchingLabels{discoveryv1.LabelServiceName: name})
		return fmt.Sprintf("published %v, want %v; local slices %s", got, want, toJSONString(local.Items))
	}
	return ""
}

// runPod creates a pod of app=db on node-1 and plays kubelet: it reports the pod running and
// ready at ip, so that kube-controller-manager puts it into the Service's EndpointSlices.
func runPod(t *testing.T, c client.Client, name, hostname string, ip netip.Addr) {
	t.Helper()
	runAppPod(t, c, "db", name, hostname, ip)
}

// runAppPod runs pod name of app (its label app=<app>, the selector of the Service of that
// name) in namespace shop at ip, ready.
func runAppPod(t *testing.T, c client.Client, app, name, hostname string, ip netip.Addr) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			NodeName: "node-1", Containers: []corev1.Container{{Name: app, Image: app}},
			AutomountServiceAccountToken: ptr.To(false),
		},
	}
	if hostname != "" {
		pod.Spec.Hostname, pod.Spec.Subdomain = hostname, app
	}
	// The namespace's default ServiceAccount, which admission requires, appears shortly after
	// the namespace.
	eventually(t, "creating pod "+name, func(ctx context.Context) string {
		if err := c.Create(ctx, pod.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
			return err.Error()
		}
		return ""
	})
	setReady(t, c, name, ip, true)
}

// setReady reports pod name running at ip, ready or not, as a kubelet would.
func setReady(t *testing.T, c client.Client, name string, ip netip.Addr, ready bool) {
	t.Helper()
	testenv.ReportPod(t, c, "shop", name, ip, ready)
}

func toJSONString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
