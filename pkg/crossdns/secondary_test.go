package crossdns_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// annotateSecondary plays the ovnmaster: it gives pod shop/name of c the secondary address ip
// in its network-status annotation.
func annotateSecondary(t *testing.T, c client.Client, name string, ip netip.Addr) {
	t.Helper()
	v, err := podnet.Set("", ptr.To(podnet.Entry(ip, "0a:58:00:00:00:01")))
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}
	patch := client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, podnet.NetworkStatusAnnotation, v))
	if err := c.Patch(t.Context(), pod, patch); err != nil {
		t.Fatalf("annotating pod %s: %v", name, err)
	}
}

// TestServiceDiscoverySecondary: east and west are on the secondary network. A ClusterSetIP
// service exported in east, with the real servicediscovery controllers, resolves in west over
// DNS (UDP and TCP) to its pods' secondary (net1) addresses: west's import has no virtual IP,
// which its pods could not reach over net1. It fails without crossdns answering such an import
// with its endpoints (NXDOMAIN: the import has no ips).
func TestServiceDiscoverySecondary(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east", "west")
	info, err := hub.Deploy(t.Context(), env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		t.Fatalf("deploying the hub: %v", err)
	}
	members := map[string]client.Client{}
	blocks := map[string]netip.Prefix{}
	for _, name := range []string{"east", "west"} {
		cfg := env.Cluster(name).RESTConfig()
		j, err := cluster.Join(t.Context(), cfg, cluster.JoinOptions{BrokerInfo: info, ClusterID: name, PodCIDRs: []string{env.Cluster(name).PodCIDR.String()},
			Addressing: v1alpha1.AddressingSecondary})
		if err != nil {
			t.Fatalf("joining %s: %v", name, err)
		}
		blocks[name] = netip.MustParsePrefix(j.Cluster.Spec.SecondaryCIDR)
		if members[name], err = client.New(cfg, client.Options{Scheme: kube.Scheme}); err != nil {
			t.Fatal(err)
		}
		startAgent(t, name, cfg)
	}
	east, west := members["east"], members["west"]
	for _, c := range []client.Client{east, west} {
		mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})
	}
	udp, tcp := startServer(t, fmt.Sprintf("clusterset.local:0 {\n bind 127.0.0.1\n crossdns {\n  kubeconfig %s\n }\n}\n",
		controlplane.KubeconfigPath(env.Dir, "west")))

	mustCreate(t, east,
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}, Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "db"},
			Ports:    []corev1.ServicePort{{Name: "pg", Port: 5432, TargetPort: intstr.FromInt32(5432), Protocol: corev1.ProtocolTCP}},
		}},
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}})
	podNet := env.Cluster("east").PodCIDR.Addr()
	sec0, sec1 := blocks["east"].Addr().Next().Next(), blocks["east"].Addr().Next().Next().Next()
	runPod(t, east, "db-0", "", podNet.Next().Next())
	runPod(t, east, "db-1", "", podNet.Next().Next().Next())
	annotateSecondary(t, east, "db-0", sec0)
	annotateSecondary(t, east, "db-1", sec1)

	name := "db.shop.svc.clusterset.local."
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		si := &mcsv1beta1.ServiceImport{}
		err := west.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: "db"}, si)
		t.Logf("west's import: %+v %+v %v", si.Annotations, si.Spec, err)
		sl := &discoveryv1.EndpointSliceList{}
		_ = east.List(context.Background(), sl, client.InNamespace("shop"))
		t.Logf("east's slices: %+v", sl.Items)
		_ = west.List(context.Background(), sl, client.InNamespace("shop"))
		t.Logf("west's slices: %+v", sl.Items)
	})
	waitAnswer(t, "udp", udp, name, dns.TypeA, is(positive("A "+sec0.String(), "A "+sec1.String())))
	waitAnswer(t, "tcp", tcp, name, dns.TypeA, is(positive("A "+sec0.String(), "A "+sec1.String())))
	srv := positive(
		"SRV 0 50 5432 "+dashed(sec0)+".east."+name,
		"SRV 0 50 5432 "+dashed(sec1)+".east."+name)
	srv.nExtra = 2
	waitAnswer(t, "udp", udp, "_pg._tcp."+name, dns.TypeSRV, is(srv))

	si := &mcsv1beta1.ServiceImport{}
	if err := west.Get(t.Context(), client.ObjectKey{Namespace: "shop", Name: "db"}, si); err != nil {
		t.Fatal(err)
	}
	if si.Spec.Type != mcsv1beta1.ClusterSetIP || len(si.Spec.IPs) != 0 {
		t.Errorf("west's import: type %s, ips %v; want ClusterSetIP without ips", si.Spec.Type, si.Spec.IPs)
	}

	t.Run("a pod going unready leaves the answer", func(t *testing.T) {
		setReady(t, east, "db-0", podNet.Next().Next(), false)
		waitAnswer(t, "udp", udp, name, dns.TypeA, is(positive("A "+sec1.String())))
	})
}

// dashed is addr's default endpoint hostname: the address with dashes.
func dashed(addr netip.Addr) string {
	b := []byte(addr.String())
	for i, c := range b {
		if c == '.' || c == ':' {
			b[i] = '-'
		}
	}
	return string(b)
}
