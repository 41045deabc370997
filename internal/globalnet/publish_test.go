package globalnet_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/globalnet"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/servicediscovery"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestPublishesGlobalAddresses joins a cluster with globalnet addressing to a real hub and runs
// the allocator next to the export controller with GlobalAddresses, as the agent of a globalnet
// cluster would: what reaches the hub are global addresses only, the ClusterSetIP service's
// with its service ports, each headless pod's own with its target port and hostname; the
// cluster's own import of the service holds its local pod addresses instead; and an unexport
// withdraws them and releases the addresses. On these dual-stack API servers an IPv6
// single-stack Service gets no address and its export is Valid=False (UnsupportedIPFamily),
// published nowhere, until it is given IPv4 as well.
func TestPublishesGlobalAddresses(t *testing.T) {
	env := testenv.DualStackControlPlanes(t, "hub", "west")
	info, err := hub.Deploy(t.Context(), env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		t.Fatal(err)
	}
	west := env.Cluster("west")
	j, err := cluster.Join(t.Context(), west.RESTConfig(), cluster.JoinOptions{
		BrokerInfo: info, ClusterID: "west", PodCIDRs: []string{west.PodCIDR.String()}, Addressing: v1alpha1.AddressingGlobalnet,
	})
	if err != nil {
		t.Fatal(err)
	}
	layout, err := globalip.NewLayout(netip.MustParsePrefix(j.Cluster.Spec.GlobalCIDR), 0)
	if err != nil {
		t.Fatal(err)
	}
	m := memberOf(t, west.RESTConfig())
	m.start(t, func(mgr manager.Manager) error {
		if err := globalnet.SetupAllocator(mgr, layout); err != nil {
			return err
		}
		return servicediscovery.Setup(mgr, servicediscovery.ExportOptions{
			Hub: j.Credential.RESTConfig(), HubNamespace: info.Namespace, ClusterID: "west", Addresses: servicediscovery.GlobalAddresses{},
		})
	})
	m.service(t, "web", false, "10.244.1.5", "10.244.1.6")
	m.service(t, "db", true, "10.244.2.5", "10.244.2.6")
	records := m.waitRecords(t, "addresses for web and the db pods", map[string]string{"svc-web": "*", "pod-db-0": "*", "pod-db-1": "*"})

	hubClient := testenv.Client(t, env.Cluster("hub").RESTConfig())
	published := func(ctx context.Context, service string) ([]string, error) {
		list := &discoveryv1.EndpointSliceList{}
		if err := hubClient.List(ctx, list, client.InNamespace(info.Namespace), client.MatchingLabels{
			mcsv1beta1.LabelServiceName: service, mcsv1beta1.LabelSourceCluster: "west", v1alpha1.ServiceNamespaceLabel: ns,
		}); err != nil {
			return nil, err
		}
		var out []string
		for _, s := range list.Items {
			var ports []string
			for _, p := range s.Ports {
				ports = append(ports, fmt.Sprintf("%s:%d/%s", ptr.Deref(p.Name, ""), ptr.Deref(p.Port, 0), ptr.Deref(p.Protocol, "")))
			}
			slicesPorts := strings.Join(ports, ",")
			for _, ep := range s.Endpoints {
				out = append(out, fmt.Sprintf("%s %s %s", strings.Join(ep.Addresses, ","), ptr.Deref(ep.Hostname, "-"), slicesPorts))
			}
		}
		slices.Sort(out)
		return out, nil
	}
	want := map[string][]string{
		"web": {records["svc-web"] + " - dns:53/UDP,http:80/TCP"},
		// The db pods' endpoints have no hostname, so none is published: DNS names them by
		// their (global) address in dashed form, as the cluster DNS specification says.
		"db": {records["pod-db-0"] + " - dns:5353/UDP,http:8080/TCP", records["pod-db-1"] + " - dns:5353/UDP,http:8080/TCP"},
	}
	slices.Sort(want["db"])
	for service, w := range want {
		eventually(t, service+" published with global addresses", func(ctx context.Context) string {
			got, err := published(ctx, service)
			if err != nil {
				return err.Error()
			}
			if !slices.Equal(got, w) {
				return fmt.Sprintf("hub has %q, want %q", got, w)
			}
			return ""
		})
	}

	// The cluster's own import of web holds its pods' own addresses: its pods could not reach
	// its global IP (the gateway translates only traffic from other clusters).
	eventually(t, "west imports its own web with its local endpoints", func(ctx context.Context) string {
		list := &discoveryv1.EndpointSliceList{}
		if err := m.c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{mcsv1beta1.LabelServiceName: "web", mcsv1beta1.LabelSourceCluster: "west"}); err != nil {
			return err.Error()
		}
		var got []string
		for _, s := range list.Items {
			for _, ep := range s.Endpoints {
				got = append(got, ep.Addresses...)
			}
		}
		slices.Sort(got)
		if want := []string{"10.244.1.5", "10.244.1.6"}; !slices.Equal(got, want) {
			return fmt.Sprintf("imported endpoints %q, want %q", got, want)
		}
		return ""
	})

	if err := m.c.Delete(t.Context(), &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "web withdrawn", func(ctx context.Context) string {
		if got, err := published(ctx, "web"); err != nil || len(got) > 0 {
			return fmt.Sprintf("hub has %q, %v", got, err)
		}
		return ""
	})
	m.waitRecords(t, "web's address released", map[string]string{"pod-db-0": records["pod-db-0"], "pod-db-1": records["pod-db-1"]})

	// An IPv6-only Service: refused, with nothing allocated or published, until it has IPv4.
	v6 := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "v6"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "v6"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
			IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol}, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
		},
	}
	if err := m.c.Create(t.Context(), v6); err != nil {
		t.Fatal(err)
	}
	m.pod(t, "v6-0", "v6", netip.MustParseAddr("10.244.3.5"), true)
	m.export(t, "v6")
	waitValid(t, m.c, "v6", metav1.ConditionFalse, string(servicediscovery.ReasonUnsupportedIPFamily))
	m.waitRecords(t, "no address for the IPv6-only v6", map[string]string{"pod-db-0": records["pod-db-0"], "pod-db-1": records["pod-db-1"]})
	if got, err := published(t.Context(), "v6"); err != nil || len(got) > 0 {
		t.Fatalf("the IPv6-only v6 is on the hub: %q, %v", got, err)
	}
	if err := m.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "v6"}, v6); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(v6.DeepCopy())
	v6.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyPreferDualStack)
	if err := m.c.Patch(t.Context(), v6, patch); err != nil {
		t.Fatalf("giving v6 IPv4 as well: %v", err)
	}
	waitValid(t, m.c, "v6", metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonValid))
	records = m.waitRecords(t, "an address for the dual-stack v6", map[string]string{"svc-v6": "*", "pod-db-0": records["pod-db-0"], "pod-db-1": records["pod-db-1"]})
	eventually(t, "v6 published with its global address", func(ctx context.Context) string {
		got, err := published(ctx, "v6")
		if want := []string{records["svc-v6"] + " - http:80/TCP"}; err != nil || !slices.Equal(got, want) {
			return fmt.Sprintf("hub has %q, %v; want %q", got, err, want)
		}
		return ""
	})
}

// waitValid waits until the ServiceExport name in ns has a Valid condition of status and reason.
func waitValid(t *testing.T, c client.Client, name string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, fmt.Sprintf("export %s Valid=%s (%s)", name, status, reason), func(ctx context.Context) string {
		ex := &mcsv1beta1.ServiceExport{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ex); err != nil {
			return err.Error()
		}
		v := meta.FindStatusCondition(ex.Status.Conditions, string(mcsv1beta1.ServiceExportConditionValid))
		if v == nil || v.Status != status || v.Reason != reason {
			return fmt.Sprintf("Valid %+v", v)
		}
		t.Logf("export %s: Valid=%s %s: %s", name, v.Status, v.Reason, v.Message)
		return ""
	})
}
