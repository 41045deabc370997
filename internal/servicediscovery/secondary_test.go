package servicediscovery_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

// setSecondaryAddress plays the ovnmaster for pod shop/name of c: it writes the pod's secondary
// network entry with ip into its network-status annotation, or removes it when ip is invalid.
func setSecondaryAddress(t *testing.T, c client.Client, name string, ip netip.Addr) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "shop", Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	var entry *podnet.Status
	if ip.IsValid() {
		entry = ptr.To(podnet.Entry(ip, "0a:58:00:00:00:01"))
	}
	v, err := podnet.Set(pod.Annotations[podnet.NetworkStatusAnnotation], entry)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(pod.DeepCopy())
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[podnet.NetworkStatusAnnotation] = v
	if err := c.Patch(t.Context(), pod, patch); err != nil {
		t.Fatalf("annotating pod %s: %v", name, err)
	}
}

// TestSecondaryAddressing: east and west are on the secondary network, north on the primary
// one (direct). A ClusterSetIP service of east is published with its ready pods' secondary
// (net1) addresses as the ovnmaster reports them, never with a primary address; west imports
// it with those addresses and without a virtual IP; and the mixed set is refused per service:
// north's export of the same service is not imported by west, nor east's by north.
func TestSecondaryAddressing(t *testing.T) {
	secondary := v1alpha1.AddressingSecondary
	f := newFabricAddressed(t, agent.ControllerOptions{}, map[string]v1alpha1.Addressing{"east": secondary, "west": secondary}, "east", "west", "north")
	east, west, north := f.members["east"], f.members["west"], f.members["north"]
	create(t, east, namespace("shop"), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	create(t, west, namespace("shop"))
	create(t, north, namespace("shop"))
	key := types.NamespacedName{Namespace: "shop", Name: "web"}

	block := netip.MustParsePrefix(f.joined["east"].Cluster.Spec.SecondaryCIDR)
	sec0, sec1 := block.Addr().Next().Next(), block.Addr().Next().Next().Next()
	primary := f.env.Cluster("east").PodCIDR.Addr()
	ip0, ip1 := primary.Next().Next(), primary.Next().Next().Next()

	create(t, east, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}, export("shop", "web"))
	runAppPod(t, east, "web", "web-0", "", ip0)
	runAppPod(t, east, "web", "web-1", "", ip1)

	// published waits until east's slices on the hub hold exactly want, failing at once if an
	// address outside east's secondary block is ever published.
	published := func(what string, want ...netip.Addr) {
		t.Helper()
		eventually(t, what, func(ctx context.Context) string {
			_, slices, err := f.published(ctx, "east", "shop", "web")
			if err != nil {
				return err.Error()
			}
			var got []netip.Addr
			for _, s := range slices {
				for _, ep := range s.Endpoints {
					a := netip.MustParseAddr(ep.Addresses[0])
					if !block.Contains(a) {
						t.Fatalf("east published %s, not a secondary address of %s (slice %s)", a, block, toJSONString(s))
					}
					got = append(got, a)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Sprintf("published %v, want %v", got, want)
			}
			return ""
		})
	}

	t.Run("pods are published once the ovnmaster gave them a secondary address", func(t *testing.T) {
		waitConditions(t, east, "shop", "web", mcsv1beta1.ServiceExportReasonValid, mcsv1beta1.ServiceExportReasonExported)
		records, _, err := f.published(t.Context(), "east", "shop", "web")
		if err != nil || len(records) != 1 || records[0].Annotations[v1alpha1.AddressingAnnotation] != string(secondary) {
			t.Fatalf("east's record is not marked secondary: %s, %v", toJSONString(records), err)
		}
		published("no address before the ovnmaster's")
		setSecondaryAddress(t, east, "web-1", sec1)
		published("web-1 by its secondary address", sec1)
		setSecondaryAddress(t, east, "web-0", sec0)
		published("both pods by their secondary addresses", sec0, sec1)
	})

	t.Run("west imports the secondary addresses, with their target port and no virtual IP", func(t *testing.T) {
		got := f.waitImport(t, "west", key, wantImport{typ: mcsv1beta1.ClusterSetIP, ports: []string{"http:80/TCP"}, secondary: true,
			endpoints: map[string][]string{"east": {sec0.String(), sec1.String()}}})
		for _, s := range got.slices {
			if len(s.Ports) != 1 || ptr.Deref(s.Ports[0].Port, 0) != 8080 || ptr.Deref(s.Ports[0].Name, "") != "http" {
				t.Errorf("imported slice %s ports %s, want http:8080", s.Name, toJSONString(s.Ports))
			}
		}
		// The exporter's own import too: its pods reach their own cluster's block over net1.
		f.waitImport(t, "east", key, wantImport{typ: mcsv1beta1.ClusterSetIP, ports: []string{"http:80/TCP"}, secondary: true,
			endpoints: map[string][]string{"east": {sec0.String(), sec1.String()}}})
	})

	t.Run("a mixed set is refused per service: each side imports only its own kind", func(t *testing.T) {
		create(t, north, clusterIPService("shop", "web", corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}), export("shop", "web"))
		northIP := f.serve(t, "north", key)
		f.waitImport(t, "north", key, wantImport{typ: mcsv1beta1.ClusterSetIP, ports: []string{"http:80/TCP"},
			endpoints: map[string][]string{"north": {northIP}}})
		f.waitImport(t, "west", key, wantImport{typ: mcsv1beta1.ClusterSetIP, ports: []string{"http:80/TCP"}, secondary: true,
			endpoints: map[string][]string{"east": {sec0.String(), sec1.String()}}})
	})

	t.Run("a pod losing its secondary address is withdrawn", func(t *testing.T) {
		setSecondaryAddress(t, east, "web-0", netip.Addr{})
		published("web-0 withdrawn", sec1)
		f.waitImport(t, "west", key, wantImport{typ: mcsv1beta1.ClusterSetIP, ports: []string{"http:80/TCP"}, secondary: true,
			endpoints: map[string][]string{"east": {sec1.String()}}})
		imported := &discoveryv1.EndpointSliceList{}
		if err := west.List(t.Context(), imported, client.InNamespace("shop"), client.MatchingLabels{mcsv1beta1.LabelSourceCluster: "north"}); err != nil || len(imported.Items) != 0 {
			t.Errorf("west imported north's slices: %s, %v", toJSONString(imported.Items), err)
		}
	})
}
