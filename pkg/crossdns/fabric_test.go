package crossdns_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// startAgent runs what `octopus-agent controller` runs for cluster name until the test ends.
func startAgent(t *testing.T, name string, cfg *rest.Config) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.RunController(ctx, agent.ControllerOptions{
			Member: cfg, HealthProbeBindAddress: "0", MetricsBindAddress: "0", Identity: name,
			CredentialPollInterval: 100 * time.Millisecond,
		})
	}()
	t.Cleanup(sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent of %s: %v", name, err)
		}
	}))
}

// runPod creates pod name (app=db) on node-1 of c and reports it running at ip, ready or not,
// as a kubelet would, so that kube-controller-manager puts it into the Service's slices.
func runPod(t *testing.T, c client.Client, name, hostname string, ip netip.Addr) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{
			NodeName: "node-1", Containers: []corev1.Container{{Name: "db", Image: "postgres"}},
			AutomountServiceAccountToken: ptr.To(false),
		},
	}
	if hostname != "" {
		pod.Spec.Hostname, pod.Spec.Subdomain = hostname, "db"
	}
	// The namespace's default ServiceAccount, which admission requires, appears shortly after
	// the namespace.
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, pod.DeepCopy())
		return err == nil || apierrors.IsAlreadyExists(err), nil
	})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	setReady(t, c, name, ip, true)
}

func setReady(t *testing.T, c client.Client, name string, ip netip.Addr, ready bool) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "shop", Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}}, StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: now}},
	}
	if err := c.Status().Update(t.Context(), pod); err != nil {
		t.Fatalf("reporting pod %s ready=%v: %v", name, ready, err)
	}
}

// TestServiceDiscovery: services exported in east with the real servicediscovery controllers
// resolve in west through crossdns, and follow readiness changes and unexports.
func TestServiceDiscovery(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east", "west")
	info, err := hub.Deploy(t.Context(), env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		t.Fatalf("deploying the hub: %v", err)
	}
	members := map[string]client.Client{}
	for _, name := range []string{"east", "west"} {
		cfg := env.Cluster(name).RESTConfig()
		if _, err := cluster.Join(t.Context(), cfg, cluster.JoinOptions{BrokerInfo: info, ClusterID: name, PodCIDRs: []string{env.Cluster(name).PodCIDR.String()}}); err != nil {
			t.Fatalf("joining %s: %v", name, err)
		}
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

	t.Run("ClusterSetIP: the import's IP, SRV per named port", func(t *testing.T) {
		mustCreate(t, east,
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: corev1.ServiceSpec{
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			}},
			&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}})
		var ip string
		err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			si := &mcsv1beta1.ServiceImport{}
			if err := west.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "web"}, si); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			if len(si.Spec.IPs) == 0 {
				return false, nil
			}
			ip = si.Spec.IPs[0]
			return true, nil
		})
		if err != nil {
			t.Fatalf("no ServiceImport shop/web with an IP in west: %v", err)
		}
		if !env.Cluster("west").ServiceCIDR.Contains(netip.MustParseAddr(ip)) {
			t.Fatalf("west's import IP %s is not from west's service CIDR", ip)
		}
		waitAnswer(t, "udp", udp, "web.shop.svc.clusterset.local.", dns.TypeA, is(positive("A "+ip)))
		srv := positive("SRV 0 100 80 web.shop.svc.clusterset.local.")
		srv.nExtra = 1
		waitAnswer(t, "tcp", tcp, "_http._tcp.web.shop.svc.clusterset.local.", dns.TypeSRV, is(srv))
		waitAnswer(t, "udp", udp, "east.web.shop.svc.clusterset.local.", dns.TypeA, is(nxdomain))
	})

	podNet := env.Cluster("east").PodCIDR.Addr()
	ip0, ip1 := podNet.Next().Next(), podNet.Next().Next().Next()
	t.Run("headless: every ready endpoint, per-host names, SRV to them", func(t *testing.T) {
		mustCreate(t, east,
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}, Spec: corev1.ServiceSpec{
				ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"},
				Ports: []corev1.ServicePort{{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}},
			}},
			&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}})
		runPod(t, east, "db-0", "db-0", ip0)
		runPod(t, east, "db-1", "", ip1)
		waitAnswer(t, "udp", udp, "db.shop.svc.clusterset.local.", dns.TypeA, is(positive("A "+ip0.String(), "A "+ip1.String())))
		waitAnswer(t, "udp", udp, "db-0.east.db.shop.svc.clusterset.local.", dns.TypeA, is(positive("A "+ip0.String())))
		// An endpoint without a hostname is named by its address in dashed form, as the
		// cluster DNS specification says (the MCS one follows it), not by its pod.
		dashed1 := strings.ReplaceAll(ip1.String(), ".", "-")
		srv := positive(
			"SRV 0 50 5432 db-0.east.db.shop.svc.clusterset.local.",
			"SRV 0 50 5432 "+dashed1+".east.db.shop.svc.clusterset.local.")
		srv.nExtra = 2
		waitAnswer(t, "tcp", tcp, "_pg._tcp.db.shop.svc.clusterset.local.", dns.TypeSRV, is(srv))
		waitAnswer(t, "udp", udp, dashed1+".east.db.shop.svc.clusterset.local.", dns.TypeA, is(positive("A "+ip1.String())))
		waitAnswer(t, "udp", udp, "db-1.east.db.shop.svc.clusterset.local.", dns.TypeA, is(nxdomain))
		waitAnswer(t, "udp", udp, "east.db.shop.svc.clusterset.local.", dns.TypeA, is(nodata))
	})

	t.Run("an endpoint going unready disappears", func(t *testing.T) {
		setReady(t, east, "db-0", ip0, false)
		waitAnswer(t, "udp", udp, "db.shop.svc.clusterset.local.", dns.TypeA, is(positive("A "+ip1.String())))
		waitAnswer(t, "udp", udp, "db-0.east.db.shop.svc.clusterset.local.", dns.TypeA, is(nxdomain))
	})

	t.Run("an unexport removes the name", func(t *testing.T) {
		if err := east.Delete(t.Context(), &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}}); err != nil {
			t.Fatal(err)
		}
		waitAnswer(t, "udp", udp, "web.shop.svc.clusterset.local.", dns.TypeA, is(nxdomain))
		waitAnswer(t, "tcp", tcp, "_http._tcp.web.shop.svc.clusterset.local.", dns.TypeSRV, is(nxdomain))
		// The other service is untouched.
		waitAnswer(t, "udp", udp, "db.shop.svc.clusterset.local.", dns.TypeA, is(positive("A "+ip1.String())))
	})
}
